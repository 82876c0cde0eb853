"""SQLite's cache of decoded events (`event_cache`): a read decodes only rows it has not
seen, and never answers with an event whose row has changed or gone since."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, cast

import pytest

import convostore
from convostore import EventFilter, EventWrite, HashingEmbedder, MessageWrite, Role, Store
from convostore.backends.sqlite import SQLiteBackend, SQLiteTarget, event_cache
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.connection import open_connection
from convostore.backends.sqlite.event_cache import EventCache, read_through
from convostore.backends.sqlite.operations import read_events
from convostore.backends.sqlite.rows import event_from_row
from convostore.model import Event, Message
from tests.backends.sqlite.support import ADA, db_url

LAST_FOUR = EventFilter(last=4)


def top_rowid(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        rowid: int = connection.execute("SELECT max(rowid) FROM events").fetchone()[0]
        return rowid
    finally:
        connection.close()


def cache_of(store: Store) -> EventCache:
    assert isinstance(store.backend, SQLiteBackend)
    return store.backend._event_cache


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The rows the cache's reads decode."""
    rows: list[Any] = []

    def counting(row: Any, start: int = 0) -> Any:
        rows.append(row)
        return event_from_row(row, start)

    monkeypatch.setattr(event_cache, "event_from_row", counting)
    return rows


async def a_log(store: Store) -> str:
    session = await store.create_session(ADA)
    for n in range(6):
        await store.add_message(session.id, MessageWrite(Role.USER, f"message {n}"))
    return session.id


async def test_a_second_read_decodes_only_what_is_new(store: Store, decoded: list[Any]) -> None:
    session_id = await a_log(store)
    first = await store.read(session_id, LAST_FOUR)
    assert len(decoded) == 4
    assert await store.read(session_id, LAST_FOUR) == first
    assert len(decoded) == 4
    await store.append_event(session_id, EventWrite("APP.STEP", {"n": 1}))
    await store.add_message(session_id, MessageWrite(Role.USER, "new"))
    again = await store.read(session_id, LAST_FOUR)
    assert again[:2] == first[2:]
    assert len(decoded) == 6


async def test_a_narration_written_after_a_read_is_read(store: Store) -> None:
    session_id = await a_log(store)
    message = (await store.read(session_id, LAST_FOUR))[-1]
    assert isinstance(message, Message)
    assert await store.set_narration(session_id, message.id, "told")
    narrated = (await store.read(session_id, LAST_FOUR))[-1]
    assert isinstance(narrated, Message)
    assert (narrated.narration, message.narration) == ("told", None)


async def test_a_change_by_another_store_is_read(store: Store, db_path: Path) -> None:
    session_id = await a_log(store)
    before = await store.read(session_id, LAST_FOUR)
    other = await convostore.connect(db_url(db_path), embedder=HashingEmbedder(16))
    try:
        await other.set_narration(session_id, before[0].id, "from elsewhere")
        await other.reembed()
    finally:
        await other.close()
    after = await store.read(session_id, LAST_FOUR)
    assert [event.id for event in after] == [event.id for event in before]
    assert all(isinstance(event, Message) and event.embedding is not None for event in after)
    assert isinstance(after[0], Message)
    assert after[0].narration == "from elsewhere"


async def test_a_rowid_given_out_again_is_not_mistaken_for_the_deleted_row(
    store: Store, db_path: Path
) -> None:
    session = await store.create_session(ADA, session_id="same")
    await store.append_event(session.id, EventWrite("APP.STEP", {"old": True}, id="step"))
    assert (await store.read("same"))[0].payload == {"old": True}
    rowid = top_rowid(db_path)
    assert await store.delete_session("same")
    await store.create_session(ADA, session_id="same")
    await store.append_event("same", EventWrite("APP.STEP", {"old": False}, id="step"))
    assert top_rowid(db_path) == rowid
    assert (await store.read("same"))[0].payload == {"old": False}


async def test_rows_without_a_stamp_are_read_but_never_kept(store: Store, db_path: Path) -> None:
    session = await store.create_session(ADA)
    await store.append_event(session.id, EventWrite("APP.STEP"))
    # As schema versions before 5 wrote events other than messages.
    with sqlite3.connect(db_path) as connection:
        connection.execute("UPDATE events SET stamp = NULL")
    assert len(await store.read(session.id)) == 1
    assert len(cache_of(store)) == 0


@pytest.mark.parametrize(
    "keys_statement",
    [
        # The rows changed between the two statements: another stamp, or gone.
        "SELECT rowid, 'changed' FROM events WHERE session_id = :session_id ORDER BY seq",
        "SELECT rowid + 1000, stamp FROM events WHERE session_id = :session_id ORDER BY seq",
    ],
)
async def test_rows_seen_in_two_snapshots_are_read_again_in_one(
    store: Store, db_path: Path, keys_statement: str
) -> None:
    session_id = await a_log(store)
    connection = open_connection(SQLiteTarget(str(db_path)), reader=True)
    try:
        whole = sql.events_sql("forward", (False,) * len(sql.EVENT_CONDITIONS))
        parameters = {"session_id": session_id, "limit": -1}
        cache = EventCache()
        events = read_through(connection, cache, keys_statement, whole, parameters)
        assert events == read_events(connection, EventCache(), session_id, EventFilter())
        assert len(events) == 6
        assert len(cache) == 0
    finally:
        connection.close()


def test_the_least_recently_read_events_leave_first() -> None:
    cache = EventCache(capacity=2)
    events = [cast(Event, object()) for _ in range(3)]
    cache.keep([(1, "a", events[0]), (2, "b", events[1])])
    assert cache.take([(1, "a")]) == ([events[0]], [])
    cache.keep([(3, "c", events[2])])
    assert cache.take([(1, "a"), (2, "b"), (3, "c"), (3, "x")]) == (
        [events[0], None, events[2], None],
        [1, 3],
    )
