"""Vector top-10 on MariaDB: its own vector index, the shared vector cache and the
exact scan, on real text; and what each costs an append of one message with its vector.

The real-text corpus of `recall.py` (docstring sentences embedded with all-MiniLM-L6-v2,
cached by `corpus.py`) is loaded through the store into a throwaway MariaDB (11.8, the
copy scripts/fetch_mariadb.sh unpacks, or with ``--server 10.11`` Debian's; both started
by tests/servers/mariadb.py), without an embedder, so no graph is kept while loading.
Then, each a store of its own on that database (the URL's ``vector_search``):

- ``native`` (11.8 only): the store builds the graph (timed) and searches it at each
  ``ef_search`` given;
- ``cache``: the vectors in memory, following the change feed (its first search builds
  the cache: timed);
- ``scan``: every search reads the vectors in scope (the first ``--exact-queries``
  only), which is what every search did on 10.11 before the cache.

Every held-out query goes through ``Store.search(vector=..., k=10)`` over all messages
and over one owner's tenth; recall@10 is against numpy's exact top 10 over the same
rows. Last, appends of one message with its vector, turn by turn so the machine's load
falls on all alike: with the graph kept (11.8, the loaded database), with the cache's
change feed (a second database, which has no graph), and with the feed's step left out
(what an append was before the feed).

    .venv/bin/python benchmarks/mariadb_vectors.py [--server 11.8|10.11] [--durable]
        [--sentences N] [--ef-search 20,40,100] [--m 16]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import convostore
from convostore import MessageWrite, Role, Store, User
from convostore.backends.mysql import MySQLBackend, vector_feed
from convostore.backends.mysql.native_vectors import GraphVectors
from convostore.embedding import VectorIndexSpec
from corpus import Corpus, load_corpus
from recall import CorpusEmbedder, load_through_store, measure

# The test servers live in the repository's tests package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


async def run(
    corpus: Corpus,
    server_version: str,
    ef_searches: list[int],
    graph_m: int,
    exact_queries: int,
    durable: bool,
) -> None:
    from tests.servers.mariadb import MARIADB_11_HOME, MariaDBServer

    embedder = CorpusEmbedder(corpus.model, corpus.vectors.shape[1])
    settings = {"innodb-buffer-pool-size": "2G"}
    home = None
    if server_version == "11.8":
        settings["mhnsw-max-cache-size"] = str(2**31)
        home = MARIADB_11_HOME
    with MariaDBServer(home=home, settings=settings, durable=durable) as server:
        url = server.url("vectors")
        async with await convostore.connect(f"{url}?vector_search=scan") as store:
            started = time.perf_counter()
            row_of = await load_through_store(store, corpus)
            print(f"  loaded in {time.perf_counter() - started:.0f} s")
        first = corpus.query_vectors[0].tolist()
        if server_version == "11.8":
            async with await convostore.connect(f"{url}?vector_search=native") as store:
                backend = store.backend
                assert isinstance(backend, MySQLBackend)
                assert isinstance(backend.vectors, GraphVectors)
                assert backend.vectors.native
                backend.vectors.graph_m = graph_m
                started = time.perf_counter()
                await backend.declare_vector_index(VectorIndexSpec.of(embedder), replace=False)
                print(f"  graph (M={graph_m}) built in {time.perf_counter() - started:.0f} s")
            # The graph stands: connecting with the embedder finds it built.
            async with await convostore.connect(
                f"{url}?vector_search=native", embedder=embedder
            ) as store:
                backend = store.backend
                assert isinstance(backend, MySQLBackend)
                assert isinstance(backend.vectors, GraphVectors)
                for ef_search in ef_searches:
                    backend.vectors.ef_search = ef_search
                    await store.search(vector=first, k=10)  # warm
                    await measure(f"graph ef_search={ef_search}", store, corpus, row_of)
        async with await convostore.connect(
            f"{url}?vector_search=cache", embedder=embedder
        ) as store:
            started = time.perf_counter()
            await store.search(vector=first, k=10)
            print(f"  cache built by the first search in {time.perf_counter() - started:.1f} s")
            await measure("cache", store, corpus, row_of)
        async with await convostore.connect(
            f"{url}?vector_search=scan", embedder=embedder
        ) as store:
            await store.search(vector=first, k=10)  # warm
            scanned = dataclasses.replace(
                corpus,
                queries=corpus.queries[:exact_queries],
                query_vectors=corpus.query_vectors[:exact_queries],
            )
            await measure("exact scan (before)", store, scanned, row_of)
        await append_cost(url, server.url("appends"), server_version == "11.8", embedder, corpus)


async def append_cost(
    graph_url: str, url: str, with_graph: bool, embedder: CorpusEmbedder, corpus: Corpus
) -> None:
    """The median append of one message with its vector, per way, turn by turn."""
    owner = User("appender", "Appender")
    ways: dict[str, tuple[Store, Callable[..., Awaitable[None]] | None]] = {}
    opened: list[Store] = []
    for label, target, options in (
        ("graph kept (native)", graph_url, "native"),
        ("change feed (cache)", url, "cache"),
        ("no feed (before)", url, "cache"),
    ):
        if label.startswith("graph") and not with_graph:
            continue
        store = await convostore.connect(f"{target}?vector_search={options}", embedder=embedder)
        opened.append(store)
        ways[label] = (store, _skip_record if label.startswith("no feed") else None)
    record = vector_feed.record
    timings: dict[str, list[float]] = {label: [] for label in ways}
    try:
        sessions = {label: await store.create_session(owner) for label, (store, _) in ways.items()}
        for turn in range(10):
            for label, (store, replacement) in ways.items():
                setattr(vector_feed, "record", replacement or record)  # noqa: B010
                for row in range(20):
                    vector = corpus.query_vectors[(turn * 20 + row) % len(corpus.query_vectors)]
                    write = MessageWrite(
                        Role.USER,
                        "appended",
                        embedding=vector.tolist(),
                        embedding_model=corpus.model,
                    )
                    began = time.perf_counter()
                    await store.add_message(sessions[label].id, write)
                    timings[label].append(time.perf_counter() - began)
        for label, values in timings.items():
            median = statistics.median(values) * 1000
            print(f"  append of one message with its vector, {label:<20}: median {median:.2f} ms")
        # Eight writers at once: the feed's lock orders their last statement and commit.
        rates: dict[str, list[float]] = {"change feed (cache)": [], "no feed (before)": []}
        for _ in range(6):
            for label in rates:
                store, replacement = ways[label]
                setattr(vector_feed, "record", replacement or record)  # noqa: B010
                rates[label].append(await _writers(store, owner, corpus, 8, 25))
        for label, values in rates.items():
            print(
                f"  8 writers appending with vectors, {label:<20}: "
                f"{statistics.median(values):,.0f} msg/s"
            )
    finally:
        setattr(vector_feed, "record", record)  # noqa: B010
        for store in opened:
            await store.close()


async def _writers(store: Store, owner: User, corpus: Corpus, writers: int, each: int) -> float:
    """Messages with vectors per second, ``writers`` sessions appending at once."""
    sessions = [await store.create_session(owner) for _ in range(writers)]

    async def write(session_id: str, offset: int) -> None:
        for row in range(each):
            vector = corpus.query_vectors[(offset + row) % len(corpus.query_vectors)]
            await store.add_message(
                session_id,
                MessageWrite(
                    Role.USER, "appended", embedding=vector.tolist(), embedding_model=corpus.model
                ),
            )

    began = time.perf_counter()
    await asyncio.gather(*(write(s.id, n * each) for n, s in enumerate(sessions)))
    return writers * each / (time.perf_counter() - began)


async def _skip_record(*arguments: Any, **named: Any) -> None:
    """The feed's step left out: an append as it was before the feed."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=["11.8", "10.11"], default="11.8")
    parser.add_argument(
        "--durable",
        action="store_true",
        help="innodb_flush_log_at_trx_commit=1 (a flush per commit), not the tests' 2",
    )
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
        f"MariaDB {arguments.server} vectors: {len(corpus.sentences):,} docstring sentences x "
        f"{corpus.vectors.shape[1]} ({corpus.model}), {len(corpus.queries)} held-out queries"
    )
    ef_searches = [int(value) for value in arguments.ef_search.split(",")]
    asyncio.run(
        run(
            corpus,
            arguments.server,
            ef_searches,
            arguments.m,
            arguments.exact_queries,
            arguments.durable,
        )
    )


if __name__ == "__main__":
    main()
