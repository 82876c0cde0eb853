"""Vector top-10 on MariaDB 11.8: its own vector index against the exact scan.

The real-text corpus of `recall.py` (docstring sentences embedded with all-MiniLM-L6-v2,
cached by `corpus.py`) is loaded through the store into a throwaway MariaDB 11.8 (the
copy scripts/fetch_mariadb.sh unpacks; tests/servers/mariadb.py starts it), without an
embedder, so no graph is kept while loading. A store connected with the corpus's
embedder then builds the graph (timed). Every held-out query goes through
``Store.search(vector=..., k=10)`` over all messages and over one owner's tenth: on the
graph at each ``ef_search`` given, then by the exact scan (the same store with the
capability turned off, as on a server without vectors; the first ``--exact-queries``
only, as it reads every vector in scope). Recall@10 is against numpy's exact top 10
over the same rows. Last, the cost the graph adds to an append of one message with
its vector.

    .venv/bin/python benchmarks/mariadb_vectors.py [--sentences N] [--ef-search 20,40,100]
        [--m 16]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import convostore
from convostore import MessageWrite, Role, Store, User
from convostore.backends.mysql import MySQLBackend
from convostore.embedding import VectorIndexSpec
from corpus import Corpus, load_corpus
from recall import CorpusEmbedder, load_through_store, measure

# The test servers live in the repository's tests package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


async def run(corpus: Corpus, ef_searches: list[int], graph_m: int, exact_queries: int) -> None:
    from tests.servers.mariadb import MARIADB_11_HOME, MariaDBServer

    embedder = CorpusEmbedder(corpus.model, corpus.vectors.shape[1])
    settings = {"innodb-buffer-pool-size": "2G", "mhnsw-max-cache-size": str(2**31)}
    with MariaDBServer(home=MARIADB_11_HOME, settings=settings) as server:
        url = server.url("vectors")
        async with await convostore.connect(url) as store:
            started = time.perf_counter()
            row_of = await load_through_store(store, corpus)
            print(f"  loaded in {time.perf_counter() - started:.0f} s")
        async with await convostore.connect(url) as store:
            backend = store.backend
            assert isinstance(backend, MySQLBackend)
            assert backend.server_vectors
            backend.graph_m = graph_m
            started = time.perf_counter()
            await backend.declare_vector_index(VectorIndexSpec.of(embedder), replace=False)
            print(f"  graph (M={graph_m}) built in {time.perf_counter() - started:.0f} s")
        # The graph stands: connecting with the embedder finds it built.
        async with await convostore.connect(url, embedder=embedder) as store:
            backend = store.backend
            assert isinstance(backend, MySQLBackend)
            for ef_search in ef_searches:
                backend.ef_search = ef_search
                await store.search(vector=corpus.query_vectors[0].tolist(), k=10)  # warm
                await measure(f"MariaDB graph ef_search={ef_search}", store, corpus, row_of)
            backend.server_vectors = False
            await store.search(vector=corpus.query_vectors[0].tolist(), k=10)  # warm
            scanned = dataclasses.replace(
                corpus,
                queries=corpus.queries[:exact_queries],
                query_vectors=corpus.query_vectors[:exact_queries],
            )
            await measure("MariaDB exact scan", store, scanned, row_of)
            await append_cost(store, backend, corpus)


async def append_cost(store: Store, backend: MySQLBackend, corpus: Corpus) -> None:
    """One message with its vector per append, with the graph kept and without it
    (turn by turn, so the machine's load falls on both alike): the median append."""
    owner = User("appender", "Appender")
    timings: dict[bool, list[float]] = {True: [], False: []}
    session = await store.create_session(owner)
    for turn in range(10):
        backend.server_vectors = turn % 2 == 0
        for row in range(20):
            vector = corpus.query_vectors[(turn * 20 + row) % len(corpus.query_vectors)]
            write = MessageWrite(
                Role.USER, "appended", embedding=vector.tolist(), embedding_model=corpus.model
            )
            began = time.perf_counter()
            await store.add_message(session.id, write)
            timings[backend.server_vectors].append(time.perf_counter() - began)
    for graph, label in ((True, "graph kept"), (False, "no graph")):
        median = statistics.median(timings[graph]) * 1000
        print(f"  append of one message with its vector, {label:<10}: median {median:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sentences", type=int, default=100_000, help="the first N of the cached 100,000"
    )
    parser.add_argument("--queries", type=int, default=200, help="the first N of the 200")
    parser.add_argument("--ef-search", default="20,40,100,200")
    parser.add_argument("--m", type=int, default=16, help="the graph's neighbours per node")
    parser.add_argument(
        "--exact-queries", type=int, default=50, help="queries the (slow) exact scan runs"
    )
    arguments = parser.parse_args()
    # The cached corpus, cut down: never one of other sizes, which would be embedded anew.
    whole = load_corpus(100_000, 200)
    count, queries = arguments.sentences, arguments.queries
    corpus = dataclasses.replace(
        whole,
        sentences=whole.sentences[:count],
        vectors=whole.vectors[:count],
        queries=whole.queries[:queries],
        query_vectors=whole.query_vectors[:queries],
    )
    print(
        f"MariaDB 11.8 vectors: {len(corpus.sentences):,} docstring sentences x "
        f"{corpus.vectors.shape[1]} ({corpus.model}), {len(corpus.queries)} held-out queries"
    )
    ef_searches = [int(value) for value in arguments.ef_search.split(",")]
    asyncio.run(run(corpus, ef_searches, arguments.m, arguments.exact_queries))


if __name__ == "__main__":
    main()
