"""convostore's figures on the embedded default (SQLite), each against its baseline.

One run prints:

1. appends: 10,000 messages over 100 sessions through `add_message`, against raw
   sqlite3 executing the same statements, at synchronous FULL and NORMAL; one message
   at a time (latency-bound) and the 100 sessions appending at once (throughput-bound);
2. ``read(last=20)`` on a 100,000-event log against the same on a 100-event log;
3. page 500 against page 1 of a user's 10,000 sessions, in both orders;
4. the cost of embedding each message inline (hashing embedder, 384 dimensions);
5. search latency (p50, p95) over 100,000 messages x 384 dimensions: vector (exact
   scan) and text (FTS5).

    .venv/bin/python benchmarks/run.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import convostore
from convostore import EventFilter, MessageWrite, PageRequest, Role, SessionOrder, Store, User
from convostore.embedding import HashingEmbedder

sys.path.insert(0, str(Path(__file__).parent))
from sqlite_append import raw_appends, store_appends

ADA = User("ada", "Ada")
WORDS = [
    *("router", "password", "reset", "capital", "france", "paris", "lentils", "spinach"),
    *("curry", "launch", "march", "calendar", "weeks", "signups", "report", "quarter"),
    *("revenue", "agent", "tool", "result", "summary", "budget"),
]


def _line(name: str, figure: str, baseline: str, ratio: float, target: str) -> None:
    print(f"  {name:<46} {figure:>16} {baseline:>16} {ratio:>7.2f}  {target}")


async def _timed(call: Callable[[], Awaitable[object]], repeat: int) -> list[float]:
    """Seconds per call, ``repeat`` times, after one warm-up call."""
    await call()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return times


def appends(messages: int, sessions: int) -> None:
    print(f"1. appends: {messages:,} messages over {sessions} sessions (msg/s)")
    _line("", "store", "raw sqlite3", 1.0, "target")
    for synchronous in ("full", "normal"):
        for writers, label in ((1, "one at a time"), (sessions, f"{sessions} sessions at once")):
            # Raw runs its transactions back to back on one connection in both rows.
            with tempfile.TemporaryDirectory() as directory:
                store_rate = asyncio.run(
                    store_appends(Path(directory) / "s.db", synchronous, messages, writers)
                )
                raw_rate = raw_appends(Path(directory) / "r.db", synchronous, messages)
            _line(
                f"synchronous={synchronous}, {label}",
                f"{store_rate:,.0f}",
                f"{raw_rate:,.0f}",
                store_rate / raw_rate,
                ">= 0.8",
            )


async def _log_of(store: Store, events: int) -> str:
    session = await store.create_session(ADA)
    batch = 1000
    for start in range(0, events, batch):
        writes = [
            MessageWrite(Role.USER if n % 4 == 0 else Role.ASSISTANT, f"message {n}")
            for n in range(start, min(events, start + batch))
        ]
        await store.append_events(session.id, writes, await store.version(session.id))
    return session.id


async def windows(long_log: int) -> None:
    print("2. read(last=20): long log against short log (ms per read)")
    with tempfile.TemporaryDirectory() as directory:
        async with await convostore.connect(f"sqlite:///{directory}/w.db") as store:
            short = await _log_of(store, 100)
            long = await _log_of(store, long_log)
            window = EventFilter(last=20)
            short_times = await _timed(lambda: store.read(short, window), 300)
            long_times = await _timed(lambda: store.read(long, window), 300)
            after = EventFilter(after_seq=long_log - 200, limit=50)
            page_times = await _timed(lambda: store.read(long, after), 300)
    short_ms = statistics.median(short_times) * 1000
    long_ms = statistics.median(long_times) * 1000
    _line(
        f"{long_log:,} events vs 100 events",
        f"{long_ms:.3f}",
        f"{short_ms:.3f}",
        long_ms / short_ms,
        "<= 1.2",
    )
    page_ms = statistics.median(page_times) * 1000
    _line("read(after_seq, limit=50) near the end", f"{page_ms:.3f}", "", 0.0, "(figure)")


async def pages(sessions: int, size: int) -> None:
    deep = sessions // size
    print(f"3. listing: page {deep} against page 1 of {sessions:,} sessions (ms per page)")
    with tempfile.TemporaryDirectory() as directory:
        async with await convostore.connect(
            f"sqlite:///{directory}/p.db?synchronous=normal"
        ) as store:
            for _ in range(sessions):
                await store.create_session(ADA)
            for order in SessionOrder:
                first = PageRequest(size=size, order=order)
                cursor = None
                for _ in range(deep - 1):
                    page = await store.list_sessions(
                        ADA.id, PageRequest(size=size, cursor=cursor, order=order)
                    )
                    cursor = page.next_cursor
                last = PageRequest(size=size, cursor=cursor, order=order)
                first_times = await _timed(_lister(store, first), 300)
                deep_times = await _timed(_lister(store, last), 300)
                deep_page = await store.list_sessions(ADA.id, last)
                assert deep_page.next_cursor is None, "the deep page is the last"
                assert len(deep_page.items) == size
                first_ms = statistics.median(first_times) * 1000
                deep_ms = statistics.median(deep_times) * 1000
                _line(
                    f"order={order.value}",
                    f"{deep_ms:.3f}",
                    f"{first_ms:.3f}",
                    deep_ms / first_ms,
                    "<= 1.2",
                )
            count_times = await _timed(lambda: store.count_sessions(ADA.id), 300)
            print(
                f"  count_sessions over {sessions:,} sessions: "
                f"{statistics.median(count_times) * 1000:.3f} ms"
            )


def _lister(store: Store, page: PageRequest) -> Callable[[], Awaitable[object]]:
    return lambda: store.list_sessions(ADA.id, page)


async def embedding_overhead(messages: int) -> None:
    print("4. embedding inline: add_message with the hashing embedder (384) against none")
    rates = {}
    for label, embedder in (("none", None), ("hashing-384", HashingEmbedder(384))):
        with tempfile.TemporaryDirectory() as directory:
            async with await convostore.connect(
                f"sqlite:///{directory}/e.db?synchronous=normal", embedder=embedder
            ) as store:
                session = await store.create_session(ADA)
                text = " ".join(random.choice(WORDS) for _ in range(24))
                write = MessageWrite(Role.USER, text, author=ADA.id)
                await store.add_message(session.id, write)
                started = time.perf_counter()
                for _ in range(messages):
                    await store.add_message(session.id, write)
                rates[label] = messages / (time.perf_counter() - started)
    embedder = HashingEmbedder(384)
    texts = [" ".join(random.choice(WORDS) for _ in range(24)) for _ in range(2000)]
    started = time.perf_counter()
    for text in texts:
        embedder.embed_one(text)
    per_second = len(texts) / (time.perf_counter() - started)
    _line(
        "msg/s with embedding vs without",
        f"{rates['hashing-384']:,.0f}",
        f"{rates['none']:,.0f}",
        rates["hashing-384"] / rates["none"],
        "(overhead)",
    )
    print(f"  the hashing embedder alone: {per_second:,.0f} texts/s")


async def search(messages: int, dimensions: int, queries: int) -> None:
    print(f"5. search over {messages:,} messages x {dimensions} dimensions (ms)")
    rng = random.Random(7)
    embedder = HashingEmbedder(dimensions)
    with tempfile.TemporaryDirectory() as directory:
        async with await convostore.connect(
            f"sqlite:///{directory}/v.db?synchronous=normal", embedder=embedder
        ) as store:
            started = time.perf_counter()
            owners = [User(f"user-{n}", f"User {n}") for n in range(10)]
            batch = 1000
            for start in range(0, messages, batch):
                owner = owners[(start // batch) % len(owners)]
                session = await store.create_session(owner)
                writes = []
                for _ in range(batch):
                    text = " ".join(rng.choice(WORDS) for _ in range(12))
                    vector = [rng.gauss(0.0, 1.0) for _ in range(dimensions)]
                    writes.append(
                        MessageWrite(
                            Role.USER, text, embedding=vector, embedding_model=embedder.name
                        )
                    )
                await store.append_events(session.id, writes, expected_version=0)
            print(f"  (loaded in {time.perf_counter() - started:.1f} s)")
            query_texts = [" ".join(rng.sample(WORDS, 3)) for _ in range(queries)]
            for label, arguments in (
                ("vector, all owners", {}),
                ("vector, one owner (1/10 of the vectors)", {"owner_id": "user-3"}),
                ("text (FTS5), all owners", {"mode": "text"}),
                ("hybrid, one owner", {"mode": "hybrid", "owner_id": "user-3"}),
            ):
                times = []
                for text in query_texts:
                    began = time.perf_counter()
                    await store.search(text, k=10, **arguments)  # type: ignore[arg-type]
                    times.append(time.perf_counter() - began)
                times.sort()
                p50 = times[len(times) // 2] * 1000
                p95 = times[int(len(times) * 0.95)] * 1000
                print(f"  {label:<46} p50 {p50:8.1f}   p95 {p95:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    quick = parser.parse_args().quick
    print(
        f"convostore benchmarks, {time.strftime('%Y-%m-%d %H:%M')}, Python {sys.version.split()[0]}"
    )
    appends(1_000 if quick else 10_000, 100)
    asyncio.run(windows(10_000 if quick else 100_000))
    asyncio.run(pages(2_000 if quick else 10_000, 20))
    asyncio.run(embedding_overhead(500 if quick else 3_000))
    asyncio.run(search(10_000 if quick else 100_000, 384, 20 if quick else 100))


if __name__ == "__main__":
    main()
