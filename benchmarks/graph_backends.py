"""The two graph backends side by side, through `Store` alone, in one run: FalkorDB
(tests/servers/falkordb.py: AOF with appendfsync always) and Neo4j Community 5.26
(tests/servers/neo4j.py: the transaction log flushed at each commit), each on a server
this script starts, with the same workload and data.

1. Appends: ``store.add_message`` of one short message, one at a time (median, p95).
2. The last-20 window of a 2,000-event log: ``store.read(id, EventFilter(last=20))``.
3. Listing: a page of 20 of one owner's 2,000 sessions, page 1 and page 50 (keyset),
   and a count.
4. Vectors: N messages x 384 dimensions (clustered unit vectors, 1,000 topics with
   noise; benchmarks/falkordb_bench.py's), appended through the store in batches of
   100 with their vectors; then top-10 searches (all messages, and one owner's tenth)
   with their recall@10 against an exact scan in numpy, and their latency.

    .venv/bin/python benchmarks/graph_backends.py [--vectors N] [--queries N] [--only neo4j]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import convostore
from convostore import EventFilter, MessageWrite, PageRequest, Role, Store, User
from convostore.ids import new_id

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from falkordb_bench import (
    CONTENT,
    MODEL,
    TOPICS,
    WIDTH,
    FixedEmbedder,
    clustered_vectors,
    percentile,
)

AUTHOR = User("ada", "Ada")
PER_SESSION = 100


def ms(values: list[float]) -> str:
    median, p95 = statistics.median(values) * 1000, percentile(values, 0.95) * 1000
    return f"median {median:.2f} ms, p95 {p95:.2f} ms"


async def timed(calls: int, call: Any) -> list[float]:
    latencies = []
    for _ in range(calls):
        began = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - began)
    return latencies


@contextlib.contextmanager
def servers(only: str | None) -> Iterator[list[tuple[str, Callable[[], str]]]]:
    """(name, a function giving the URL of an empty graph or database) per server."""
    from tests.servers.falkordb import FalkorDBServer
    from tests.servers.neo4j import Neo4jServer, wipe

    graphs = itertools.count(1)
    with contextlib.ExitStack() as stack:
        started: list[tuple[str, Callable[[], str]]] = []
        if only in (None, "falkordb"):
            falkor = stack.enter_context(FalkorDBServer())
            started.append(("FalkorDB", lambda: falkor.url(f"bench{next(graphs)}")))
        if only in (None, "neo4j"):
            neo = stack.enter_context(Neo4jServer())
            print(f"(Neo4j started in {neo.started_in:.1f} s)")

            def fresh() -> str:
                # Community serves one database: emptied for each figure.
                wipe(neo.url())
                return neo.url()

            started.append(("Neo4j", fresh))
        yield started


@contextlib.asynccontextmanager
async def opened(url: str, **options: Any) -> AsyncIterator[Store]:
    store = await convostore.connect(url, **options)
    try:
        yield store
    finally:
        await store.close()


async def appends_and_window(url: str, messages: int, reads: int) -> None:
    async with opened(url) as store:
        session = await store.create_session(AUTHOR)
        latencies = await timed(
            messages,
            lambda: store.add_message(session.id, MessageWrite(Role.USER, CONTENT, author=AUTHOR)),
        )
        print(f"   1. append                  {ms(latencies)}")
        log = await store.create_session(AUTHOR)
        batch = [MessageWrite(Role.USER, CONTENT, author=AUTHOR) for _ in range(100)]
        for version in range(20):
            assert await store.append_events(log.id, batch, version)
        latencies = await timed(reads, lambda: store.read(log.id, EventFilter(last=20)))
        print(f"   2. last 20 of 2,000        {ms(latencies)}")


async def listing(url: str) -> None:
    async with opened(url) as store:
        owner = User("lister", "Lister")
        for _ in range(2000):
            await store.create_session(owner)
        first = await timed(100, lambda: store.list_sessions(owner.id, PageRequest(size=20)))
        page = await store.list_sessions(owner.id, PageRequest(size=20))
        for _ in range(48):
            assert page.next_cursor is not None
            page = await store.list_sessions(
                owner.id, PageRequest(size=20, cursor=page.next_cursor)
            )
        cursor = page.next_cursor
        fiftieth = await timed(
            100, lambda: store.list_sessions(owner.id, PageRequest(size=20, cursor=cursor))
        )
        counted = await timed(20, lambda: store.count_sessions(owner.id))
        print(
            f"   3. listing page 1 {statistics.median(first) * 1000:.2f} ms,"
            f" page 50 {statistics.median(fiftieth) * 1000:.2f} ms,"
            f" count (2,000) {statistics.median(counted) * 1000:.2f} ms"
        )


async def vectors(url: str, count: int, queries: int) -> None:
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((TOPICS, WIDTH)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    matrix = clustered_vectors(count, rng, centers)
    probes = clustered_vectors(queries, rng, centers)
    owners = [User(f"owner-{n}", f"Owner {n}") for n in range(10)]
    async with opened(url, embedder=FixedEmbedder()) as store:
        began = time.perf_counter()
        ids: list[str] = []
        row_owner: list[str] = []
        for number in range(count // PER_SESSION):
            owner = owners[number % len(owners)]
            session = await store.create_session(owner)
            first = number * PER_SESSION
            writes = [
                MessageWrite(
                    Role.USER,
                    f"message {row}",
                    author=owner,
                    id=new_id(),
                    embedding=matrix[row].tolist(),
                    embedding_model=MODEL,
                )
                for row in range(first, first + PER_SESSION)
            ]
            assert await store.append_events(session.id, writes, 0)
            ids += [write.id for write in writes if write.id is not None]
            row_owner += [owner.id] * PER_SESSION
        print(
            f"   4. loaded {len(ids):,} x {WIDTH} through appends in"
            f" {time.perf_counter() - began:.1f} s"
        )
        row_of = {message_id: row for row, message_id in enumerate(ids)}
        owner_rows = np.array([r for r, o in enumerate(row_owner) if o == "owner-3"])
        scopes = (("all", None, np.arange(len(ids))), ("one owner", "owner-3", owner_rows))
        for label, owner_id, rows in scopes:
            latencies: list[float] = []
            recalls: list[float] = []
            for probe in probes:
                started = time.perf_counter()
                hits = await store.search(vector=probe.tolist(), k=10, owner_id=owner_id)
                latencies.append(time.perf_counter() - started)
                found = {row_of[hit.message.id] for hit in hits}
                scores = matrix[rows] @ probe
                exact = {int(rows[i]) for i in np.argpartition(-scores, 10)[:10]}
                recalls.append(len(found & exact) / 10)
            print(
                f"      top-10 over {label:<9} ({len(rows):>7,}): recall@10"
                f" {statistics.mean(recalls):.3f}, {ms(latencies)}"
            )


async def run(arguments: argparse.Namespace) -> None:
    with servers(arguments.only) as started:
        for name, url_of in started:
            print(f"\n{name}")
            await appends_and_window(url_of(), arguments.messages, arguments.reads)
            await listing(url_of())
            if arguments.vectors:
                await vectors(url_of(), arguments.vectors, arguments.queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500, help="appends per figure")
    parser.add_argument("--reads", type=int, default=300, help="window reads per figure")
    parser.add_argument("--vectors", type=int, default=20_000, help="messages with vectors")
    parser.add_argument("--queries", type=int, default=100, help="searches per figure")
    parser.add_argument("--only", choices=("falkordb", "neo4j"), help="one backend only")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
