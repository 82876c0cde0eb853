"""What is the SQLite backend's own: its URLs, schema and migrations, connection settings,
threads, query plans, error translation, several store objects on one file, and the
vectors it holds in memory for search. What every backend does is the contract suite's
(tests/contract)."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import random
import sqlite3
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_args

import pytest

import convostore
from convostore import (
    COMPACTION,
    BackendUnavailableError,
    EventFilter,
    EventWrite,
    InvalidArgumentError,
    MessageWrite,
    PageRequest,
    Role,
    SchemaVersionError,
    SessionFilter,
    SessionOrder,
    Store,
    StoreClosedError,
    StoreError,
    ToolCall,
    User,
)
from convostore._json import index_value
from convostore.backends.sql import vector_cache as shared_vector_cache
from convostore.backends.sqlite import SCHEMA_VERSION, SQLiteBackend, SQLiteTarget, parse_sqlite_url
from convostore.backends.sqlite import backend as sqlite_backend_module
from convostore.backends.sqlite import search as sqlite_search
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.connection import in_read_snapshot, open_connection
from convostore.backends.sqlite.schema import prepare_database
from convostore.backends.sqlite.search import VectorCache
from convostore.backends.sqlite.worker import ConnectionWorker
from convostore.embedding import HashingEmbedder, Metric
from convostore.filters import active_view, apply_filter

ADA = User("ada", "Ada")
BOT = User("bot", "Bot", kind="agent")


def sqlite_of(store: Store) -> SQLiteBackend:
    """The SQLite backend under ``store`` (its threads, cache and statements)."""
    assert isinstance(store.backend, SQLiteBackend)
    return store.backend


def db_url(path: Path, query: str = "") -> str:
    return f"sqlite:///{path}" + (f"?{query}" if query else "")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[Store]:
    opened = await convostore.connect(db_url(db_path))
    yield opened
    await opened.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def set_modes(path: Path, *, file_mode: int, directory_mode: int) -> None:
    path.chmod(file_mode)
    path.parent.chmod(directory_mode)


def raw_rows(path: Path, statement: str, *parameters: Any) -> list[Any]:
    """Rows read through a connection of the test's own, outside the store."""
    connection = sqlite3.connect(path)
    try:
        return connection.execute(statement, parameters).fetchall()
    finally:
        connection.close()


async def on_writer(store: Store, statement: str) -> Any:
    """One value read by the store's writer connection."""
    return await sqlite_of(store)._writer.run(lambda c: c.execute(statement).fetchone()[0])


async def on_reader(store: Store, statement: str) -> Any:
    return await sqlite_of(store)._readers.run(lambda c: c.execute(statement).fetchone()[0])


# ------------------------------------------------------------------ URLs


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///rel/path.db", SQLiteTarget("rel/path.db")),
        ("sqlite:////abs/path.db", SQLiteTarget("/abs/path.db")),
        ("sqlite://", SQLiteTarget("convostore.db")),
        ("sqlite:///", SQLiteTarget("convostore.db")),
        ("SQLite:///x.db", SQLiteTarget("x.db")),
        ("sqlite:///:memory:", SQLiteTarget(":memory:")),
        ("data/chat.db", SQLiteTarget("data/chat.db")),
        ("/abs/chat.db?not=options", SQLiteTarget("/abs/chat.db?not=options")),
        ("sqlite:///x.db?synchronous=normal", SQLiteTarget("x.db", synchronous="NORMAL")),
        ("sqlite:///x.db?synchronous=FULL", SQLiteTarget("x.db", synchronous="FULL")),
        ("sqlite:///x.db?synchronous=extra", SQLiteTarget("x.db", synchronous="EXTRA")),
        ("sqlite:///x.db?busy_timeout=250", SQLiteTarget("x.db", busy_timeout_ms=250)),
        (
            "sqlite:///?synchronous=normal&busy_timeout=0",
            SQLiteTarget("convostore.db", synchronous="NORMAL", busy_timeout_ms=0),
        ),
    ],
)
def test_urls_name_a_path_and_options(url: str, expected: SQLiteTarget) -> None:
    assert parse_sqlite_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://host/x.db",
        "sqlite:///x.db?synchronous=off",
        "sqlite:///x.db?synchronous=",
        "sqlite:///x.db?busy_timeout=-1",
        "sqlite:///x.db?busy_timeout=1.5",
        "sqlite:///x.db?busy_timeout=99999999999",
        "sqlite:///x.db?journal_mode=delete",
        "sqlite:///x.db?synchronous=full&synchronous=normal",
        "sqlite:///x.db?synchronous",
        "sqlite:///x\x00y.db",
        "x\x00y.db",
        "sqlite:///\ud800.db",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_sqlite_url(url)


async def test_the_default_url_opens_convostore_db_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for url in ("sqlite://", "sqlite:///", convostore.DEFAULT_URL):
        store = await convostore.connect(url)
        await store.create_session(ADA)
        await store.close()
    assert (tmp_path / "convostore.db").is_file()
    assert raw_rows(tmp_path / "convostore.db", "SELECT count(*) FROM sessions") == [(3,)]


async def test_a_bare_path_is_a_sqlite_database(tmp_path: Path) -> None:
    store = await convostore.connect(str(tmp_path / "bare.db"))
    assert isinstance(store.backend, SQLiteBackend)
    await store.create_session(ADA)
    await store.close()
    assert raw_rows(tmp_path / "bare.db", "SELECT count(*) FROM sessions") == [(1,)]


async def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        await convostore.connect(db_url(tmp_path / "absent" / "x.db"))
    assert not (tmp_path / "absent").exists()


async def test_unknown_options_are_refused(db_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="pool_size"):
        await convostore.connect(db_url(db_path), pool_size=3)


async def test_memory_database_lives_in_one_connection() -> None:
    store = await convostore.connect("sqlite:///:memory:")
    assert store.capabilities.persistent is False
    assert store.capabilities.cross_process is False
    session = await store.create_session(ADA)
    await store.add_message(session.id, MessageWrite(Role.USER, "hi", author="ada"))
    # Reads see the writes: they run on the one connection that holds the database.
    assert [m.content for m in await store.messages(session.id)] == ["hi"]
    assert await store.count_sessions("ada") == 1
    await store.close()


async def test_a_file_database_is_persistent_and_shared(store: Store) -> None:
    assert store.capabilities.persistent is True
    assert store.capabilities.cross_process is True
    assert store.capabilities.full_text_index is True
    assert store.capabilities.native_vector_index is False  # vector search is a scan


# ------------------------------------------------------------------ schema


async def test_migrations_are_recorded(store: Store, db_path: Path) -> None:
    rows = raw_rows(db_path, "SELECT version, applied_at FROM convostore_schema ORDER BY version")
    assert [version for version, _ in rows] == list(range(1, SCHEMA_VERSION + 1))
    now_us = datetime.now(UTC).timestamp() * 1_000_000
    assert all(now_us - 60_000_000 < applied_at <= now_us for _, applied_at in rows)


async def test_reopening_keeps_data_and_applies_nothing_twice(db_path: Path) -> None:
    store = await convostore.connect(db_url(db_path))
    session = await store.create_session(ADA, title="kept")
    message = await store.add_message(
        session.id,
        MessageWrite(
            Role.ASSISTANT,
            "answer",
            author=BOT,
            tool_calls=[ToolCall("c1", "lookup", {"q": [1, 2]})],
            embedding=[0.25, -1.5, 3.0],
            embedding_model="m-1",
        ),
    )
    await store.close()
    reopened = await convostore.connect(db_url(db_path))
    try:
        assert await reopened.get_session(session.id) == replace(
            session,
            version=1,
            stamp=(await reopened.get_session(session.id) or session).stamp,
            last_activity_at=message.created_at,
        )
        assert await reopened.read(session.id) == [message]
        assert await reopened.get_user("bot") == BOT
    finally:
        await reopened.close()
    assert raw_rows(db_path, "SELECT count(*) FROM convostore_schema") == [(SCHEMA_VERSION,)]


async def test_a_newer_schema_is_refused_and_nothing_written(db_path: Path) -> None:
    store = await convostore.connect(db_url(db_path))
    await store.create_session(ADA)
    await store.close()
    connection = sqlite3.connect(db_path)
    connection.execute(
        "INSERT INTO convostore_schema (version, applied_at) VALUES (?, 0)", (SCHEMA_VERSION + 1,)
    )
    connection.commit()
    connection.close()
    before = digest(db_path)
    with pytest.raises(SchemaVersionError, match=f"version {SCHEMA_VERSION + 1}"):
        await convostore.connect(db_url(db_path), indexed_metadata=["tenant"])
    assert digest(db_path) == before
    assert raw_rows(db_path, "SELECT count(*) FROM indexed_metadata_keys") == [(0,)]


async def test_stores_connecting_at_once_migrate_once(db_path: Path) -> None:
    stores = await asyncio.gather(*(convostore.connect(db_url(db_path)) for _ in range(6)))
    for store in stores:
        await store.close()
    assert raw_rows(db_path, "SELECT count(*) FROM convostore_schema") == [(SCHEMA_VERSION,)]


async def test_a_key_newly_indexed_is_backfilled_and_only_an_explicit_drop_forgets_it(
    db_path: Path,
) -> None:
    values: list[Any] = ["acme", 7, "7", 2.5, True, None, {"b": [1, "x"]}, ["ü", 1], ""]
    store = await convostore.connect(db_url(db_path))
    before = [await store.create_session(ADA, metadata={"tenant": v}) for v in values]
    await store.create_session(ADA, metadata={"other": "acme"})
    await store.close()

    store = await convostore.connect(db_url(db_path), indexed_metadata=["tenant"])
    try:
        # A backfilled entry compares exactly as an entry written now does.
        after = [await store.create_session(ADA, metadata={"tenant": v}) for v in values]
        for value in values:
            expected = sorted(
                session.id
                for session in before + after
                if index_value(session.metadata["tenant"]) == index_value(value)
            )
            found = await store.find_sessions_by_metadata("tenant", value)
            assert [session.id for session in found] == expected, value
    finally:
        await store.close()

    # The keys belong to the database: connecting without naming one keeps it.
    store = await convostore.connect(db_url(db_path))
    assert store.indexed_metadata == {"tenant"}
    assert await store.drop_metadata_index("tenant") is True
    assert await store.drop_metadata_index("tenant") is False
    await store.close()
    assert raw_rows(db_path, "SELECT count(*) FROM session_metadata") == [(0,)]
    assert raw_rows(db_path, "SELECT count(*) FROM indexed_metadata_keys") == [(0,)]
    store = await convostore.connect(db_url(db_path), indexed_metadata=["tenant"])
    try:
        assert len(await store.find_sessions_by_metadata("tenant", "acme")) == 2
    finally:
        await store.close()


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

    async def counting_submit(
        worker: ConnectionWorker, fn: Any, args: tuple[Any, ...], write: bool
    ) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await original_submit(worker, fn, args, write)

    # Reads (`run`) and writes (`transact`) both go through `_submit`.
    monkeypatch.setattr(ConnectionWorker, "_submit", counting_submit)

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


# ------------------------------------------------------------------ errors


async def test_a_file_that_is_not_a_database_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database file, whatever its name says" * 100)
    with pytest.raises(BackendUnavailableError) as raised:
        await convostore.connect(db_url(path))
    assert isinstance(raised.value.__cause__, sqlite3.DatabaseError)


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="file modes do not bind root"
)
async def test_a_read_only_database_is_unavailable(db_path: Path) -> None:
    store = await convostore.connect(db_url(db_path))
    await store.close()
    set_modes(db_path, file_mode=0o444, directory_mode=0o555)
    try:
        with pytest.raises(BackendUnavailableError) as raised:
            await convostore.connect(db_url(db_path))
        assert isinstance(raised.value.__cause__, sqlite3.Error)
    finally:
        set_modes(db_path, file_mode=0o644, directory_mode=0o755)


async def test_a_statement_the_schema_cannot_run_is_a_bug_not_unavailable(
    db_path: Path,
) -> None:
    # A missing table (as a broken migration leaves) is a plain StoreError: a test net
    # that skips on BackendUnavailableError must never take it for a missing server.
    store = await convostore.connect(db_url(db_path))
    try:
        session = await store.create_session(ADA)
        raw = sqlite3.connect(db_path)
        raw.execute("DROP TABLE participants")
        raw.commit()
        raw.close()
        with pytest.raises(StoreError, match="no such table") as raised:
            await store.participants(session.id)
        assert not isinstance(raised.value, BackendUnavailableError)
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
    finally:
        await store.close()


async def test_a_locked_database_is_unavailable_and_nothing_leaks(db_path: Path) -> None:
    store = await convostore.connect(db_url(db_path, "busy_timeout=0"))
    session = await store.create_session(ADA)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(BackendUnavailableError, match="locked") as raised:
            await store.add_message(session.id, MessageWrite(Role.USER, "x"))
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
        # Readers are not blocked by a writer in WAL mode.
        assert await store.version(session.id) == 0
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    await store.add_message(session.id, MessageWrite(Role.USER, "x"))
    assert await store.version(session.id) == 1
    await store.close()


# ------------------------------------------------------------------ query plans

LONG_LOG = 3000


@pytest.fixture
async def traced_store(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Store, list[str]]]:
    """A store whose connections record every statement they run."""
    statements: list[str] = []

    def tracing(target: SQLiteTarget, *, reader: bool) -> sqlite3.Connection:
        connection = open_connection(target, reader=reader)
        connection.set_trace_callback(statements.append)
        return connection

    monkeypatch.setattr(sqlite_backend_module, "open_connection", tracing)
    store = await convostore.connect(db_url(db_path), indexed_metadata=["tenant"])
    yield store, statements
    await store.close()


def turn(number: int) -> list[MessageWrite | EventWrite]:
    """A user turn with a tool call, its result, an app event and an answer."""
    call = ToolCall(f"call-{number}", "search", {"n": number})
    return [
        MessageWrite(Role.USER, f"question {number}", author="ada"),
        MessageWrite(Role.ASSISTANT, "", tool_calls=[call]),
        MessageWrite(Role.TOOL, f"result {number}", tool_call_id=call.id),
        EventWrite("APP.STEP", {"n": number}, branch="agent.sub"),
        MessageWrite(Role.ASSISTANT, f"answer {number}", author="bot"),
    ]


async def long_log(store: Store) -> str:
    """A session with `LONG_LOG` events, a compaction near the end, and many sessions of
    one owner around it; returns the session id."""
    await store.put_user(ADA)
    await store.put_user(BOT)
    for number in range(150):
        await store.create_session("ada", metadata={"tenant": f"t{number % 7}"})
    session = await store.create_session("ada", metadata={"tenant": "t0"})
    for _ in range(20):
        await store.create_session("ada", part_of=session.id, held_with=BOT)
    writes = [write for number in range(LONG_LOG // 5) for write in turn(number)]
    for start in range(0, len(writes), 250):
        batch = writes[start : start + 250]
        await store.append_events(session.id, batch, await store.version(session.id))
    kept = [e.id for e in await store.read(session.id, EventFilter(last=3))]  # the last turn
    await store.append_events(
        session.id,
        [
            EventWrite(COMPACTION, {"kept_event_ids": kept}, synthetic=True),
            MessageWrite(Role.ASSISTANT, "summary", synthetic=True),
            *turn(10_000),
        ],
        await store.version(session.id),
    )
    return session.id


def plans(path: Path, statements: list[str]) -> dict[str, list[str]]:
    """EXPLAIN QUERY PLAN of each statement that reads or writes rows."""
    connection = open_connection(SQLiteTarget(str(path)), reader=True)
    try:
        return {
            statement: [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + statement)]
            for statement in statements
            if statement.split(None, 1)[0].upper()
            in ("SELECT", "UPDATE", "DELETE", "INSERT", "WITH")
        }
    finally:
        connection.close()


# What a window read walks besides tables: its own few rows, named in the statement.
WINDOW_STEPS = ("SCAN newest", "SCAN bound")


def full_scans(plan: list[str]) -> list[str]:
    """Steps that walk a whole table (a list bound as JSON is a table-valued function)."""
    return [
        step
        for step in plan
        if step.startswith("SCAN") and "VIRTUAL TABLE" not in step and step not in WINDOW_STEPS
    ]


async def test_reads_and_writes_use_indexes_on_a_long_log(
    traced_store: tuple[Store, list[str]], db_path: Path
) -> None:
    store, statements = traced_store
    session_id = await long_log(store)
    assert await store.version(session_id) > 10
    statements.clear()

    window = await store.read(session_id, EventFilter(last=2))
    assert [e.type for e in window] == ["MESSAGE"] * 3 + ["APP.STEP", "MESSAGE"]
    assert len(await store.read(session_id, EventFilter(last=3, roles=[Role.TOOL]))) == 3
    assert len(await store.messages(session_id, last=1)) == 4
    page = await store.read(session_id, EventFilter(after_seq=1500, limit=20))
    assert [e.seq for e in page] == list(range(1501, 1521))
    await store.read(session_id, EventFilter(after_seq=2000, limit=5, text="ANSWER", branch="x"))
    view = await store.read(session_id, EventFilter(active_view=True))
    assert len(view) == 1 + 5 + 5  # the summary, the kept turn, the turn after
    assert view[0].synthetic
    await store.read(session_id, EventFilter(active_view=True, last=2))
    for order in SessionOrder:
        for filter in (
            SessionFilter(),
            SessionFilter(kind="chat"),
            SessionFilter(include_parts=True),
        ):
            first = await store.list_sessions("ada", PageRequest(10, None, order), filter)
            await store.list_sessions("ada", PageRequest(10, first.next_cursor, order), filter)
            summaries = await store.list_summaries("ada", PageRequest(10, None, order), filter)
            await store.list_summaries("ada", PageRequest(10, summaries.next_cursor, order), filter)
            await store.count_sessions("ada", filter)
    assert len(await store.list_parts(session_id)) == 20
    assert await store.find_part(session_id, "bot") is not None
    await store.find_or_create_part(session_id, "bot")
    assert len(await store.find_sessions_by_metadata("tenant", "t3")) > 10
    assert [u.id for u in await store.participants(session_id)] == ["ada", "bot"]
    message = window[-1]
    await store.set_narration(session_id, message.id, "narrated")
    await store.add_message(session_id, MessageWrite(Role.USER, "more", author="ada"))
    await store.append_event(session_id, EventWrite("APP.X", id="fixed-id"))
    await store.append_event(session_id, EventWrite("APP.X", id="fixed-id"))  # a retry
    await store.delete_expired()
    fresh = await store.get_session(session_id)
    assert fresh is not None
    await store.update_session(replace(fresh, title="long"))

    explained = plans(db_path, statements)
    assert len(explained) > 30
    scans = {statement[:120]: full_scans(plan) for statement, plan in explained.items()}
    assert {s: p for s, p in scans.items() if p} == {}
    steps = [step for plan in explained.values() for step in plan]
    for index in (
        "events_by_seq",
        "events_turn_starts",
        "events_compactions",
        "events_by_id",
        "sessions_top_by_created",
        "sessions_top_kind_by_created",
        "sessions_by_created",
        "sessions_by_activity",
        "sessions_parts",
        "sessions_expiry",
        "participants_in_order",
    ):
        assert any(f"INDEX {index} " in step for step in steps), index


def test_every_assembled_statement_walks_an_index(db_path: Path) -> None:
    """Each statement the fragments can make, whatever the filter, reaches its rows by an
    index of the session (or the owner), never by a walk of the whole table."""
    target = SQLiteTarget(str(db_path))
    connection = open_connection(target, reader=False)
    prepare_database(connection, target)
    unbound: defaultdict[str, None] = defaultdict(lambda: None)

    def plan(statement: str) -> list[str]:
        return [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + statement, unbound)]

    try:
        for shape in get_args(sql.EventShape):
            for conditions, keys in itertools.product(
                itertools.product((False, True), repeat=len(sql.EVENT_CONDITIONS)), (False, True)
            ):
                steps = plan(sql.events_sql(shape, conditions, keys))
                assert full_scans(steps) == [], (shape, conditions, steps)
                assert "INDEX events_by_seq (session_id=?" in steps[0], (shape, steps)
                if shape == "window":  # its probe for a turn start
                    assert any("INDEX events_turn_starts (session_id=?" in s for s in steps)
        flags = (False, True)
        for summaries, order, parts, by_kind, paged in itertools.product(
            flags, list(SessionOrder), flags, flags, flags
        ):
            options = (summaries, order, parts, by_kind, paged)
            steps = plan(sql.STATEMENTS.listing(summaries, order, parts, by_kind, paged))
            assert full_scans(steps) == [], (options, steps)
            assert "(owner_id=?" in steps[0]
        for include_parts, by_kind in itertools.product((False, True), repeat=2):
            steps = plan(sql.STATEMENTS.count(include_parts, by_kind))
            assert steps[0].startswith("SEARCH owner_session_counts USING PRIMARY KEY")
    finally:
        connection.close()


# ------------------------------------------------------------------ filters in SQL


def varied_log_writes(rng: random.Random) -> list[MessageWrite | EventWrite]:
    base = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    texts = ["Hello", "hello WORLD", "50%_off", "5_%", "Straße", "STRASSE", "ÄRGER über", "", "x"]
    branches = [None, None, "a", "a.b", "a.b.c", "ab", "z"]
    writes: list[MessageWrite | EventWrite] = []
    for number in range(160):
        at = base + timedelta(seconds=rng.randrange(0, 3600), microseconds=number)
        branch = rng.choice(branches)
        synthetic = rng.random() < 0.1
        if rng.random() < 0.75:
            role = rng.choice(list(Role))
            content = rng.choice(texts) + f" {number}"
            writes.append(
                MessageWrite(role, content, branch=branch, created_at=at, synthetic=synthetic)
            )
        else:
            kind = rng.choice(["APP.A", "APP.B", "TOOL.RUN"])
            writes.append(EventWrite(kind, {"n": number}, branch=branch, created_at=at))
    return writes


def random_filter(rng: random.Random, base: datetime) -> EventFilter:
    def maybe(value: Any) -> Any:
        return value if rng.random() < 0.3 else None

    limit, last = None, None
    window = rng.random()
    if window < 0.35:
        last = rng.randrange(0, 30)
    elif window < 0.6:
        limit = rng.randrange(0, 30)
    return EventFilter(
        active_view=rng.random() < 0.3,
        types=maybe(rng.sample(["MESSAGE", "APP.A", "APP.B", "COMPACTION"], rng.randrange(0, 3))),
        roles=maybe(rng.sample(list(Role), rng.randrange(0, 3))),
        exclude_synthetic=rng.random() < 0.3,
        branch=maybe(rng.choice(["a", "a.b", "a.b.c", "ab", "z", "q.r"])),
        since=maybe(base + timedelta(seconds=rng.randrange(0, 3600))),
        until=maybe(base + timedelta(seconds=rng.randrange(0, 3600))),
        text=maybe(rng.choice(["hello", "%_", "5_%", "straße", "strasse", "ärger", "Ü", "", "1"])),
        after_seq=maybe(rng.randrange(0, 200)),
        limit=limit,
        last=last,
    )


async def test_filters_in_sql_answer_as_the_reference(store: Store) -> None:
    rng = random.Random(20240506)
    session = await store.create_session(ADA)
    writes = varied_log_writes(rng)
    await store.append_events(session.id, writes[:100], 0)
    log = await store.read(session.id)
    kept = [event.id for event in rng.sample(log, 12)]
    await store.append_events(
        session.id,
        [
            # A boundary may name an event twice; the view holds it once.
            EventWrite(COMPACTION, {"kept_event_ids": kept + kept[:3]}, synthetic=True),
            MessageWrite(Role.ASSISTANT, "summary one", synthetic=True),
            MessageWrite(Role.ASSISTANT, "summary two", synthetic=True),
        ],
        1,
    )
    for write in writes[100:130]:
        await store.append_event(session.id, write)
    log = await store.read(session.id)
    named = {
        "kept_event_ids": [event.id for event in rng.sample(log, 20)],
        "summary_event_ids": ["summary-a", "summary-b"],
    }
    await store.append_events(
        session.id,
        [
            EventWrite(COMPACTION, named, synthetic=True),
            MessageWrite(Role.USER, "not a summary", created_at=writes[0].created_at),
            MessageWrite(Role.ASSISTANT, "named", id="summary-a", synthetic=True),
            MessageWrite(Role.SYSTEM, "named too", id="summary-b", synthetic=True),
        ],
        await store.version(session.id),
    )
    for write in writes[130:]:
        await store.append_event(session.id, write)
    log = await store.read(session.id)
    assert len(log) == 167
    base = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    for _ in range(400):
        event_filter = random_filter(rng, base)
        validated = event_filter.validated()
        events = active_view(log) if validated.active_view else log
        assert await store.read(session.id, event_filter) == apply_filter(events, validated), (
            event_filter
        )


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


# ------------------------------------------------------------------ the vector cache

WIDTH = 16
BOB = User("bob", "Bob")


@pytest.fixture
async def vector_store(db_path: Path) -> AsyncIterator[Store]:
    opened = await convostore.connect(db_url(db_path), embedder=HashingEmbedder(WIDTH))
    yield opened
    await opened.close()


@pytest.fixture
async def vector_peer(db_path: Path, vector_store: Store) -> AsyncIterator[Store]:
    """Another store object on the same file: another set of connections."""
    opened = await convostore.connect(db_url(db_path), embedder=HashingEmbedder(WIDTH))
    yield opened
    await opened.close()


def gaussian(rng: random.Random, width: int = WIDTH) -> list[float]:
    return [rng.gauss(0.0, 1.0) for _ in range(width)]


def vector_write(
    rng: random.Random, role: Role = Role.USER, model: str | None = None, width: int = WIDTH
) -> MessageWrite:
    """A message with a random vector of the store's model (``model``, when given)."""
    return MessageWrite(
        role,
        f"message {rng.random()}",
        embedding=gaussian(rng, width),
        embedding_model=model or HashingEmbedder(WIDTH).name,
    )


async def vector_session(
    store: Store,
    rng: random.Random,
    owner: User = ADA,
    messages: int = 8,
    expires_at: datetime | None = None,
) -> str:
    session = await store.create_session(owner, expires_at=expires_at)
    roles = [Role.USER, Role.ASSISTANT, Role.TOOL]
    writes = [vector_write(rng, roles[n % 3]) for n in range(messages)]
    await store.append_events(session.id, writes, expected_version=0)
    return session.id


async def scanned(store: Store, vector: tuple[float, ...], k: int, **scope: Any) -> Any:
    """What a scan of the database answers, without the cache."""
    spec = store.vector_index
    roles = scope.get("roles")
    arguments = (
        vector,
        spec.metric if spec else "cosine",
        spec.model if spec else None,
        k,
        scope.get("owner_id"),
        scope.get("session_id"),
        None if roles is None else tuple(Role(role) for role in roles),
    )
    return await sqlite_of(store)._readers.run(in_read_snapshot, sqlite_search._scan, arguments)


async def assert_exact(
    store: Store, rng: random.Random, session_ids: list[str], searches: int = 4
) -> None:
    """Searches of random vectors in random scopes answer what a scan answers."""
    for _ in range(searches):
        vector = tuple(gaussian(rng))
        scope: dict[str, Any] = {}
        if rng.random() < 0.4:
            scope["owner_id"] = rng.choice(["ada", "bob", "nobody"])
        if rng.random() < 0.3 and session_ids:
            scope["session_id"] = rng.choice([*session_ids, "no-such-session"])
        if rng.random() < 0.3:
            scope["roles"] = rng.choice([["user"], ["assistant", "tool"], ["system"]])
        k = rng.choice([1, 3, 10, 1000])
        hits = await store.search(vector=vector, k=k, **scope)
        expected = await scanned(store, vector, k, **scope)
        assert [hit.message for hit in hits] == [hit.message for hit in expected], scope
        # float32 products: BLAS may sum a row in another order in another matrix.
        assert [hit.score for hit in hits] == pytest.approx(
            [hit.score for hit in expected], rel=1e-5, abs=1e-6
        )


async def is_nearest(store: Store, vector: Any, message_id: str, **scope: Any) -> bool:
    """Whether the message is the best hit for a vector, as for its own (score 1)."""
    hits = await store.search(vector=vector, k=1, **scope)
    return bool(hits) and hits[0].message.id == message_id and abs(hits[0].score - 1.0) < 1e-5


async def found_ids(store: Store) -> set[str]:
    """Every message a vector search can find."""
    return {hit.message.id for hit in await store.search(vector=gaussian(random.Random(0)), k=1000)}


async def test_the_cache_follows_appends_from_this_store(vector_store: Store) -> None:
    rng = random.Random(1)
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB)]
    await assert_exact(vector_store, rng, sessions)
    for number in range(12):
        if number % 3 == 0:
            sessions.append(await vector_session(vector_store, rng, rng.choice([ADA, BOB]), 3))
        write = vector_write(rng, rng.choice([Role.USER, Role.ASSISTANT]))
        message = await vector_store.add_message(rng.choice(sessions), write)
        await vector_store.append_event(sessions[0], EventWrite("APP.STEP"))  # no vector
        assert await is_nearest(vector_store, write.embedding, message.id)
        await assert_exact(vector_store, rng, sessions, 2)


async def test_the_cache_follows_appends_from_another_store(
    vector_store: Store, vector_peer: Store
) -> None:
    rng = random.Random(2)
    sessions = [await vector_session(vector_store, rng)]
    await assert_exact(vector_store, rng, sessions)
    for _ in range(5):
        sessions.append(await vector_session(vector_peer, rng, BOB, 4))
        write = vector_write(rng)
        message = await vector_peer.add_message(sessions[0], write)
        assert await is_nearest(vector_store, write.embedding, message.id)
        assert not await is_nearest(vector_store, write.embedding, message.id, owner_id="bob")
        await assert_exact(vector_store, rng, sessions, 2)
        await assert_exact(vector_peer, rng, sessions, 1)


async def test_the_cache_follows_replaced_vectors(vector_store: Store, vector_peer: Store) -> None:
    rng = random.Random(3)
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB, ADA)]
    await assert_exact(vector_store, rng, sessions)
    model = HashingEmbedder(WIDTH).name
    for writer in (vector_store, vector_peer, vector_store):
        messages = await vector_store.messages(rng.choice(sessions))
        target = rng.choice(messages)
        old, new = target.embedding, gaussian(rng)
        await sqlite_of(writer).set_embeddings(model, [(target.id, tuple(new))])
        assert await is_nearest(vector_store, new, target.id)
        assert not await is_nearest(vector_store, old, target.id)
        await assert_exact(vector_store, rng, sessions, 3)


async def test_the_cache_follows_a_reembed_from_either_store(
    vector_store: Store, vector_peer: Store
) -> None:
    rng = random.Random(4)
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB)]
    await assert_exact(vector_store, rng, sessions)
    # The peer moves every vector to another model: this store's model has none left.
    other = HashingEmbedder(WIDTH)
    other.name = "other-model"
    assert (await vector_peer.reembed(other)).messages == 16
    assert await vector_store.search(vector=gaussian(rng), k=10) == []
    await assert_exact(vector_store, rng, sessions)
    # This store follows to the model; its searches then rank the new vectors.
    renamed = HashingEmbedder(WIDTH)
    renamed.name = "renamed-model"
    assert (await vector_store.reembed(renamed)).messages == 16
    [message, *_] = await vector_store.messages(sessions[1])
    assert message.embedding_model == "renamed-model"
    assert await is_nearest(vector_store, message.embedding, message.id)
    await assert_exact(vector_store, rng, sessions)


async def test_the_cache_forgets_a_deleted_session_and_a_reused_rowid(
    vector_store: Store, db_path: Path
) -> None:
    rng = random.Random(5)
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB, ADA)]
    await assert_exact(vector_store, rng, sessions)
    newest = sessions.pop()
    gone = await vector_store.messages(newest)
    [(top_before,)] = raw_rows(db_path, "SELECT max(rowid) FROM events")
    assert await vector_store.delete_session(newest)
    assert not {message.id for message in gone} & await found_ids(vector_store)
    await assert_exact(vector_store, rng, sessions)
    # The next rows take the rowids the deleted ones had.
    writes = [vector_write(rng) for _ in range(4)]
    await vector_store.append_events(sessions[0], writes, await vector_store.version(sessions[0]))
    [(top_after,)] = raw_rows(db_path, "SELECT max(rowid) FROM events")
    assert top_after < top_before
    for message in (await vector_store.messages(sessions[0]))[-4:]:
        assert await is_nearest(vector_store, message.embedding, message.id)
    await assert_exact(vector_store, rng, sessions)
    # Rows without vectors, seen by a search and then deleted, leave their rowids free
    # too: the vectors that take them are found.
    plain = (await vector_store.create_session(BOB)).id
    await vector_store.append_events(plain, [EventWrite("APP.STEP")] * 5, expected_version=0)
    await assert_exact(vector_store, rng, sessions)
    assert await vector_store.delete_session(plain)
    write = vector_write(rng)
    message = await vector_store.add_message(sessions[1], write)
    assert await is_nearest(vector_store, write.embedding, message.id)
    await assert_exact(vector_store, rng, sessions)


async def test_the_cache_forgets_expired_sessions(vector_store: Store, vector_peer: Store) -> None:
    rng = random.Random(6)
    past = datetime.now(UTC) - timedelta(days=1)
    future = datetime.now(UTC) + timedelta(days=1)
    kept = [await vector_session(vector_store, rng, ADA, expires_at=future)]
    expiring = [await vector_session(vector_store, rng, BOB, expires_at=past) for _ in range(2)]
    kept.append(await vector_session(vector_store, rng, BOB))
    await assert_exact(vector_store, rng, kept + expiring)
    gone = [m for session in expiring for m in await vector_store.messages(session)]
    for deleter in (vector_store, vector_peer):
        await deleter.delete_expired()
        await assert_exact(vector_store, rng, kept + expiring)
        assert not {message.id for message in gone} & await found_ids(vector_store)
        expiring.append(await vector_session(vector_peer, rng, BOB, expires_at=past))
        gone = await vector_peer.messages(expiring[-1])


async def test_the_cache_stays_exact_through_any_interleaving(
    vector_store: Store, vector_peer: Store
) -> None:
    rng = random.Random(7)
    stores = [vector_store, vector_peer]
    past = datetime.now(UTC) - timedelta(days=1)
    model = HashingEmbedder(WIDTH).name
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB)]
    for step in range(60):
        writer = rng.choice(stores)
        action = rng.randrange(7)
        if action == 0:
            sessions.append(await vector_session(writer, rng, rng.choice([ADA, BOB]), 3))
        elif action == 1 and sessions:
            await writer.add_message(rng.choice(sessions), vector_write(rng))
        elif action == 2 and sessions:
            await writer.append_event(rng.choice(sessions), EventWrite("APP.STEP"))
        elif action == 3 and sessions:
            messages = await writer.messages(rng.choice(sessions))
            chosen = rng.sample(messages, min(2, len(messages)))
            await sqlite_of(writer).set_embeddings(
                model, [(m.id, tuple(gaussian(rng))) for m in chosen]
            )
        elif action == 4 and len(sessions) > 2:
            await writer.delete_session(sessions.pop(rng.randrange(len(sessions))))
        elif action == 5:
            sessions.append(await vector_session(writer, rng, BOB, 2, expires_at=past))
            await writer.delete_expired()
            sessions.pop()
        elif action == 6 and sessions:
            message = rng.choice(await writer.messages(rng.choice(sessions)))
            await writer.set_narration(message.session_id, message.id, f"step {step}")
        await assert_exact(rng.choice(stores), rng, sessions, 1)


async def test_concurrent_searches_see_what_was_written_before_them(
    vector_store: Store, vector_peer: Store
) -> None:
    """Both reader threads share the cache while appends from two stores grow it, past
    the room it was built with."""
    rng = random.Random(8)
    session = await vector_store.create_session(ADA)
    first = vector_write(rng)
    written = [((await vector_store.add_message(session.id, first)).id, first.embedding)]
    assert await is_nearest(vector_store, first.embedding, written[0][0])  # room for 65
    appending = 2

    async def append(store: Store) -> int:
        nonlocal appending
        try:
            for _ in range(60):
                write = vector_write(rng)
                written.append(((await store.add_message(session.id, write)).id, write.embedding))
        finally:
            appending -= 1
        return 0

    async def search() -> int:
        searches = 0
        while appending:
            message_id, vector = written[rng.randrange(len(written))]
            assert await is_nearest(vector_store, vector, message_id)
            searches += 1
        return searches

    counts = await asyncio.gather(append(vector_store), append(vector_peer), search(), search())
    assert min(counts[2:]) > 5
    await assert_exact(vector_store, rng, [session.id])


async def test_a_search_in_an_older_snapshot_answers_for_that_snapshot(
    vector_store: Store, db_path: Path
) -> None:
    """A reader whose snapshot is older than the cache (which another search brought to
    a later change) scans the database as it sees it."""
    rng = random.Random(9)
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB)]
    cache = VectorCache()
    target = SQLiteTarget(str(db_path))
    old, new = (open_connection(target, reader=True) for _ in range(2))
    model = HashingEmbedder(WIDTH).name

    def searched(connection: sqlite3.Connection, vector: Any, k: int) -> list[str]:
        metric: Metric = "cosine"
        arguments = (tuple(vector), metric, model, k, None, None, None)
        hits = sqlite_search.read_vector_search(connection, cache, *arguments)
        expected = sqlite_search._scan(connection, *arguments)
        assert [hit.message for hit in hits] == [hit.message for hit in expected]
        assert [hit.score for hit in hits] == pytest.approx(
            [hit.score for hit in expected], rel=1e-5, abs=1e-6
        )
        return [hit.message.id for hit in hits]

    def in_new_snapshot(vector: Any, k: int) -> list[str]:
        return in_read_snapshot(new, searched, (vector, k))

    try:
        old.execute("BEGIN")
        everything = searched(old, gaussian(rng), 1000)  # builds the cache
        assert len(everything) == 16
        appended = vector_write(rng)
        message = await vector_store.add_message(sessions[0], appended)
        assert in_new_snapshot(appended.embedding, 1) == [message.id]  # the cache grows
        # The old snapshot does not hold the new vector.
        [nearest] = searched(old, appended.embedding, 1)
        assert nearest in everything
        assert len(searched(old, gaussian(rng), 1000)) == 16
        await vector_store.delete_session(sessions[1])
        assert len(in_new_snapshot(gaussian(rng), 1000)) == 9  # the deletes applied
        # A snapshot older than the cache: scanned as the old snapshot sees it.
        assert len(searched(old, gaussian(rng), 1000)) == 16
        assert searched(old, appended.embedding, 1) == [nearest]
        old.execute("COMMIT")
        assert len(in_read_snapshot(old, searched, (gaussian(rng), 1000))) == 9
    finally:
        old.close()
        new.close()


async def test_searches_read_only_the_rows_changed_since(
    vector_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inserts, re-embeddings and deletes are applied in place: a search reads the rows
    the change log names and never rebuilds."""
    written: list[int] = []
    builds: list[int] = []
    write = shared_vector_cache.VectorTable._write
    build = shared_vector_cache.build

    def counting(table: Any, rows: list[Any], slots: Any) -> None:
        written.append(len(rows))
        write(table, rows, slots)

    def counting_builds(*arguments: Any) -> Any:
        builds.append(1)
        return build(*arguments)

    monkeypatch.setattr(shared_vector_cache.VectorTable, "_write", counting)
    monkeypatch.setattr(shared_vector_cache, "build", counting_builds)
    rng = random.Random(10)
    sessions = [await vector_session(vector_store, rng, owner, 10) for owner in (ADA, BOB)]
    vector = gaussian(rng)
    await vector_store.search(vector=vector)
    assert sum(written) == 20
    written.clear()
    await vector_store.search(vector=vector, owner_id="bob")
    await vector_store.search(vector=vector, mode="hybrid", query="message")
    assert written == []
    await vector_store.add_message(sessions[0], vector_write(rng))
    await vector_store.append_event(sessions[0], EventWrite("APP.STEP"))
    await vector_store.search(vector=vector)
    assert written == [1]
    written.clear()
    message = (await vector_store.messages(sessions[0]))[0]
    await vector_store.set_narration(sessions[0], message.id, "narrated")
    await vector_store.search(vector=vector)
    assert written == []
    await sqlite_of(vector_store).set_embeddings(
        HashingEmbedder(WIDTH).name, [(message.id, tuple(gaussian(rng)))]
    )
    await vector_store.search(vector=vector)
    assert written == [1]
    written.clear()
    await vector_store.delete_session(sessions[1])
    assert len(await vector_store.search(vector=vector, k=100)) == 11
    assert written == []
    assert builds == [1]


async def test_without_an_index_every_model_of_the_width_is_searched(store: Store) -> None:
    rng = random.Random(11)
    session = await store.create_session(ADA)
    writes = [
        vector_write(rng, model=model, width=width)
        for model, width in [("a", WIDTH), ("b", WIDTH), ("c", 8)] * 4
    ]
    await store.append_events(session.id, writes, expected_version=0)
    assert store.vector_index is None
    hits = await store.search(vector=gaussian(rng), k=1000)
    assert {hit.message.embedding_model for hit in hits} == {"a", "b"}
    assert len(hits) == 8
    await assert_exact(store, rng, [session.id])
    narrow = await store.search(vector=gaussian(rng, 8), k=1000)
    assert [hit.message.embedding_model for hit in narrow] == ["c"] * 4


async def test_the_change_log_names_every_change_of_a_vector(
    vector_store: Store, db_path: Path
) -> None:
    def logged() -> list[int]:
        return [row[0] for row in raw_rows(db_path, "SELECT event_rowid FROM vector_changes")]

    def generation() -> int:
        [(value,)] = raw_rows(db_path, "SELECT generation FROM vector_generation")
        return int(value)

    rng = random.Random(12)
    start, before = generation(), len(logged())
    session = await vector_session(vector_store, rng, ADA, 3)
    assert len(logged()) == before + 3
    message = (await vector_store.messages(session))[0]
    await vector_store.set_narration(session, message.id, "narrated")
    fresh = await vector_store.get_session(session)
    assert fresh is not None
    await vector_store.update_session(replace(fresh, title="titled"))
    await vector_store.append_event(session, EventWrite("APP.STEP"))
    assert len(logged()) == before + 3
    await sqlite_of(vector_store).set_embeddings("m", [(message.id, tuple(gaussian(rng)))])
    [(rowid,)] = raw_rows(db_path, "SELECT rowid FROM events WHERE id = ?", message.id)
    assert logged()[-1] == rowid
    assert await vector_store.delete_session(session)
    assert len(logged()) == before + 3 + 1 + 3  # each vector deleted, by the cascade too
    assert generation() == start


async def test_close_drops_the_cached_vectors(db_path: Path) -> None:
    store = await convostore.connect(db_url(db_path), embedder=HashingEmbedder(WIDTH))
    session = await vector_session(store, random.Random(13))
    assert await store.search(vector=gaussian(random.Random(14)), session_id=session)
    assert sqlite_of(store)._vector_cache.table is not None
    await store.close()
    assert sqlite_of(store)._vector_cache.table is None


async def test_the_cache_serves_a_memory_database() -> None:
    store = await convostore.connect("sqlite:///:memory:", embedder=HashingEmbedder(WIDTH))
    try:
        rng = random.Random(15)
        sessions = [await vector_session(store, rng, owner) for owner in (ADA, BOB)]
        await assert_exact(store, rng, sessions)
        write = vector_write(rng)
        message = await store.add_message(sessions[0], write)
        assert await is_nearest(store, write.embedding, message.id)
        assert await store.delete_session(sessions[0])
        assert message.id not in await found_ids(store)
        await assert_exact(store, rng, sessions[1:])
    finally:
        await store.close()
