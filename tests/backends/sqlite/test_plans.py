"""SQLite's query plans on a long log (every statement walks an index), and the filters
computed in SQL against the reference filter in Python."""

from __future__ import annotations

import itertools
import random
import sqlite3
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_args

import pytest

import convostore
from convostore import (
    COMPACTION,
    EventFilter,
    EventWrite,
    MessageWrite,
    PageRequest,
    Role,
    SessionFilter,
    SessionOrder,
    Store,
    ToolCall,
)
from convostore.backends.sqlite import SQLiteTarget
from convostore.backends.sqlite import backend as sqlite_backend_module
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.connection import open_connection
from convostore.backends.sqlite.schema import prepare_database
from convostore.filters import active_view, apply_filter
from tests.backends.sqlite.support import (
    ADA,
    BOT,
    db_url,
)

# ------------------------------------------------------------------ query plans

LONG_LOG = 3000


@pytest.fixture
async def traced_store(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Store, list[str]]]:
    """A store whose connections record every statement they run."""
    statements: list[str] = []

    def tracing(target: SQLiteTarget, *, reader: bool, shared: bool = False) -> sqlite3.Connection:
        connection = open_connection(target, reader=reader, shared=shared)
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
