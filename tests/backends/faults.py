"""Faults every server backend is put through the same way: connections killed under a
pool, and a server restarted while writers append. Each backend's module gives the
fault (how to kill its connections, how to restart its server); what must hold after it
is written once here."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable

import pytest

from convostore import BackendUnavailableError, Message, MessageWrite, Role, Store, User

__all__ = ["appends_survive_a_restart", "the_pool_recovers"]

ADA = User("ada", "Ada")
# A writer that met the fault waits this long before it tries again, so that the outage
# is not spent retrying in a tight loop; nothing waits on it to order the test.
RETRY_PAUSE = 0.05


def say(text: str) -> MessageWrite:
    return MessageWrite(Role.USER, text, author=ADA)


async def the_pool_recovers(
    store: Store,
    kill_connections: Callable[[], Awaitable[int]],
    cause: type[BaseException] | tuple[type[BaseException], ...],
    *,
    attempts: int = 20,
) -> None:
    """Connections of a pool of two are killed on the server (``kill_connections``
    answers how many it killed: at least one, or the test proves nothing): each append
    that meets a
    dead connection fails as `BackendUnavailableError` caused by the driver's error
    (``cause``), at most one per pooled connection, and the pool then serves again with
    nothing lost."""
    session = await store.create_session(ADA)
    await asyncio.gather(*(store.add_message(session.id, say(str(i))) for i in range(4)))
    assert await kill_connections() >= 1, "no connection of the store was killed"
    failures: list[BackendUnavailableError] = []
    for attempt in range(attempts):
        try:
            await store.add_message(session.id, say(f"after {attempt}"))
            break
        except BackendUnavailableError as error:
            failures.append(error)
    else:
        pytest.fail("the pool never recovered")
    assert all(isinstance(failure.__cause__, cause) for failure in failures)
    assert len(failures) <= 2  # at most one per pooled connection
    assert await store.version(session.id) == 5


async def appends_survive_a_restart(
    store: Store, restart: Callable[[], None], *, before: int = 10, after: int = 20
) -> None:
    """Four writers append pairs of messages while ``restart`` (run in a thread) takes
    the server down and up again: the appends that meet it fail as
    `BackendUnavailableError`, the pool reconnects, and every append that returned is in
    the log afterwards, with no gap and no half-written pair."""
    session = await store.create_session(ADA)
    returned: list[str] = []
    failed: list[BackendUnavailableError] = []
    stop = asyncio.Event()
    progress = asyncio.Condition()

    async def writer(number: int) -> None:
        for count in itertools.count():
            if stop.is_set():
                return
            writes = [say(f"{number}-{count}-a"), say(f"{number}-{count}-b")]
            try:
                version = await store.version(session.id)
                if await store.append_events(session.id, writes, version):
                    returned.append(f"{number}-{count}")
                    async with progress:
                        progress.notify_all()
            except BackendUnavailableError as error:
                failed.append(error)
                await asyncio.sleep(RETRY_PAUSE)

    async def appended(count: int) -> None:
        async with progress:
            await progress.wait_for(lambda: len(returned) >= count)

    writers = [asyncio.create_task(writer(n)) for n in range(4)]
    try:
        await asyncio.wait_for(appended(before), 30)
        before_restart = len(returned)
        await asyncio.to_thread(restart)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(appended(before_restart + after), 60)
    finally:
        stop.set()
        await asyncio.gather(*writers)
    assert failed, "the restart went unnoticed"
    assert len(returned) >= before_restart + after, "the pool did not recover"
    log = await store.read(session.id)
    assert [event.seq for event in log] == list(range(1, len(log) + 1))
    assert await store.version(session.id) == len(log) // 2
    contents = [event.content or "" for event in log if isinstance(event, Message)]
    # Pairs are whole: each one's two messages next to each other.
    assert all(a[:-1] == b[:-1] for a, b in zip(contents[::2], contents[1::2], strict=True))
    assert {content[:-2] for content in contents} >= set(returned)
