"""SQLite vector search at scale: latency, recall@10, build time, memory per vector, and
the first search after a delete, an insert and a re-embedding.

The vectors are the real-text corpus (`corpus.py`: 100,000 docstring sentences embedded
with all-MiniLM-L6-v2). Past 100,000 the corpus is repeated with noise (each copy of a
vector moved by Gaussian noise of 0.03 per dimension, then scaled back to unit length):
those rows are synthetic, made to have the neighbourhoods of real text. Queries are the
corpus's 200 held-out sentences; recall@10 is measured against numpy's exact top 10 by
cosine over the same rows, over all rows and over one owner's tenth. Memory is the
cache's arrays per vector and the process's resident growth while the cache is built.

    .venv/bin/python benchmarks/vector_scale.py [--vectors 1000000] [--database PATH]

With ``--database``, the loaded database is kept there and reused by the next run of
the same size (its deletes and inserts are then part of it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

import convostore
from convostore import MessageWrite, Role, Store, User
from convostore.backends.sqlite import SQLiteBackend
from convostore.ids import new_stamp
from corpus import Matrix, load_corpus
from recall import CorpusEmbedder, percentile

SESSION_SIZE = 1000
OWNERS = 10
QUERY_OWNER = "owner-3"
NOISE = 0.03


def vectors_of(base: Matrix, count: int) -> Matrix:
    """``count`` unit vectors: the corpus, then noisy copies of it (see the module)."""
    rng = np.random.default_rng(5)
    parts = [base[: min(count, len(base))]]
    made = len(parts[0])
    while made < count:
        copy = base[: min(len(base), count - made)].copy()
        copy += NOISE * rng.standard_normal(copy.shape, dtype=np.float32)
        copy /= np.linalg.norm(copy, axis=1, keepdims=True)
        parts.append(copy)
        made += len(copy)
    return np.concatenate(parts)


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def load(store: Store, vectors: Matrix, model: str) -> list[str]:
    owners = [User(f"owner-{n}", f"Owner {n}") for n in range(OWNERS)]
    sessions = []
    for start in range(0, len(vectors), SESSION_SIZE):
        session = await store.create_session(owners[(start // SESSION_SIZE) % OWNERS])
        writes = [
            MessageWrite(
                Role.USER, f"row {row}", embedding=vectors[row].tolist(), embedding_model=model
            )
            for row in range(start, min(start + SESSION_SIZE, len(vectors)))
        ]
        await store.append_events(session.id, writes, expected_version=0)
        sessions.append(session.id)
    return sessions


def kept(path: str) -> tuple[list[str], npt.NDArray[np.int64]]:
    """The sessions and the corpus rows a database kept from an earlier run holds."""
    connection = sqlite3.connect(path)
    try:
        sessions = [row[0] for row in connection.execute("SELECT id FROM sessions ORDER BY rowid")]
        contents = connection.execute("SELECT content FROM events WHERE content LIKE 'row %'")
        live = sorted(int(row[0].removeprefix("row ")) for row in contents)
    finally:
        connection.close()
    return sessions, np.array(live, dtype=np.int64)


def exact_top(
    matrix: Matrix, query: npt.NDArray[np.float32], rows: npt.NDArray[np.int64]
) -> set[int]:
    """The corpus rows of the 10 best rows of ``matrix``, whose rows are ``rows``."""
    scores = matrix @ query
    best = np.argpartition(-scores, 10)[:10]
    return {int(rows[i]) for i in best}


def row_of(content: str | None) -> int:
    """The corpus row of a hit; -1 for the benchmark's extra message."""
    if content is None or not content.startswith("row "):
        return -1
    return int(content.removeprefix("row "))


async def timed_search(
    store: Store, query: Sequence[float], owner: str | None = None
) -> tuple[float, list[int]]:
    began = time.perf_counter()
    hits = await store.search(vector=list(query), k=10, owner_id=owner)
    return time.perf_counter() - began, [row_of(hit.message.content) for hit in hits]


def cpu_ms(began: float, searches: int) -> float:
    """The process's CPU time per search since ``began`` (less swayed by the machine's
    load than the wall clock)."""
    return (time.process_time() - began) / searches * 1000


async def run(count: int, queries: int, database: str | None) -> None:
    corpus = load_corpus(100_000, 200)
    vectors = vectors_of(corpus.vectors, count)
    embedder = CorpusEmbedder(corpus.model, vectors.shape[1])
    with tempfile.TemporaryDirectory() as directory:
        path = database or f"{directory}/scale.db"
        url = f"sqlite:///{path}?synchronous=normal"
        async with await convostore.connect(url, embedder=embedder) as store:
            sessions, live = kept(path)
            if not sessions:
                began = time.perf_counter()
                sessions = await load(store, vectors, corpus.model)
                took = time.perf_counter() - began
                print(f"  loaded {count:,} x {vectors.shape[1]} in {took:.0f} s")
                live = np.arange(count, dtype=np.int64)
        async with await convostore.connect(url, embedder=embedder) as store:
            backend = store.backend
            assert isinstance(backend, SQLiteBackend)
            before = resident_bytes()
            cold, _ = await timed_search(store, corpus.query_vectors[0])
            grown = resident_bytes() - before
            table = backend._vector_cache.table
            assert table is not None
            arrays = (
                sum(getattr(table, name)[: table.count].nbytes for name in table._ARRAYS)
                + table.signs[:, : table.count].nbytes
            )
            print(f"  cache built by the first search: {cold * 1000:.0f} ms")
            print(
                f"  memory: {arrays / table.count:.0f} bytes per vector in the cache's arrays;"
                f" resident growth {grown / count:.0f} bytes per vector ({grown / 2**20:.0f} MiB,"
                " with the room kept for appends)"
            )
            owner_rows = live[(live // SESSION_SIZE) % OWNERS == 3]
            for scope, owner, rows in (
                ("all", None, live),
                ("one owner", QUERY_OWNER, owner_rows),
            ):
                latencies, found = [], []
                began = time.process_time()
                for query in corpus.query_vectors[:queries]:
                    took, rows_found = await timed_search(store, query, owner)
                    latencies.append(took)
                    found.append(rows_found)
                cpu = cpu_ms(began, queries)
                matrix = vectors[rows]  # once: a copy per query would cost more than the search
                recalls = [
                    len(set(hits) & exact_top(matrix, query, rows)) / 10
                    for hits, query in zip(found, corpus.query_vectors, strict=False)
                ]
                del matrix
                print(
                    f"  {scope:<9} ({len(rows):>9,}): recall@10 {statistics.mean(recalls):.3f}"
                    f" (min {min(recalls):.1f}), p50 {percentile(latencies, 0.5) * 1000:.2f} ms,"
                    f" p95 {percentile(latencies, 0.95) * 1000:.2f} ms, CPU {cpu:.2f} ms a search"
                )
            matrix = vectors[live]
            latencies = []
            began = time.process_time()
            for query in corpus.query_vectors[:queries]:
                start = time.perf_counter()
                _ = matrix @ query
                latencies.append(time.perf_counter() - start)
            cpu = cpu_ms(began, queries)
            print(
                "  the float32 product alone (what the exact cache computed per search):"
                f" p50 {percentile(latencies, 0.5) * 1000:.2f} ms, CPU {cpu:.2f} ms"
            )
            del matrix
            query = corpus.query_vectors[1]
            await store.delete_session(sessions[len(sessions) // 2])
            took, _ = await timed_search(store, query)
            print(
                f"  first search after deleting a session of {SESSION_SIZE:,}: {took * 1000:.1f} ms"
            )
            session = await store.create_session(User("owner-0", "Owner 0"))
            write = MessageWrite(
                Role.USER, "extra", embedding=vectors[0].tolist(), embedding_model=corpus.model
            )
            message = await store.add_message(session.id, write)
            took, _ = await timed_search(store, query)
            print(f"  first search after an insert: {took * 1000:.1f} ms")
            vector = (message.id, tuple(vectors[1].tolist()))
            await backend.set_embeddings(corpus.model, [vector], new_stamp())
            took, _ = await timed_search(store, query)
            print(f"  first search after a re-embedding: {took * 1000:.1f} ms")
            await store.delete_session(session.id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--database")
    arguments = parser.parse_args()
    print(
        f"SQLite vector search, {arguments.vectors:,} vectors"
        f" (load average {os.getloadavg()[0]:.1f})"
    )
    asyncio.run(run(arguments.vectors, arguments.queries, arguments.database))


if __name__ == "__main__":
    main()
