"""The Redis backend on one server and on a cluster of 3 masters x 1 replica, each this
script starts (tests/servers/redis.py: AOF with appendfsync always on every node).

1. Appends: 100 conversations at once, each appending messages one at a time; appends
   per second and the p50/p99 of one append, with the durability wait (``WAITAOF 1 0``
   on one server, ``WAIT 1`` + ``WAITAOF 1 1`` on the cluster) and without it
   (``fsync=no``: the cost of the wait).
2. A cross-owner metadata lookup (it asks every bucket, one pipeline per master) at
   1,024 buckets, against the same lookup at 64.
3. Listing (a page of 20 of one owner's 1,000 sessions, page 1 and page 50) and the
   last-20 window of a 2,000-event log, on one server, and the same on the PostgreSQL
   backend (a durable server of tests/servers/postgresql.py) on this machine.
4. Vector search over 20,000 vectors of 256 dimensions (20 owners, in clusters as
   embeddings are), unscoped and scoped to one owner, k=10: p50 and recall@10 against
   the exact answer, by the scan (``vectors=scan``, as before) and by the vector sets
   (Redis 8) on one server and on the cluster, and by the vector cache on a Valkey
   cluster (``--skip-valkey`` to leave it out).

    .venv/bin/python benchmarks/redis_bench.py [--appends N] [--skip-cluster]
        [--skip-postgresql] [--skip-valkey] [--vectors N] [--only-vectors]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

import convostore
from convostore import EventFilter, MessageWrite, PageRequest, Role, Store, User
from convostore.testing.populated import NamedHashingEmbedder

AUTHOR = User("ada", "Ada")
CONTENT = "What is the capital of France? Answer in one word, please."
CONVERSATIONS = 100


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def appends(url: str, per_conversation: int) -> tuple[float, float, float]:
    """(appends per second, p50 ms, p99 ms) of 100 conversations appending at once."""
    store = await convostore.connect(url)
    try:
        owners = [User(f"owner-{n}", f"Owner {n}") for n in range(CONVERSATIONS)]
        sessions = [await store.create_session(owner) for owner in owners]
        latencies: list[float] = []

        async def conversation(session_id: str, owner: User) -> None:
            for number in range(per_conversation):
                started = time.perf_counter()
                await store.add_message(
                    session_id, MessageWrite(Role.USER, f"{CONTENT} {number}", author=owner)
                )
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(
            *(conversation(s.id, o) for s, o in zip(sessions, owners, strict=True))
        )
        elapsed = time.perf_counter() - started
        return (
            len(latencies) / elapsed,
            percentile(latencies, 0.5) * 1000,
            percentile(latencies, 0.99) * 1000,
        )
    finally:
        await store.close()


async def timed(call: Callable[[], Awaitable[object]], rounds: int) -> float:
    """The median milliseconds of ``call``."""
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


async def lookup(url: str) -> float:
    store = await convostore.connect(url, indexed_metadata=["team"])
    try:
        for n in range(50):
            await store.create_session(User(f"u{n}", "U"), metadata={"team": "blue"})
        return await timed(lambda: store.find_sessions_by_metadata("team", "blue"), 50)
    finally:
        await store.close()


async def reads(url: str) -> tuple[float, float, float]:
    store: Store = await convostore.connect(url)
    try:
        for _ in range(1000):
            await store.create_session(AUTHOR)
        page = await store.list_sessions(AUTHOR.id, PageRequest(size=20))
        for _ in range(48):
            assert page.next_cursor is not None
            page = await store.list_sessions(
                AUTHOR.id, PageRequest(size=20, cursor=page.next_cursor)
            )
        cursor = page.next_cursor
        first = await timed(lambda: store.list_sessions(AUTHOR.id, PageRequest(size=20)), 50)
        fiftieth = await timed(
            lambda: store.list_sessions(AUTHOR.id, PageRequest(size=20, cursor=cursor)), 50
        )
        session = await store.create_session(AUTHOR)
        writes = [MessageWrite(Role.USER, f"{CONTENT} {n}") for n in range(100)]
        for round_ in range(20):
            await store.append_events(session.id, writes, round_)
        window = await timed(lambda: store.read(session.id, EventFilter(last=20)), 100)
        return first, fiftieth, window
    finally:
        await store.close()


async def memory_per_million(url: str, messages: int) -> float:
    """The server's memory growth for ``messages`` messages (20 per session, in batches
    of 20), scaled to a million, in bytes."""
    store = await convostore.connect(url)
    try:
        backend = store.backend
        nodes = backend.nodes  # type: ignore[attr-defined]
        meta = backend._meta  # type: ignore[attr-defined]

        async def used() -> int:
            [info] = await nodes.call(meta, [("INFO", "memory")], write=False)
            return int(info["used_memory"])

        before = await used()
        for number in range(messages // 20):
            session = await store.create_session(User(f"m{number % 100}", "M"))
            writes = [MessageWrite(Role.USER, f"{CONTENT} {n}") for n in range(20)]
            await store.append_events(session.id, writes, 0)
        return (await used() - before) * 1_000_000 / messages
    finally:
        await store.close()


VECTOR_OWNERS = 20
VECTOR_WIDTH = 256


class VectorData:
    """Vectors around 200 centres (as embeddings of related texts are), their owners,
    and queries near the same centres."""

    def __init__(self, count: int, queries: int = 30) -> None:
        rng = np.random.default_rng(26)
        centres = rng.normal(size=(200, VECTOR_WIDTH))
        near = centres[rng.integers(0, 200, count)]
        self.vectors = (near + 0.6 * rng.normal(size=(count, VECTOR_WIDTH))).astype(np.float32)
        self.owners = [f"vo{n % VECTOR_OWNERS}" for n in range(count)]
        asked = centres[rng.integers(0, 200, queries)]
        self.queries = (asked + 0.6 * rng.normal(size=(queries, VECTOR_WIDTH))).astype(np.float32)
        self.unit = self.vectors / np.linalg.norm(self.vectors, axis=1)[:, None]

    def truth(self, query: npt.NDArray[np.float32], owner: str | None) -> set[int]:
        scores = self.unit @ (query / np.linalg.norm(query))
        if owner is not None:
            scores = np.where(np.array(self.owners) == owner, scores, -np.inf)
        return {int(i) for i in np.argsort(-scores, kind="stable")[:10]}


def vector_model() -> NamedHashingEmbedder:
    """An embedder that declares the index (width 256, model "m"); the vectors are given."""
    return NamedHashingEmbedder("m", VECTOR_WIDTH)


async def load_vectors(url: str, data: VectorData) -> None:
    store = await convostore.connect(url, embedder=vector_model())
    try:
        by_owner: dict[str, list[int]] = {}
        for index, owner in enumerate(data.owners):
            by_owner.setdefault(owner, []).append(index)
        for owner, indexes in by_owner.items():
            for start in range(0, len(indexes), 100):
                session = await store.create_session(User(owner, owner))
                writes = [
                    MessageWrite(
                        Role.USER, f"v{i}", embedding=data.vectors[i].tolist(), embedding_model="m"
                    )
                    for i in indexes[start : start + 100]
                ]
                await store.append_events(session.id, writes, 0)
    finally:
        await store.close()


async def vector_search(url: str, data: VectorData) -> dict[str, tuple[float, float]]:
    """Scope -> (p50 ms, recall@10) of the queries."""
    store = await convostore.connect(url, embedder=vector_model())
    results: dict[str, tuple[float, float]] = {}
    try:
        for scope, owner in (("unscoped", None), ("one owner", "vo3")):
            samples, found = [], 0
            await store.search(vector=data.queries[0].tolist(), k=10, owner_id=owner)  # warm
            for query in data.queries:
                started = time.perf_counter()
                hits = await store.search(vector=query.tolist(), k=10, owner_id=owner)
                samples.append(time.perf_counter() - started)
                found += len({int(h.message.content[1:]) for h in hits} & data.truth(query, owner))
            results[scope] = (
                statistics.median(samples) * 1000,
                found / (10 * len(data.queries)),
            )
    finally:
        await store.close()
    return results


async def vector_rows(label: str, url: str, data: VectorData, after: str) -> None:
    """The scan (before) and ``after`` on the same data, in one run."""
    started = time.perf_counter()
    await load_vectors(url + "&fsync=no", data)
    print(f"{label}: {len(data.owners):,} vectors loaded in {time.perf_counter() - started:.1f} s")
    for path, option in (("scan", "&vectors=scan"), (after, "")):
        for scope, (p50, recall) in (await vector_search(url + option, data)).items():
            row = f"{label}, vector search {scope} by {path}"
            print(f"{row}: p50 {p50:.2f} ms, recall@10 {recall:.3f}")


async def appends_and_lookups(where: str, url: str, arguments: argparse.Namespace) -> None:
    """Rows 1 and 2 on the servers of ``url`` (``where``: "one server", ...)."""
    for label, suffix in (("durable", ""), ("fsync=no", "&fsync=no")):
        rate, p50, p99 = await appends(f"{url}_{label[:3]}{suffix}", arguments.appends)
        print(f"{where}, {label}: {rate:,.0f} appends/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    for buckets in (64, 1024):
        ms = await lookup(f"{url}_lookup{buckets}&buckets={buckets}")
        print(f"{where}, cross-owner lookup at {buckets} buckets: {ms:.2f} ms")


async def one_server(url: str, arguments: argparse.Namespace) -> None:
    await appends_and_lookups("one server", url, arguments)
    per_million = await memory_per_million(url + "_memory", 20_000)
    print(f"one server: {per_million / 2**30:.2f} GiB per million messages of 60 characters")
    first, fiftieth, window = await reads(url + "_reads")
    print(
        f"one server: listing page 1 {first:.2f} ms, page 50 {fiftieth:.2f} ms, "
        f"last-20 of 2,000 events {window:.2f} ms"
    )


async def on_cluster(url: str, arguments: argparse.Namespace) -> None:
    await appends_and_lookups("3x1 cluster", url, arguments)


class Servers(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def url(self, namespace: str | None = None) -> str: ...


async def on_servers(
    servers: Servers,
    label: str,
    data: VectorData,
    after: str,
    then: Callable[[str], Awaitable[None]] | None,
) -> None:
    """Start ``servers``, run the vector rows (`vector_rows`) and ``then`` on them, and
    stop them."""
    servers.start()
    try:
        url = servers.url("bench")
        await vector_rows(label, url + "_vectors", data, after)
        if then is not None:
            await then(url)
    finally:
        servers.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appends", type=int, default=20, help="per conversation")
    parser.add_argument("--skip-cluster", action="store_true")
    parser.add_argument("--skip-postgresql", action="store_true")
    parser.add_argument("--skip-valkey", action="store_true")
    parser.add_argument("--only-vectors", action="store_true", help="only the vector rows")
    parser.add_argument("--vectors", type=int, default=20_000)
    arguments = parser.parse_args()
    from tests.servers.redis import RedisCluster, RedisServer

    data = VectorData(arguments.vectors)
    more = not arguments.only_vectors
    then = functools.partial(one_server, arguments=arguments) if more else None
    await on_servers(RedisServer(), "one server", data, "vector sets", then)
    if not arguments.skip_postgresql and not arguments.only_vectors:
        from tests.servers.postgresql import PostgresServer

        with PostgresServer(durable=True) as postgres:
            first, fiftieth, window = await reads(postgres.url() + "?schema=bench_reads")
            print(
                f"PostgreSQL: listing page 1 {first:.2f} ms, page 50 {fiftieth:.2f} ms, "
                f"last-20 of 2,000 events {window:.2f} ms"
            )
    if not arguments.skip_cluster:
        then = functools.partial(on_cluster, arguments=arguments) if more else None
        await on_servers(RedisCluster(), "3x1 cluster", data, "vector sets", then)
    if not arguments.skip_valkey:
        valkey = RedisCluster(flavor="valkey")
        await on_servers(valkey, "3x1 Valkey cluster", data, "vector cache", None)


if __name__ == "__main__":
    # The test servers live in the repository's tests package.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    asyncio.run(main())
