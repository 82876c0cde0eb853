"""SQLite's text index, fed in batches (schema version 6), and the upgrades that bring a
database written by an older schema to it: each older database is built here from the
prefix of the migration list and written by that schema's own statements and triggers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import convostore
from convostore import EventWrite, MessageWrite, PageRequest, Role, SessionOrder, Store
from convostore.backends.sqlite import SQLiteTarget
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite import text_index as text_index_module
from convostore.backends.sqlite.connection import open_connection
from convostore.backends.sqlite.schema import MIGRATIONS, SCHEMA_VERSION, VERSION_TABLE
from convostore.backends.sqlite.text_index import BATCH, write_catch_up
from convostore.ids import new_id
from tests.backends.sqlite.support import ADA, db_url, sqlite_of


def raw_rows(path: Path, statement: str) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(statement).fetchall()
    finally:
        connection.close()


def indexed_through(path: Path) -> int:
    value = raw_rows(path, "SELECT indexed_through FROM text_index_state")[0][0]
    assert isinstance(value, int)
    return value


def top_rowid(path: Path) -> int:
    value = raw_rows(path, "SELECT coalesce(max(rowid), 0) FROM events")[0][0]
    assert isinstance(value, int)
    return value


class OldDatabase:
    """A database at an older schema version, built from ``MIGRATIONS[:version]`` and
    written through that schema's statements (its triggers index what it writes)."""

    def __init__(self, path: Path, version: int) -> None:
        assert version < SCHEMA_VERSION
        self.connection = open_connection(SQLiteTarget(str(path)), reader=False)
        self.connection.execute("PRAGMA journal_mode = WAL")
        self.connection.execute(VERSION_TABLE.create)
        for number, statements in enumerate(MIGRATIONS[:version], start=1):
            for statement in statements:
                self.connection.execute(statement)
            self.connection.execute(VERSION_TABLE.record, {"version": number, "applied_at": 0})
        self.connection.execute(
            sql.STATEMENTS.upsert_user, ("ada", "Ada", None, None, "human", "{}")
        )

    def session(self) -> str:
        session_id = new_id()
        self.connection.execute(
            sql.INSERT_SESSION,
            (session_id, "ada", None, "chat", None, None, 1, 1, None, "{}", 0, "s"),
        )
        return session_id

    def message(self, session_id: str, seq: int, content: str) -> str:
        event_id = new_id()
        self.connection.execute(
            sql.INSERT_EVENT,
            (
                *(session_id, seq, event_id, "MESSAGE", 1, None, "{}", None, 0),
                *("user", content, "ada", "[]", None, "[]", None, "[]", "[]", "[]"),
                *(None, None, None, "s"),
            ),
        )
        self._advance(session_id, seq)
        return event_id

    def _advance(self, session_id: str, seq: int) -> None:
        self.connection.execute(
            "UPDATE sessions SET last_seq = ?1, version = ?1 WHERE id = ?2", (seq, session_id)
        )

    def event(self, session_id: str, seq: int) -> None:
        self.connection.execute(
            sql.INSERT_EVENT,
            (session_id, seq, new_id(), "APP.STEP", 1, None, "{}", None, 0, *(None,) * 14),
        )
        self._advance(session_id, seq)

    def close(self) -> None:
        self.connection.close()


async def text_hits(store: Store, query: str) -> list[str]:
    return [hit.message.id for hit in await store.search(query, mode="text")]


async def test_the_text_index_migrates_to_the_words_every_backend_matches(
    db_path: Path,
) -> None:
    # Schema version 3's index held the content as the unicode61 tokenizer splits it:
    # "straße" and "ﬁnal" as written.
    old = OldDatabase(db_path, 3)
    session_id = old.session()
    message_id = old.message(session_id, 1, "Die Straße, ﬁnal")
    old.close()
    store = await convostore.connect(db_url(db_path))
    try:
        for query in ("strasse", "straße", "final"):
            assert await text_hits(store, query) == [message_id], query
        await store.delete_session(session_id)
        assert await store.search("strasse", mode="text") == []
    finally:
        await store.close()


async def test_a_database_of_the_previous_schema_upgrades_with_its_index(db_path: Path) -> None:
    old = OldDatabase(db_path, SCHEMA_VERSION - 1)
    first, second = old.session(), old.session()
    old_ids = [old.message(first, 1, "alpha words"), old.message(second, 1, "alpha more")]
    old.event(second, 2)
    old.close()
    top = top_rowid(db_path)
    store = await convostore.connect(db_url(db_path))
    try:
        # The old trigger indexed every message: the mark starts above all of them.
        assert indexed_through(db_path) == top
        assert sorted(await text_hits(store, "alpha")) == sorted(old_ids)
        new = await store.add_message(first, MessageWrite(Role.USER, "alpha beta"))
        assert indexed_through(db_path) == top  # nothing indexed at the append
        assert await text_hits(store, "beta") == [new.id]
        assert indexed_through(db_path) == top_rowid(db_path)
        by_activity = PageRequest(order=SessionOrder.LAST_ACTIVITY)
        listed = await store.list_sessions("ada", by_activity)
        assert [session.id for session in listed.items] == [first, second]
        assert await store.delete_session(second)
        assert sorted(await text_hits(store, "alpha")) == sorted([old_ids[0], new.id])
        assert await text_hits(store, "more") == []
    finally:
        await store.close()
    assert raw_rows(db_path, "SELECT max(version) FROM convostore_schema") == [(SCHEMA_VERSION,)]


async def test_a_search_finds_every_message_appended_before_it(store: Store) -> None:
    session = await store.create_session(ADA)
    written = [
        (await store.add_message(session.id, MessageWrite(Role.USER, f"gamma {n}"))).id
        for n in range(5)
    ]
    assert sorted(await text_hits(store, "gamma")) == sorted(written)
    assert await text_hits(store, "3") == [written[3]]


async def test_the_writer_indexes_a_batch_without_a_search(store: Store, db_path: Path) -> None:
    session = await store.create_session(ADA)
    for n in range(BATCH // 2):
        await store.add_message(session.id, MessageWrite(Role.USER, f"delta {n}"))
    assert indexed_through(db_path) == 0
    for n in range(BATCH):
        await store.add_message(session.id, MessageWrite(Role.USER, f"delta {n}"))
    # A batch is indexed after the commit that counted its last message (or the one
    # before, when that message was counted before the writer looked), before the next
    # write; the messages after it wait.
    await store.append_event(session.id, EventWrite("APP.STEP"))
    through = indexed_through(db_path)
    assert BATCH - 1 <= through < BATCH // 2 + BATCH
    matched = "SELECT count(*) FROM events_fts WHERE events_fts MATCH 'delta'"
    assert raw_rows(db_path, matched) == [(through,)]
    assert len(await store.search("delta", mode="text", k=1000)) == BATCH // 2 + BATCH


async def test_a_batch_commits_without_an_fsync_and_the_writes_keep_theirs(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    levels: list[int] = []

    def recording(connection: sqlite3.Connection) -> int:
        levels.append(connection.execute("PRAGMA synchronous").fetchone()[0])
        return write_catch_up(connection)

    monkeypatch.setattr(text_index_module, "write_catch_up", recording)
    session = await store.create_session(ADA)
    for n in range(BATCH + 2):
        await store.add_message(session.id, MessageWrite(Role.USER, f"delta {n}"))
    await store.append_event(session.id, EventWrite("APP.STEP"))
    assert levels
    assert set(levels) == {1}  # NORMAL: the batch's own commit
    writer = sqlite_of(store)._writer
    level = await writer.run(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
    assert level == 2  # FULL again, the store's default, for every write after it


async def test_messages_of_another_store_are_indexed_by_the_search(
    store: Store, db_path: Path
) -> None:
    other = await convostore.connect(db_url(db_path))
    try:
        session = await other.create_session(ADA)
        message = await other.add_message(session.id, MessageWrite(Role.USER, "epsilon"))
    finally:
        await other.close()
    assert await text_hits(store, "epsilon") == [message.id]


@pytest.mark.parametrize("indexed", [True, False])
async def test_a_deleted_top_row_leaves_no_stale_words_for_the_rowid_reused(
    store: Store, db_path: Path, indexed: bool
) -> None:
    keep = await store.create_session(ADA)
    kept = await store.add_message(keep.id, MessageWrite(Role.USER, "zeta kept"))
    gone = await store.create_session(ADA)
    await store.add_message(gone.id, MessageWrite(Role.USER, "zeta gone"))
    if indexed:
        assert await text_hits(store, "gone") != []
    reused = top_rowid(db_path)
    assert await store.delete_session(gone.id)
    assert indexed_through(db_path) <= top_rowid(db_path)
    again = await store.add_message(keep.id, MessageWrite(Role.USER, "eta"))
    assert top_rowid(db_path) == reused  # SQLite gave the deleted rowid out again
    assert await text_hits(store, "gone") == []
    assert await text_hits(store, "eta") == [again.id]
    assert await text_hits(store, "zeta") == [kept.id]
