"""Every statement the store runs, as named constants with bound parameters.

Column lists are joined from the constant names below once, at import. Statements whose
WHERE clause depends on the request (listings, counts, event filters) are joined from
fixed fragments only, one string per combination, so the set of statements is bounded
and each is prepared once per connection. No value is ever formatted into SQL.
"""

from __future__ import annotations

import functools
from typing import Final, Literal

from convostore.backends.sqlite.connection import CONTAINS_FUNCTION
from convostore.model import SessionOrder

# fmt: off
USER_FIELDS: Final = ("id", "display_name", "username", "email", "kind", "metadata")
SESSION_FIELDS: Final = (
    "id", "owner_id", "title", "kind", "part_of", "held_with", "created_at",
    "last_activity_at", "expires_at", "metadata", "version", "stamp",
)
EVENT_FIELDS: Final = (
    "session_id", "seq", "id", "type", "created_at", "branch", "metadata", "payload",
    "synthetic", "role", "content", "author_id", "recipient_ids", "in_reply_to",
    "tool_calls", "tool_call_id", "attachments", "data", "assets", "narration",
    "embedding", "embedding_model", "stamp",
)
# fmt: on


def _columns(fields: tuple[str, ...], alias: str = "") -> str:
    return ", ".join(alias + name for name in fields)


def _placeholders(fields: tuple[str, ...]) -> str:
    return ", ".join("?" for _ in fields)


USER_COLUMNS: Final = _columns(USER_FIELDS)
SESSION_COLUMNS: Final = _columns(SESSION_FIELDS)
EVENT_COLUMNS: Final = _columns(EVENT_FIELDS)
# A summary row: the session's columns, its message count, its owner's columns, then the
# columns of the author of its first message (users o and b joined to sessions s).
_SUMMARY_COLUMNS = (
    f"{_columns(SESSION_FIELDS, 's.')}, s.message_count, "
    f"{_columns(USER_FIELDS, 'o.')}, {_columns(USER_FIELDS, 'b.')}"
)
_SUMMARY_JOINS = " LEFT JOIN users o ON o.id = s.owner_id LEFT JOIN users b ON b.id = s.started_by"

# ---------------------------------------------------------------------------- users

SELECT_USER: Final = f"SELECT {USER_COLUMNS} FROM users WHERE id = ?"
UPSERT_USER: Final = (
    f"INSERT INTO users ({USER_COLUMNS}) VALUES ({_placeholders(USER_FIELDS)}) "
    "ON CONFLICT (id) DO UPDATE SET display_name = excluded.display_name, "
    "username = excluded.username, email = excluded.email, kind = excluded.kind, "
    "metadata = excluded.metadata"
)
INSERT_USER_IF_ABSENT: Final = (
    f"INSERT INTO users ({USER_COLUMNS}) VALUES ({_placeholders(USER_FIELDS)}) "
    "ON CONFLICT (id) DO NOTHING"
)
# The ids of a JSON list that name no stored user, in list order.
MISSING_USERS: Final = (
    "SELECT value FROM json_each(?) WHERE value NOT IN (SELECT id FROM users) ORDER BY key"
)

# ---------------------------------------------------------------------------- sessions

SELECT_SESSION: Final = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"
SESSION_EXISTS: Final = "SELECT 1 FROM sessions WHERE id = ?"
SESSION_VERSION: Final = "SELECT version FROM sessions WHERE id = ?"
SELECT_PARENT: Final = "SELECT owner_id, part_of FROM sessions WHERE id = ?"
INSERT_SESSION: Final = (
    f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({_placeholders(SESSION_FIELDS)})"
)
UPDATE_SESSION: Final = (
    "UPDATE sessions SET title = ?1, metadata = ?2, expires_at = ?3, stamp = ?4 "
    f"WHERE id = ?5 AND stamp = ?6 RETURNING {SESSION_COLUMNS}"
)
SET_TITLE: Final = (
    f"UPDATE sessions SET title = ?1, stamp = ?2 WHERE id = ?3 RETURNING {SESSION_COLUMNS}"
)
DELETE_SESSION: Final = "DELETE FROM sessions WHERE id = ?"
# A part of an expired parent goes with its parent by cascade, so only sessions
# deleted directly are counted.
DELETE_EXPIRED: Final = (
    "DELETE FROM sessions WHERE expires_at < ?1 AND NOT EXISTS (SELECT 1 FROM sessions "
    "parent WHERE parent.id = sessions.part_of AND parent.expires_at < ?1)"
)
INSERT_METADATA_ENTRY: Final = (
    "INSERT INTO session_metadata (name, value, session_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
)
DELETE_METADATA_ENTRIES: Final = "DELETE FROM session_metadata WHERE session_id = ?"
SESSIONS_BY_METADATA: Final = (
    f"SELECT {_columns(SESSION_FIELDS, 's.')} FROM session_metadata m "
    "JOIN sessions s ON s.id = m.session_id "
    "WHERE m.name = ? AND m.value = ? ORDER BY m.session_id"
)
FIND_PART: Final = (
    f"SELECT {SESSION_COLUMNS} FROM sessions "
    "WHERE part_of = ? AND held_with = ? ORDER BY id LIMIT 1"
)
LIST_PARTS: Final = (
    f"SELECT {_SUMMARY_COLUMNS} FROM sessions s{_SUMMARY_JOINS} WHERE s.part_of = ? ORDER BY s.id"
)
PARTICIPANTS: Final = (
    f"SELECT {_columns(USER_FIELDS, 'u.')} FROM participants p "
    "JOIN users u ON u.id = p.user_id WHERE p.session_id = ? ORDER BY p.first_seq"
)

# ---------------------------------------------------------------------------- the log

# One statement moves the session on, returns where the new events go, and counts the
# required user ids (a JSON list, or NULL) that name no stored user. A batch's version
# check is in the WHERE clause, so no row back means "no such session" or "another
# version", which only that rare path tells apart.
ADVANCE_SESSION: Final = (
    "UPDATE sessions SET version = version + 1, last_seq = last_seq + ?1, stamp = ?2, "
    "last_activity_at = CASE WHEN ?3 > last_activity_at THEN ?3 ELSE last_activity_at END, "
    "message_count = message_count + ?4, started_by = coalesce(started_by, ?5) "
    "WHERE id = ?6 AND (?7 IS NULL OR version = ?7) "
    "RETURNING last_seq, "
    "(SELECT count(*) FROM json_each(?8) WHERE value NOT IN (SELECT id FROM users))"
)
INSERT_EVENT: Final = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES ({_placeholders(EVENT_FIELDS)})"
EVENTS_WITH_IDS: Final = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE id IN (SELECT value FROM json_each(?))"
)
SET_NARRATION: Final = (
    "UPDATE events SET narration = ?1, stamp = ?2 "
    "WHERE id = ?3 AND session_id = ?4 AND type = 'MESSAGE'"
)
NEWEST_COMPACTION: Final = (
    f"SELECT {EVENT_COLUMNS} FROM events "
    "WHERE session_id = ? AND type = 'COMPACTION' ORDER BY seq DESC LIMIT 1"
)
EVENTS_AFTER: Final = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ? AND seq > ? ORDER BY seq"
)
# CROSS JOIN keeps the id list the outer loop: each kept event is one lookup by id,
# however long the log before the boundary is.
KEPT_EVENTS: Final = (
    f"SELECT {_columns(EVENT_FIELDS, 'e.')} FROM json_each(?1) kept "
    "CROSS JOIN events e ON e.id = kept.value WHERE e.session_id = ?2 AND e.seq < ?3"
)

# ---------------------------------------------------------------------------- assembled

# The index each listing walks, by (order, include_parts, filtered by kind). Named in
# the statement: without statistics the planner may take the wider index and filter
# rows out one by one, and a listing's cost per page must not depend on that guess. A
# listing of parts too, by kind, walks the owner's whole index and filters kind per row.
_LISTING_INDEXES = {
    (SessionOrder.CREATED, False, False): "sessions_top_by_created",
    (SessionOrder.CREATED, False, True): "sessions_top_kind_by_created",
    (SessionOrder.CREATED, True, False): "sessions_by_created",
    (SessionOrder.CREATED, True, True): "sessions_by_created",
    (SessionOrder.LAST_ACTIVITY, False, False): "sessions_top_by_activity",
    (SessionOrder.LAST_ACTIVITY, False, True): "sessions_top_kind_by_activity",
    (SessionOrder.LAST_ACTIVITY, True, False): "sessions_by_activity",
    (SessionOrder.LAST_ACTIVITY, True, True): "sessions_by_activity",
}
_LISTING_AFTER = {
    SessionOrder.CREATED: " AND s.id < :after_id",
    SessionOrder.LAST_ACTIVITY: " AND (s.last_activity_at, s.id) < (:after_at, :after_id)",
}
_LISTING_ORDER = {
    SessionOrder.CREATED: " ORDER BY s.id DESC LIMIT :limit",
    SessionOrder.LAST_ACTIVITY: " ORDER BY s.last_activity_at DESC, s.id DESC LIMIT :limit",
}


@functools.cache
def listing_sql(
    summaries: bool, order: SessionOrder, include_parts: bool, by_kind: bool, paged: bool
) -> str:
    """A page of an owner's sessions (or summaries), strictly after a keyset when
    ``paged``. Parameters: owner_id, kind, after_id, after_at, limit."""
    columns = _SUMMARY_COLUMNS if summaries else _columns(SESSION_FIELDS, "s.")
    index = _LISTING_INDEXES[order, include_parts, by_kind]
    sql = f"SELECT {columns} FROM sessions s INDEXED BY {index}"
    if summaries:
        sql += _SUMMARY_JOINS
    sql += " WHERE s.owner_id = :owner_id"
    if not include_parts:
        sql += " AND s.part_of IS NULL"
    if by_kind:
        sql += " AND s.kind = :kind"
    if paged:
        sql += _LISTING_AFTER[order]
    return sql + _LISTING_ORDER[order]


@functools.cache
def count_sql(include_parts: bool, by_kind: bool) -> str:
    """How many sessions a listing holds, from the counts the triggers keep.
    Parameters: owner_id, kind."""
    sql = "SELECT coalesce(sum(sessions), 0) FROM owner_session_counts WHERE owner_id = :owner_id"
    if not include_parts:
        sql += " AND is_part = 0"
    if by_kind:
        sql += " AND kind = :kind"
    return sql


# The EventFilter conditions, in the order their fragments are joined: (the filter's
# attribute, its fragment). Lists are passed as one JSON parameter.
EVENT_CONDITIONS: Final = (
    ("types", " AND type IN (SELECT value FROM json_each(:types))"),
    ("roles", " AND role IN (SELECT value FROM json_each(:roles))"),
    ("exclude_synthetic", " AND synthetic = 0"),
    ("branch", " AND (branch IS NULL OR branch IN (SELECT value FROM json_each(:lineage)))"),
    ("since", " AND created_at >= :since"),
    ("until", " AND created_at <= :until"),
    ("text", f" AND {CONTAINS_FUNCTION}(content, :text)"),
    ("after_seq", " AND seq > :after_seq"),
)
_EVENTS_FROM = f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = :session_id"
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
    f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = :session_id AND seq >= (SELECT "
)
_WINDOW_TURN_START = (
    "CASE WHEN bound.found < :last THEN bound.low ELSE coalesce(("
    "SELECT seq FROM events WHERE session_id = :session_id AND seq <= bound.low" + _IS_TURN_START
)


@functools.cache
def events_sql(shape: EventShape, conditions: tuple[bool, ...]) -> str:
    """The read of one shape with the conditions flagged in ``conditions`` (one flag per
    `EVENT_CONDITIONS` entry), in log order. Parameters: session_id, the conditions'
    names (lineage for branch), and limit (``forward``: the first matches; -1 for all) or
    last (``window``: the newest matches widened back to a turn start; ``window_whole``:
    not widened, for filters no turn start can pass)."""
    fragments = "".join(
        fragment for (_, fragment), used in zip(EVENT_CONDITIONS, conditions, strict=True) if used
    )
    if shape == "forward":
        return _EVENTS_FROM + fragments + " ORDER BY seq LIMIT :limit"
    start = (
        _WINDOW_TURN_START + fragments + " ORDER BY seq DESC LIMIT 1), bound.low) END"
        if shape == "window"
        else "bound.low"
    )
    bound = _WINDOW_BOUND + start + " FROM bound)"
    return _WINDOW_HEAD + fragments + bound + fragments + " ORDER BY seq"
