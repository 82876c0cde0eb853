"""The memory backend costs what it returns: windows, reads after a seq, and pages.

1. ``read(last=20)`` and ``messages(last=20)`` of a 10,000-event log against the same
   of a 100-event log (median of 200 calls each); ratio long / short.
2. ``read(after_seq=n, limit=50)`` near the end of the long log against near its start.
3. Walking every page (size 50) of one owner's 2,000 sessions in both orders, and the
   time per page against the first page alone.

    .venv/bin/python benchmarks/memory.py
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

import convostore
from convostore import EventFilter, MessageWrite, PageRequest, Role, SessionOrder, Store, User

ADA = User("ada", "Ada")
BOT = User("bot", "Bot", kind="agent")


async def median_ms(call: Callable[[], Awaitable[object]], repeat: int = 200) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        await call()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


async def log_of(store: Store, events: int) -> str:
    session = await store.create_session(ADA)
    for start in range(0, events, 100):
        writes = [
            MessageWrite(
                Role.USER if n % 4 == 0 else Role.ASSISTANT,
                f"message {n}",
                author=ADA if n % 4 == 0 else BOT,
            )
            for n in range(start, min(events, start + 100))
        ]
        await store.append_events(session.id, writes, await store.version(session.id))
    return session.id


async def windows(store: Store) -> None:
    short, long = await log_of(store, 100), await log_of(store, 10_000)
    for label, filter_ in (
        ("read(last=20)", EventFilter(last=20)),
        ("read(types=MESSAGE, last=20)", EventFilter(types=("MESSAGE",), last=20)),
    ):
        a = await median_ms(lambda f=filter_: store.read(short, f))  # type: ignore[misc]
        b = await median_ms(lambda f=filter_: store.read(long, f))  # type: ignore[misc]
        print(f"  {label:<34} 100: {a:7.3f} ms  10,000: {b:7.3f} ms  ratio {b / a:5.2f}")
    early = await median_ms(lambda: store.read(long, EventFilter(after_seq=100, limit=50)))
    late = await median_ms(lambda: store.read(long, EventFilter(after_seq=9_900, limit=50)))
    print(
        f"  {'read(after_seq, limit=50)':<34} early: {early:7.3f} ms  late: {late:7.3f} ms"
        f"  ratio {late / early:5.2f}"
    )


async def pages(store: Store, sessions: int, size: int) -> None:
    owner = User("lister", "Lister")
    for _ in range(sessions):
        session = await store.create_session(owner)
        await store.add_message(session.id, MessageWrite(Role.USER, "hello", author=owner))
    for order in SessionOrder:
        first = await median_ms(
            lambda o=order: store.list_sessions(owner.id, PageRequest(size=size, order=o)),  # type: ignore[misc]
            50,
        )
        began = time.perf_counter()
        cursor, count = None, 0
        while True:
            page = await store.list_sessions(
                owner.id, PageRequest(size=size, cursor=cursor, order=order)
            )
            count += 1
            cursor = page.next_cursor
            if cursor is None:
                break
        walk = (time.perf_counter() - began) * 1000
        print(
            f"  all {count} pages of {sessions:,} sessions, {order.name:<13} {walk:7.2f} ms"
            f"  ({walk / count:6.3f} ms a page; first page alone {first:6.3f} ms)"
        )


async def main() -> None:
    print("memory backend: cost against the size of the answer")
    async with await convostore.connect("memory://") as store:
        await windows(store)
        await pages(store, 2_000, 50)


if __name__ == "__main__":
    asyncio.run(main())
