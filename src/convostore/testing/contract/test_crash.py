"""A server killed during appends (SIGKILL, as a crash of its machine) and started again
from its files: every append it acknowledged is there, whole, and nothing is
half-written. Runs where the backend is persistent and the runner can crash its server
(`convostore.testing.fixtures.ServerCrash`)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

import convostore
from convostore import BackendUnavailableError, MessageWrite, Role, User
from convostore.testing.fixtures import BackendUnderTest

ADA = User("ada", "Ada")
# Appends acknowledged before the kill: enough that some are in flight when it comes.
ACKNOWLEDGED_BEFORE_KILL = 60
WRITERS = 4
WORDS = 20


async def test_a_crash_during_appends_keeps_every_acknowledged_append_whole(
    backend: BackendUnderTest,
) -> None:
    crash = backend.crash
    if crash is None:
        pytest.skip(f"the runner cannot crash the {backend.name} server and restart it")
    store = await convostore.connect(crash.url)
    if not store.capabilities.persistent:
        await store.close()
        pytest.skip(f"{backend.name} keeps nothing across a restart")
    try:
        session = await store.create_session(ADA)
        acknowledged: list[str] = []
        enough = asyncio.Event()

        async def writer(index: int) -> None:
            for n in itertools.count():
                message = await store.add_message(
                    session.id, MessageWrite(Role.USER, f"{index}-{n} " * WORDS, author=ADA)
                )
                acknowledged.append(message.id)
                if len(acknowledged) >= ACKNOWLEDGED_BEFORE_KILL:
                    enough.set()

        writers = [asyncio.create_task(writer(i)) for i in range(WRITERS)]
        # Until enough are acknowledged, or a writer stopped before (its error is the
        # failure: waiting on would never end).
        waiting = asyncio.create_task(enough.wait())
        await asyncio.wait([waiting, *writers], return_when=asyncio.FIRST_COMPLETED)
        if not enough.is_set():
            stopped = [task.exception() for task in writers if task.done()]
            waiting.cancel()
            for task in writers:
                task.cancel()
            await asyncio.gather(*writers, return_exceptions=True)
            pytest.fail(f"a writer stopped before the kill: {stopped}")
        crash.kill()
        results = await asyncio.gather(*writers, return_exceptions=True)
        assert all(isinstance(r, BackendUnavailableError) for r in results), results
    finally:
        await store.close()
        crash.restart()
    async with await convostore.connect(crash.url) as reopened:
        log = await reopened.messages(session.id)
        assert {event.id for event in log} >= set(acknowledged)
        # Nothing half-written: every event whole, seq gap-free, the version agrees.
        assert [event.seq for event in log] == list(range(1, len(log) + 1))
        assert await reopened.version(session.id) == len(log)
        assert all(event.content and event.content.count(" ") == WORDS for event in log)
        again = await reopened.add_message(session.id, MessageWrite(Role.USER, "after"))
        assert again.seq == len(log) + 1
