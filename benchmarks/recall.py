"""Vector search on real text: recall@10 and latency on SQLite and PostgreSQL.

The corpus (`corpus.py`) is about 100,000 sentences of installed docstrings embedded
with the bundled all-MiniLM-L6-v2, and 200 held-out sentences as queries. Each backend
holds the corpus as messages with their vectors (100 per session, sessions of ten
owners in turn); every query goes through ``Store.search(vector=..., k=10)``, over all
messages and over one owner's tenth, and its hits are compared with the exact top 10
that numpy finds by cosine over the same rows. PostgreSQL runs on a throwaway server
this script starts (tests/servers/postgresql.py), at each ``ef_search`` given.

    .venv/bin/python benchmarks/recall.py [--sentences N] [--ef-search 40,100,200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

import convostore
from convostore import MessageWrite, Role, Store, User
from corpus import Corpus, Matrix, load_corpus

# The test servers live in the repository's tests package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SESSION_SIZE = 100
OWNERS = 10
QUERY_OWNER = "owner-3"


class CorpusEmbedder:
    """Declares the corpus's vector index; queries come as vectors."""

    metric = "cosine"

    def __init__(self, name: str, dimensions: int) -> None:
        self.name = name
        self.dimensions = dimensions

    async def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        raise RuntimeError("the benchmark searches by vector")


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def owner_of_row(row: int) -> str:
    return f"owner-{(row // SESSION_SIZE) % OWNERS}"


def exact_top(
    vectors: Matrix, query: npt.NDArray[np.float32], rows: npt.NDArray[np.int64]
) -> set[int]:
    scores = vectors[rows] @ query
    best = np.argpartition(-scores, 10)[:10]
    return {int(rows[i]) for i in best}


async def load_through_store(store: Store, corpus: Corpus) -> dict[str, int]:
    """The corpus as messages, appended in batches through the public API; returns each
    message id's row."""
    owners = [User(f"owner-{n}", f"Owner {n}") for n in range(OWNERS)]
    row_of: dict[str, int] = {}
    for start in range(0, len(corpus.sentences), SESSION_SIZE):
        session = await store.create_session(owners[(start // SESSION_SIZE) % OWNERS])
        writes = [
            MessageWrite(
                Role.USER,
                corpus.sentences[row],
                embedding=corpus.vectors[row].tolist(),
                embedding_model=corpus.model,
            )
            for row in range(start, min(start + SESSION_SIZE, len(corpus.sentences)))
        ]
        await store.append_events(session.id, writes, expected_version=0)
        for event in await store.read(session.id):
            row_of[event.id] = start + event.seq - 1
    return row_of


async def measure(label: str, store: Store, corpus: Corpus, row_of: dict[str, int]) -> None:
    every_row = np.arange(len(corpus.sentences), dtype=np.int64)
    owner_rows = np.array(
        [row for row in every_row if owner_of_row(int(row)) == QUERY_OWNER], dtype=np.int64
    )
    for scope, owner, rows in (("all", None, every_row), ("one owner", QUERY_OWNER, owner_rows)):
        latencies: list[float] = []
        recalls: list[float] = []
        for query in corpus.query_vectors:
            began = time.perf_counter()
            hits = await store.search(vector=query.tolist(), k=10, owner_id=owner)
            latencies.append(time.perf_counter() - began)
            found = {row_of[hit.message.id] for hit in hits}
            recalls.append(len(found & exact_top(corpus.vectors, query, rows)) / 10)
        print(
            f"  {label:<28} {scope:<9} ({len(rows):>7,}): recall@10 "
            f"{statistics.mean(recalls):.3f} (min {min(recalls):.1f}), "
            f"p50 {percentile(latencies, 0.5) * 1000:6.2f} ms, "
            f"p95 {percentile(latencies, 0.95) * 1000:6.2f} ms"
        )


async def sqlite(corpus: Corpus) -> None:
    embedder = CorpusEmbedder(corpus.model, corpus.vectors.shape[1])
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{directory}/recall.db?synchronous=normal"
        async with await convostore.connect(url, embedder=embedder) as store:
            started = time.perf_counter()
            row_of = await load_through_store(store, corpus)
            print(f"  loaded in {time.perf_counter() - started:.0f} s")
            await store.search(vector=corpus.query_vectors[0].tolist(), k=10)  # warm
            await measure("SQLite", store, corpus, row_of)


async def postgresql(corpus: Corpus, ef_searches: Sequence[int]) -> None:
    from tests.servers.postgresql import PostgresServer

    embedder = CorpusEmbedder(corpus.model, corpus.vectors.shape[1])
    settings = {"maintenance_work_mem": "1GB", "shared_buffers": "512MB"}
    with PostgresServer(durable=False, settings=settings) as server:
        base = server.url()
        separator = "&" if "?" in base else "?"
        async with await convostore.connect(base + f"{separator}schema=recall") as store:
            started = time.perf_counter()
            row_of = await load_through_store(store, corpus)
            print(f"  loaded in {time.perf_counter() - started:.0f} s")
        for ef_search in ef_searches:
            url = base + f"{separator}schema=recall&ef_search={ef_search}"
            started = time.perf_counter()
            async with await convostore.connect(url, embedder=embedder) as store:
                if ef_search == ef_searches[0]:
                    print(f"  HNSW index built in {time.perf_counter() - started:.0f} s")
                await measure(f"PostgreSQL ef_search={ef_search}", store, corpus, row_of)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef-search", default="40,100,200")
    parser.add_argument("--backends", default="sqlite,postgresql")
    arguments = parser.parse_args()
    corpus = load_corpus(arguments.sentences, arguments.queries)
    print(
        f"real-text recall: {len(corpus.sentences):,} docstring sentences x "
        f"{corpus.vectors.shape[1]} ({corpus.model}), {len(corpus.queries)} held-out queries"
    )
    backends = arguments.backends.split(",")
    if "sqlite" in backends:
        asyncio.run(sqlite(corpus))
    if "postgresql" in backends:
        ef_searches = [int(value) for value in arguments.ef_search.split(",")]
        asyncio.run(postgresql(corpus, ef_searches))


if __name__ == "__main__":
    main()
