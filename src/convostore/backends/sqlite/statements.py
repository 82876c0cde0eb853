"""SQLite's dialect (`DIALECT`, and `STATEMENTS`: the shared statements in it), and the
statements only SQLite runs, as named constants with bound parameters.

Statements whose WHERE clause depends on the request (event filters) are joined from
fixed fragments only, one string per combination, so the set of statements is bounded
and each is prepared once per connection. No value is ever formatted into SQL.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Final, Literal

from convostore._time import to_micros
from convostore.backends.sql.dialect import Dialect
from convostore.backends.sql.reads import LogReads
from convostore.backends.sql.statements import (
    EVENT_FIELDS,
    SESSION_FIELDS,
    Statements,
    columns,
)
from convostore.backends.sql.values import json_list, session_values
from convostore.backends.sql.writes import KeyStatements, SessionWrites
from convostore.backends.sqlite.connection import CONTAINS_FUNCTION
from convostore.backends.sqlite.rows import READER


def _count_sessions(include_parts: bool, by_kind: bool) -> str:
    """How many sessions a listing holds, from the counts the triggers keep.
    Parameters: owner_id, kind."""
    sql = "SELECT coalesce(sum(sessions), 0) FROM owner_session_counts WHERE owner_id = :owner_id"
    if not include_parts:
        sql += " AND is_part = 0"
    if by_kind:
        sql += " AND kind = :kind"
    return sql


# The indexes schema version 6 dropped (an append wrote each), and the one a listing
# walks instead, skipping the rows its filter refuses.
_WALKED_INSTEAD: Final = {
    "sessions_top_by_activity": "sessions_by_activity",
    "sessions_top_kind_by_activity": "sessions_by_activity",
}

DIALECT: Final = Dialect(
    name="sqlite",
    param=lambda name, sql_type: ":" + name,
    time_param=to_micros,
    rows=READER,
    # Without statistics the planner may take the wider index and filter rows out one
    # by one: a listing names the index it walks.
    index_hint=lambda index: " INDEXED BY " + _WALKED_INSTEAD.get(index, index),
    count_sessions=_count_sessions,
    database_size="SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
    strings=json_list,
    no_limit=-1,
    strings_table=lambda marker, alias: f"json_each({marker}) {alias}",
    marker="?",
    # One write runs at a time: a row read in a write needs no lock of its own.
    for_update="",
)
STATEMENTS: Final = Statements(DIALECT)

EVENT_COLUMNS: Final = columns(EVENT_FIELDS)

# ---------------------------------------------------------------------------- sessions

SESSION_EXISTS: Final = "SELECT 1 FROM sessions WHERE id = ?"
INSERT_SESSION: Final = DIALECT.insert("sessions", SESSION_FIELDS)
# A write's candidate entry, kept only if the database indexes its key now (the write
# transaction holds the database's one write lock: no key add or drop interleaves).
INSERT_METADATA_ENTRY: Final = (
    "INSERT INTO session_metadata (name, value, session_id)"
    " SELECT name, ?2, ?3 FROM indexed_metadata_keys WHERE name = ?1 ON CONFLICT DO NOTHING"
)
# The session writes (`convostore.backends.sql.writes`).
WRITES: Final = SessionWrites(
    STATEMENTS,
    INSERT_SESSION,
    session_values,
    KeyStatements(
        sessions_with_key=(
            "SELECT id, metadata FROM sessions WHERE json_type(metadata, :path) IS NOT NULL"
        ),
        insert_entry=INSERT_METADATA_ENTRY,
        entry=lambda name, value, session_id: (name, value, session_id),
    ),
)

# ---------------------------------------------------------------------------- the log


def _advance_session(value: Callable[[int], str], source: str, returning: str) -> str:
    """The UPDATE that moves a session on for an append. ``value(n)`` is the SQL of the
    append's n-th value (1 events, 2 stamp, 3 activity_at, 4 messages, 5 started_by,
    6 session_id, 7 expected_version), read from ``source``."""
    events, stamp, activity, messages, started_by, session_id, expected = map(value, range(1, 8))
    return (
        f"UPDATE sessions SET version = version + 1, last_seq = last_seq + {events}, "
        f"stamp = {stamp}, last_activity_at = CASE WHEN {activity} > last_activity_at "
        f"THEN {activity} ELSE last_activity_at END, "
        f"message_count = message_count + {messages}, "
        f"started_by = coalesce(started_by, {started_by}){source} "
        f"WHERE sessions.id = {session_id} AND ({expected} IS NULL OR version = {expected}) "
        f"RETURNING {returning}"
    )


# One statement moves the session on, returns where the new events go, and counts the
# required user ids (a JSON list, or NULL) that name no stored user. A batch's version
# check is in the WHERE clause, so no row back means "no such session" or "another
# version", which only that rare path tells apart.
ADVANCE_SESSION: Final = _advance_session(
    lambda n: f"?{n}",
    "",
    "last_seq, (SELECT count(*) FROM json_each(?8) WHERE value NOT IN (SELECT id FROM users))",
)
INSERT_EVENT: Final = DIALECT.insert("events", EVENT_FIELDS)


@functools.lru_cache(maxsize=128)
def advance_sessions(count: int) -> str:
    """`ADVANCE_SESSION` for ``count`` sessions at once, each named once, with the same
    seven values per session. Returns the id and the new last_seq of each session moved
    on; a session missing, or not at its expected version, is left out."""
    rows = ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * count)
    return _advance_session(
        lambda n: f"v.column{n}", f" FROM (VALUES {rows}) AS v", "sessions.id, sessions.last_seq"
    )


# Whether a JSON list of user ids names one that is not stored.
UNKNOWN_USERS: Final = (
    "SELECT value FROM json_each(?) WHERE value NOT IN (SELECT id FROM users) LIMIT 1"
)
EVENTS_WITH_IDS: Final = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE id IN (SELECT value FROM json_each(?))"
)
# ---------------------------------------------------------------------------- assembled

# The reads of the log (`convostore.backends.sql.reads`): its conditions and the active
# view. CROSS JOIN keeps the id list of the view's kept events the outer loop: each is
# one lookup by id, however long the log before the boundary is.
READS: Final = LogReads(
    DIALECT, f" AND {CONTAINS_FUNCTION}(content, :text)", kept_join="CROSS JOIN"
)
EVENT_CONDITIONS: Final = READS.conditions
_EVENTS_FROM = " FROM events WHERE session_id = :session_id"
# What a read selects: every column, or the keys of `event_cache` (rowid and stamp).
_SELECTED = {False: f"SELECT {EVENT_COLUMNS}", True: "SELECT rowid, stamp"}
# Written out as in the partial index events_turn_starts, so the planner can use it.
_IS_TURN_START = " AND type = 'MESSAGE' AND role = 'user' AND branch IS NULL AND synthetic = 0"
EventShape = Literal["forward", "window", "window_whole"]
# The newest :last matches are found first (newest), then read in log order from where
# they start or, for `window`, from the nearest matching turn start at or before that;
# where fewer than :last match, the window holds every match already. One statement:
# one snapshot with no transaction around it.
_WINDOW_HEAD = "WITH newest AS (SELECT seq FROM events WHERE session_id = :session_id"
_WINDOW_BOUND = (
    " ORDER BY seq DESC LIMIT :last), "
    "bound AS (SELECT min(seq) AS low, count(*) AS found FROM newest) "
)
_WINDOW_FROM = " FROM events WHERE session_id = :session_id AND seq >= (SELECT "
_WINDOW_TURN_START = (
    "CASE WHEN bound.found < :last THEN bound.low ELSE coalesce(("
    "SELECT seq FROM events WHERE session_id = :session_id AND seq <= bound.low" + _IS_TURN_START
)


@functools.cache
def events_sql(shape: EventShape, conditions: tuple[bool, ...], keys: bool = False) -> str:
    """The read of one shape with the conditions flagged in ``conditions`` (one flag per
    `EVENT_CONDITIONS` entry), in log order. Parameters: session_id, the conditions'
    names (lineage for branch), and limit (``forward``: the first matches; -1 for all) or
    last (``window``: the newest matches widened back to a turn start; ``window_whole``:
    not widened, for filters no turn start can pass). With ``keys`` it selects the rowid
    and stamp of each event, not its columns."""
    fragments = READS.where(conditions)
    if shape == "forward":
        return _SELECTED[keys] + _EVENTS_FROM + fragments + " ORDER BY seq LIMIT :limit"
    start = (
        _WINDOW_TURN_START + fragments + " ORDER BY seq DESC LIMIT 1), bound.low) END"
        if shape == "window"
        else "bound.low"
    )
    bound = _WINDOW_BOUND + _SELECTED[keys] + _WINDOW_FROM + start + " FROM bound)"
    return _WINDOW_HEAD + fragments + bound + fragments + " ORDER BY seq"
