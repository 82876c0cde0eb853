"""The SQLite backend's URLs, and its schema: migrations recorded and applied once, a
newer schema refused, indexed keys kept by the database."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import convostore
from convostore import (
    BackendUnavailableError,
    InvalidArgumentError,
    MessageWrite,
    Role,
    SchemaVersionError,
    Store,
    ToolCall,
)
from convostore._json import index_value
from convostore.backends.sqlite import SCHEMA_VERSION, SQLiteBackend, SQLiteTarget, parse_sqlite_url
from tests.backends.sqlite.support import (
    ADA,
    BOT,
    db_url,
    digest,
    raw_rows,
)

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
