"""How a SQLite store's connections are set up and its threads serve them: one hop per
operation, reads that never wait behind searches, cancellation, close and a failed
open."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import convostore
from convostore import (
    COMPACTION,
    BackendUnavailableError,
    EventFilter,
    EventWrite,
    MessageWrite,
    PageRequest,
    Role,
    SessionFilter,
    SessionOrder,
    Store,
    StoreClosedError,
)
from convostore.backends.sqlite import SQLiteBackend
from convostore.backends.sqlite import backend as sqlite_backend_module
from convostore.backends.sqlite import search as sqlite_search
from convostore.backends.sqlite.inline import InlineConnection
from convostore.backends.sqlite.worker import ConnectionWorker
from tests.backends.sqlite.support import (
    ADA,
    BOT,
    db_url,
    on_reader,
    on_writer,
    sqlite_of,
)

# ------------------------------------------------------------------ connections


async def test_connection_settings(db_path: Path) -> None:
    store = await convostore.connect(db_url(db_path, "busy_timeout=1234"))
    try:
        for run in (on_writer, on_reader):
            assert await run(store, "PRAGMA journal_mode") == "wal"
            assert await run(store, "PRAGMA synchronous") == 2  # FULL
            assert await run(store, "PRAGMA foreign_keys") == 1
            assert await run(store, "PRAGMA busy_timeout") == 1234
        assert await on_writer(store, "PRAGMA query_only") == 0
        assert await on_reader(store, "PRAGMA query_only") == 1
    finally:
        await store.close()


@pytest.mark.parametrize(("option", "level"), [("normal", 1), ("full", 2), ("extra", 3)])
async def test_synchronous_follows_the_url(db_path: Path, option: str, level: int) -> None:
    store = await convostore.connect(db_url(db_path, f"synchronous={option}"))
    try:
        assert await on_writer(store, "PRAGMA synchronous") == level
        assert await on_reader(store, "PRAGMA synchronous") == level
    finally:
        await store.close()


async def test_every_operation_is_one_thread_hop(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    hops: list[str] = []
    original_submit = ConnectionWorker._submit
    original_run = InlineConnection.run

    async def counting_submit(
        worker: ConnectionWorker, fn: Any, args: tuple[Any, ...], write: bool
    ) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await original_submit(worker, fn, args, write)

    def counting_run(inline: InlineConnection, fn: Any, args: tuple[Any, ...]) -> Any:
        ran, result = original_run(inline, fn, args)
        if ran:
            hops.append(f"inline {getattr(fn, '__name__', repr(fn))}")
        return ran, result

    # Reads (`run`) and writes (`transact`) go through `_submit`, or a small write or
    # read runs inline: either is one trip to the database.
    monkeypatch.setattr(ConnectionWorker, "_submit", counting_submit)
    monkeypatch.setattr(InlineConnection, "run", counting_run)

    async def hops_of(call: Awaitable[Any]) -> int:
        hops.clear()
        await call
        return len(hops)

    session = await store.create_session(ADA, metadata={"k": 1})
    boundary = EventWrite(COMPACTION, {"kept_event_ids": []}, synthetic=True)
    operations: list[Callable[[], Awaitable[Any]]] = [
        lambda: store.put_user(BOT),
        lambda: store.get_user("bot"),
        lambda: store.create_session(ADA),
        lambda: store.create_session_if_absent(ADA, session_id="fixed"),
        lambda: store.get_session(session.id),
        lambda: store.set_title(session.id, "t"),
        lambda: store.list_sessions("ada", PageRequest(order=SessionOrder.LAST_ACTIVITY)),
        lambda: store.list_summaries("ada"),
        lambda: store.count_sessions("ada", SessionFilter(kind="chat")),
        lambda: store.find_part(session.id, "bot"),
        lambda: store.list_parts(session.id),
        lambda: store.add_message(session.id, MessageWrite(Role.USER, "hi", author=ADA)),
        lambda: store.append_event(session.id, EventWrite("APP.X")),
        lambda: store.append_events(session.id, [boundary], expected_version=2),
        lambda: store.version(session.id),
        lambda: store.read(session.id, EventFilter(last=2)),
        lambda: store.read(session.id, EventFilter(active_view=True)),
        lambda: store.messages(session.id),
        lambda: store.participants(session.id),
        lambda: store.delete_expired(),
        lambda: store.delete_session("fixed"),
    ]
    for operation in operations:
        assert await hops_of(operation()) == 1, hops
    fresh = await store.get_session(session.id)
    assert fresh is not None
    assert await hops_of(store.update_session(replace(fresh, title="u"))) == 1
    message = (await store.messages(session.id))[0]
    assert await hops_of(store.set_narration(session.id, message.id, "n")) == 1
    # find_or_create_part reads the parent inside its one transaction.
    assert await hops_of(store.find_or_create_part(session.id, BOT)) == 1


async def test_a_cancelled_call_leaves_the_worker_serving(store: Store) -> None:
    release = threading.Event()
    started = threading.Event()

    def blocking(connection: sqlite3.Connection) -> str:
        started.set()
        release.wait(5)
        return "done"

    waiting = asyncio.ensure_future(sqlite_of(store)._writer.run(blocking))
    await asyncio.to_thread(started.wait, 5)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    # Queued behind the running job, then cancelled before it starts: it never runs.
    ran: list[bool] = []
    skipped = asyncio.ensure_future(sqlite_of(store)._writer.run(lambda c: ran.append(True)))
    await asyncio.sleep(0)
    skipped.cancel()
    release.set()
    session = await store.create_session(ADA)
    assert await store.get_session(session.id) == session
    assert ran == []


async def test_reads_never_wait_behind_searches(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Searches held on their thread until the reads are done: were they on the reader
    # threads, the reads would queue behind them and time out.
    session = await store.create_session(ADA)
    await store.add_message(session.id, MessageWrite(Role.USER, "hello there", author=ADA))
    release = threading.Event()
    running = threading.Semaphore(0)
    search_vectors = sqlite_search.read_vector_search
    search_text = sqlite_search.read_text_search

    def held(search: Callable[..., Any]) -> Callable[..., Any]:
        def run(*arguments: Any) -> Any:
            running.release()
            assert release.wait(30), "the reads never finished"
            return search(*arguments)

        return run

    monkeypatch.setattr(sqlite_backend_module, "read_vector_search", held(search_vectors))
    monkeypatch.setattr(sqlite_backend_module, "read_text_search", held(search_text))
    searches = [
        asyncio.ensure_future(store.search(vector=[1.0, 0.0, 0.0], k=3)),
        asyncio.ensure_future(store.search("hello", mode="text", k=3)),
        asyncio.ensure_future(store.search("there", mode="text", k=3)),
    ]
    assert await asyncio.to_thread(running.acquire, True, 30)
    reads = asyncio.gather(
        store.get_session(session.id),
        store.read(session.id),
        store.list_sessions(ADA.id),
        store.get_user(ADA.id),
    )
    found, log, page, user = await asyncio.wait_for(reads, 30)
    assert found is not None
    assert len(log) == 1
    assert len(page.items) == 1
    assert user == ADA
    release.set()
    vector_hits, *text_hits = await asyncio.gather(*searches)
    assert vector_hits == []
    assert [len(hits) for hits in text_hits] == [1, 1]


async def test_close_ends_the_threads_and_refuses_calls(db_path: Path) -> None:
    before = set(threading.enumerate())
    store = await convostore.connect(db_url(db_path))
    started = set(threading.enumerate()) - before
    assert sorted(t.name for t in started) == [
        "convostore-sqlite-reader-1",
        "convostore-sqlite-reader-2",
        "convostore-sqlite-search-1",
        "convostore-sqlite-writer-1",
    ]
    await store.close()
    await store.close()
    assert not any(thread.is_alive() for thread in started)
    with pytest.raises(StoreClosedError, match="closed"):
        await store.get_session("x")
    # Closing checkpoints the WAL into the database file.
    assert not db_path.with_name(db_path.name + "-wal").is_file()


async def test_a_failed_open_leaves_no_thread_behind(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing(backend: SQLiteBackend, *args: Any) -> None:
        raise BackendUnavailableError("the vector index cannot be read")

    monkeypatch.setattr(SQLiteBackend, "after_connect", failing)
    before = set(threading.enumerate())
    with pytest.raises(BackendUnavailableError, match="vector index"):
        await convostore.connect(db_url(db_path))
    assert set(threading.enumerate()) <= before
