"""SQLite's inline writes: a small write with nothing else in flight runs on the caller's
thread, durable before it is answered; a large one, one that meets another process's
write lock and writes started together go through the writer thread (the last in one
group); the pacing stops inline writes while they are slow; and the WAL is checkpointed
on a reader's thread, not in an inline commit nor in the writes' way."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import convostore
from convostore import EventWrite, MessageWrite, Role, Store, StoreClosedError
from convostore.backends.sqlite import inline as inline_module
from convostore.backends.sqlite import worker as worker_module
from convostore.backends.sqlite.inline import INLINE_LIMIT_S, INLINE_PAUSE, Pacer
from convostore.backends.sqlite.worker import ConnectionWorker
from tests.backends.sqlite.support import ADA, db_url, group_sizes, raw_rows, sqlite_of


@pytest.fixture(autouse=True)
def never_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about where writes run, not about timing: however slow the
    machine, no write is too slow to run inline (the pacing has its own test)."""
    monkeypatch.setattr(inline_module, "INLINE_LIMIT_S", 3600.0)


def inline_writes(store: Store) -> int:
    return sqlite_of(store)._writer.inline_writes


async def test_small_writes_run_inline_and_large_ones_on_the_thread(
    store: Store, db_path: Path
) -> None:
    session = await store.create_session(ADA)
    before = inline_writes(store)
    for n in range(10):
        await store.add_message(session.id, MessageWrite(Role.USER, f"m{n}", author="ada"))
    assert inline_writes(store) == before + 10
    # Committed when answered: another connection sees every one.
    assert raw_rows(db_path, "SELECT count(*) FROM events")[0][0] == 10

    many = [EventWrite("APP.X", {"n": n}) for n in range(9)]
    await store.append_events(session.id, many, expected_version=10)
    long_text = MessageWrite(Role.USER, "word " * 10_000, author="ada")
    await store.add_message(session.id, long_text)
    assert inline_writes(store) == before + 10
    assert raw_rows(db_path, "SELECT count(*) FROM events")[0][0] == 20


async def test_a_write_waits_on_the_thread_while_another_process_holds_the_lock(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with await convostore.connect(db_url(db_path, "busy_timeout=20000")) as store:
        await lock_held_elsewhere(store, db_path, monkeypatch)


async def lock_held_elsewhere(store: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = await store.create_session(ADA)
    handed_to_thread = asyncio.Event()
    original_submit = ConnectionWorker._submit

    async def noting_submit(
        worker: ConnectionWorker, fn: Any, args: tuple[Any, ...], write: bool
    ) -> Any:
        handed_to_thread.set()
        return await original_submit(worker, fn, args, write)

    monkeypatch.setattr(ConnectionWorker, "_submit", noting_submit)
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        before = inline_writes(store)
        loop = asyncio.get_running_loop()
        started = loop.time()
        append = asyncio.ensure_future(
            store.add_message(session.id, MessageWrite(Role.USER, "after the lock"))
        )
        await handed_to_thread.wait()
        # An inline write that waited for the lock would hold up the event loop, and so
        # this very task, which is what lets the lock go, for the whole busy timeout.
        assert loop.time() - started < 10
        assert not append.done()
        other.execute("COMMIT")
        stored = await append
    finally:
        other.close()
    assert inline_writes(store) == before
    assert [m.id for m in await store.messages(session.id)] == [stored.id]


async def test_writes_started_together_commit_in_groups(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = [await store.create_session(ADA) for _ in range(4)]
    groups = group_sizes(monkeypatch)
    before = inline_writes(store)
    count = 40
    await asyncio.gather(
        *(
            store.add_message(sessions[n % 4].id, MessageWrite(Role.USER, f"m{n}"))
            for n in range(count)
        )
    )
    inline = inline_writes(store) - before
    # The first write lets the other tasks go first, and theirs join it through the
    # thread; at most one may find the writer idle, and none runs inline in front of
    # the others.
    assert inline <= 1
    assert sum(groups) + inline == count
    assert len(groups) <= count // 2, groups
    for session in sessions:
        assert len(await store.messages(session.id)) == count // 4


async def test_writes_gathered_as_the_writer_stops_are_refused_not_left_waiting(
    store: Store,
) -> None:
    writer = sqlite_of(store)._writer

    def write(connection: sqlite3.Connection) -> None:
        connection.execute("SELECT 1").fetchone()

    async def one() -> str:
        try:
            await writer.transact(write, small=True)
        except StoreClosedError:
            return "refused"
        return "ran"

    # The first write lets the others go first and gathers theirs; the writer stops
    # before it hands them over: each is refused, none waits for a thread that ended.
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(one() for _ in range(5)), writer.stop(), *(one() for _ in range(3))),
        timeout=30,
    )
    assert outcomes == ["refused"] * 5 + [None] + ["refused"] * 3


async def test_a_write_from_another_loop_does_not_join_a_gathering(store: Store) -> None:
    writer = sqlite_of(store)._writer
    session = await store.create_session(ADA)
    other_loop = asyncio.new_event_loop()
    try:
        # Another loop's write is gathering (on its own thread, it may hand its group
        # over at any moment): a write of this loop takes its own way to the thread.
        writer._gathering = (other_loop, [])
        message = MessageWrite(Role.USER, "mine")
        await asyncio.wait_for(store.add_message(session.id, message), timeout=30)
        assert writer._gathering == (other_loop, [])
    finally:
        writer._gathering = None
        other_loop.close()
    assert [m.content for m in await store.messages(session.id)] == ["mine"]


async def test_the_wal_is_checkpointed_on_a_reader_thread_while_writes_go_on(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "INLINE_CHECKPOINT_EVERY", 4)
    threads: list[str] = []
    running, release, done = threading.Event(), threading.Event(), threading.Event()
    original = worker_module._checkpoint

    def held(connection: sqlite3.Connection) -> None:
        threads.append(threading.current_thread().name)
        running.set()
        release.wait(30)
        original(connection)
        done.set()

    monkeypatch.setattr(worker_module, "_checkpoint", held)
    session = await store.create_session(ADA)
    written = 0
    # A write that finds a job of the thread's still queued (the commit's follow-up
    # work, on a busy machine) goes through the thread: write until four ran inline.
    while inline_writes(store) < 4 and written < 100:
        await store.add_message(session.id, MessageWrite(Role.USER, f"m{written}"))
        written += 1
    assert inline_writes(store) >= 4
    assert await asyncio.to_thread(running.wait, 30)  # the fourth inline write's
    # The checkpoint holds no write lock: while it runs, writes still run inline.
    before = inline_writes(store)
    while inline_writes(store) < before + 3 and written < 200:
        await store.add_message(session.id, MessageWrite(Role.USER, f"m{written}"))
        written += 1
    assert inline_writes(store) >= before + 3
    assert not done.is_set()
    release.set()
    assert await asyncio.to_thread(done.wait, 30)
    assert threads
    assert all(name.startswith("convostore-sqlite-reader") for name in threads)
    assert len(await store.messages(session.id)) == written


def test_slow_inline_operations_send_the_next_ones_to_the_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(inline_module, "INLINE_LIMIT_S", INLINE_LIMIT_S)
    pacer = Pacer()
    fast, slow = INLINE_LIMIT_S / 4, INLINE_LIMIT_S * 30
    for _ in range(100):
        pacer.record(fast)
    # A slow one now and then (the disk busy for a moment) stops nothing.
    for _ in range(10):
        pacer.record(slow)
        for _ in range(3):
            pacer.record(fast)
    assert pacer.paused == 0
    # Once half of the last 16 are slow, the next ones go through the threads for a
    # while, longer each time the probe after the pause is slow too, and no longer once
    # one is fast.
    slow_ones = 0
    while pacer.paused == 0:
        pacer.record(slow)
        slow_ones += 1
    assert slow_ones <= 8
    assert pacer.paused == INLINE_PAUSE
    assert [pacer.allows() for _ in range(INLINE_PAUSE)] == [False] * INLINE_PAUSE
    assert pacer.allows()
    pacer.record(slow)
    assert pacer.paused == 2 * INLINE_PAUSE
    while not pacer.allows():
        pass
    pacer.record(fast)
    assert pacer.paused == 0
    for _ in range(7):
        pacer.record(slow)
    assert pacer.paused == 0
    pacer.record(slow)
    assert pacer.paused == INLINE_PAUSE
