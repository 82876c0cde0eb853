"""Every statement the MySQL store runs, as named constants with bound parameters.

Statements whose WHERE clause depends on the request (listings, counts, event filters,
search scopes) are joined from fixed fragments only, one string per combination, so the
set is bounded. No value is ever formatted into SQL. Lists of values are bound as one
JSON parameter and read with ``JSON_TABLE`` (MariaDB 10.6+, MySQL 8).
"""

from __future__ import annotations

import functools
from typing import Final, Literal

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
# What an insert writes beyond the fields read back: the text filter's and the text
# index's forms of the content.
EVENT_INSERT_FIELDS: Final = (*EVENT_FIELDS, "content_folded", "search_tokens")
SESSION_INSERT_FIELDS: Final = (*SESSION_FIELDS, "is_part")
# fmt: on


def _columns(fields: tuple[str, ...], alias: str = "") -> str:
    return ", ".join(alias + name for name in fields)


def _placeholders(fields: tuple[str, ...]) -> str:
    return ", ".join("%s" for _ in fields)


USER_COLUMNS: Final = _columns(USER_FIELDS)
SESSION_COLUMNS: Final = _columns(SESSION_FIELDS)
EVENT_COLUMNS: Final = _columns(EVENT_FIELDS)
# A JSON list of strings as rows of one column ``value``.
_STRINGS = "JSON_TABLE({}, '$[*]' COLUMNS (value VARCHAR(255) PATH '$')) AS {}"
# A summary row: the session's columns, its message count, its owner's columns, then the
# columns of the author of its first message (users o and b joined to sessions s).
_SUMMARY_COLUMNS = (
    f"{_columns(SESSION_FIELDS, 's.')}, s.message_count, "
    f"{_columns(USER_FIELDS, 'o.')}, {_columns(USER_FIELDS, 'b.')}"
)
_SUMMARY_JOINS = " LEFT JOIN users o ON o.id = s.owner_id LEFT JOIN users b ON b.id = s.started_by"

# ---------------------------------------------------------------------------- users

SELECT_USER: Final = f"SELECT {USER_COLUMNS} FROM users WHERE id = %s"
UPSERT_USER: Final = (
    f"INSERT INTO users ({USER_COLUMNS}) VALUES ({_placeholders(USER_FIELDS)}) "
    "ON DUPLICATE KEY UPDATE display_name = VALUES(display_name), "
    "username = VALUES(username), email = VALUES(email), kind = VALUES(kind), "
    "metadata = VALUES(metadata)"
)
# A stored user is never overwritten: the duplicate's "update" changes nothing.
INSERT_USER_IF_ABSENT: Final = (
    f"INSERT INTO users ({USER_COLUMNS}) VALUES ({_placeholders(USER_FIELDS)}) "
    "ON DUPLICATE KEY UPDATE id = id"
)
# The ids of a JSON list that name no stored user.
MISSING_USERS: Final = (
    "SELECT wanted.value FROM "
    + _STRINGS.format("%s", "wanted")
    + " WHERE NOT EXISTS (SELECT 1 FROM users u WHERE u.id = wanted.value)"
)

# ---------------------------------------------------------------------------- sessions

SELECT_SESSION: Final = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = %s"
SESSION_EXISTS: Final = "SELECT 1 FROM sessions WHERE id = %s"
SESSION_VERSION: Final = "SELECT version FROM sessions WHERE id = %s"
SELECT_PARENT: Final = "SELECT owner_id, part_of FROM sessions WHERE id = %s"
LOCK_PARENT: Final = "SELECT owner_id, part_of FROM sessions WHERE id = %s FOR UPDATE"
INSERT_SESSION: Final = (
    f"INSERT INTO sessions ({_columns(SESSION_INSERT_FIELDS)}) "
    f"VALUES ({_placeholders(SESSION_INSERT_FIELDS)})"
)
UPDATE_SESSION: Final = (
    "UPDATE sessions SET title = %s, metadata = %s, expires_at = %s, stamp = %s "
    "WHERE id = %s AND stamp = %s"
)
SET_TITLE: Final = "UPDATE sessions SET title = %s, stamp = %s WHERE id = %s"
DELETE_SESSION: Final = "DELETE FROM sessions WHERE id = %s"
# The sessions past their expiry, each deleted with a check of its expiry again, so one
# extended in between survives. A part of an expired parent goes with its parent.
EXPIRED_SESSIONS: Final = (
    "SELECT s.id FROM sessions s WHERE s.expires_at < %s AND NOT EXISTS (SELECT 1 FROM "
    "sessions parent WHERE parent.id = s.part_of AND parent.expires_at < %s) ORDER BY s.id"
)
DELETE_IF_EXPIRED: Final = "DELETE FROM sessions WHERE id = %s AND expires_at < %s"
INSERT_METADATA_ENTRY: Final = (
    "INSERT INTO session_metadata (session_id, name, value_prefix, value) VALUES (%s, %s, %s, %s)"
)
DELETE_METADATA_ENTRIES: Final = "DELETE FROM session_metadata WHERE session_id = %s"
# The index finds the rows by the value's prefix; the whole value decides.
SESSIONS_BY_METADATA: Final = (
    f"SELECT {_columns(SESSION_FIELDS, 's.')} FROM session_metadata m "
    "JOIN sessions s ON s.id = m.session_id "
    "WHERE m.name = %s AND m.value_prefix = %s AND m.value = %s ORDER BY m.session_id"
)
FIND_PART: Final = (
    f"SELECT {SESSION_COLUMNS} FROM sessions "
    "WHERE part_of = %s AND held_with = %s ORDER BY id LIMIT 1"
)
LIST_PARTS: Final = (
    f"SELECT {_SUMMARY_COLUMNS} FROM sessions s{_SUMMARY_JOINS} WHERE s.part_of = %s ORDER BY s.id"
)
# Everyone who wrote in a session, in order of their first message.
PARTICIPANTS: Final = (
    f"SELECT {_columns(USER_FIELDS, 'u.')} FROM (SELECT author_id, min(seq) AS first_seq "
    "FROM events WHERE session_id = %s AND author_id IS NOT NULL GROUP BY author_id) p "
    "JOIN users u ON u.id = p.author_id ORDER BY p.first_seq"
)

# ---------------------------------------------------------------------------- the log

LOCK_SESSION: Final = "SELECT version, last_seq FROM sessions WHERE id = %s FOR UPDATE"
ADVANCE_SESSION: Final = (
    "UPDATE sessions SET version = version + 1, last_seq = %s, stamp = %s, "
    "last_activity_at = GREATEST(last_activity_at, coalesce(%s, last_activity_at)), "
    "message_count = message_count + %s, started_by = coalesce(started_by, %s) "
    "WHERE id = %s"
)
INSERT_EVENTS: Final = f"INSERT INTO events ({_columns(EVENT_INSERT_FIELDS)}) VALUES "
EVENT_ROW: Final = f"({_placeholders(EVENT_INSERT_FIELDS)})"
EVENTS_WITH_IDS: Final = (
    f"SELECT {_columns(EVENT_FIELDS, 'e.')} FROM "
    + _STRINGS.format("%s", "wanted")
    + " JOIN events e ON e.id = wanted.value"
)
SET_NARRATION: Final = (
    "UPDATE events SET narration = %s, stamp = %s "
    "WHERE id = %s AND session_id = %s AND type = 'MESSAGE'"
)
NEWEST_COMPACTION: Final = (
    f"SELECT {EVENT_COLUMNS} FROM events "
    "WHERE session_id = %s AND type = 'COMPACTION' ORDER BY seq DESC LIMIT 1"
)
EVENTS_AFTER: Final = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = %s AND seq > %s ORDER BY seq"
)
KEPT_EVENTS: Final = (
    f"SELECT {_columns(EVENT_FIELDS, 'e.')} FROM "
    + _STRINGS.format("%s", "kept")
    + " JOIN events e ON e.id = kept.value WHERE e.session_id = %s AND e.seq < %s"
)

# ---------------------------------------------------------------------------- assembled

# The index each listing walks, by (order, include_parts, filtered by kind), named in
# the statement so a page's cost never rests on the planner's guess.
_LISTING_INDEXES = {
    (SessionOrder.CREATED, False, False): "sessions_by_created",
    (SessionOrder.CREATED, False, True): "sessions_kind_by_created",
    (SessionOrder.CREATED, True, False): "sessions_all_by_created",
    (SessionOrder.CREATED, True, True): "sessions_all_by_created",
    (SessionOrder.LAST_ACTIVITY, False, False): "sessions_by_activity",
    (SessionOrder.LAST_ACTIVITY, False, True): "sessions_kind_by_activity",
    (SessionOrder.LAST_ACTIVITY, True, False): "sessions_all_by_activity",
    (SessionOrder.LAST_ACTIVITY, True, True): "sessions_all_by_activity",
}
# Row comparisons are spelled out: MySQL walks an index range for these, not always
# for (a, b) < (x, y).
_LISTING_AFTER = {
    SessionOrder.CREATED: " AND s.id < %(after_id)s",
    SessionOrder.LAST_ACTIVITY: (
        " AND (s.last_activity_at < %(after_at)s"
        " OR (s.last_activity_at = %(after_at)s AND s.id < %(after_id)s))"
    ),
}
_LISTING_ORDER = {
    SessionOrder.CREATED: " ORDER BY s.id DESC LIMIT %(limit)s",
    SessionOrder.LAST_ACTIVITY: " ORDER BY s.last_activity_at DESC, s.id DESC LIMIT %(limit)s",
}


@functools.cache
def listing_sql(
    summaries: bool, order: SessionOrder, include_parts: bool, by_kind: bool, paged: bool
) -> str:
    """A page of an owner's sessions (or summaries), strictly after a keyset when
    ``paged``. Parameters: owner_id, kind, after_id, after_at, limit."""
    columns = _SUMMARY_COLUMNS if summaries else _columns(SESSION_FIELDS, "s.")
    index = _LISTING_INDEXES[order, include_parts, by_kind]
    sql = f"SELECT {columns} FROM sessions s FORCE INDEX ({index})"
    if summaries:
        sql += _SUMMARY_JOINS
    sql += " WHERE s.owner_id = %(owner_id)s"
    if not include_parts:
        sql += " AND s.is_part = 0"
    if by_kind:
        sql += " AND s.kind = %(kind)s"
    if paged:
        sql += _LISTING_AFTER[order]
    return sql + _LISTING_ORDER[order]


@functools.cache
def count_sql(include_parts: bool, by_kind: bool) -> str:
    """How many sessions a listing holds. Parameters: owner_id, kind."""
    sql = "SELECT count(*) FROM sessions s WHERE s.owner_id = %(owner_id)s"
    if not include_parts:
        sql += " AND s.is_part = 0"
    if by_kind:
        sql += " AND s.kind = %(kind)s"
    return sql


# The EventFilter conditions, in the order their fragments are joined: (the filter's
# attribute, its fragment). Lists are passed as one JSON parameter.
EVENT_CONDITIONS: Final = (
    ("types", " AND JSON_CONTAINS(%(types)s, JSON_QUOTE(type))"),
    ("roles", " AND role IS NOT NULL AND JSON_CONTAINS(%(roles)s, JSON_QUOTE(role))"),
    ("exclude_synthetic", " AND synthetic = 0"),
    (
        "branch",
        " AND (branch IS NULL OR JSON_CONTAINS(%(lineage)s, JSON_QUOTE(branch)))",
    ),
    ("since", " AND created_at >= %(since)s"),
    ("until", " AND created_at <= %(until)s"),
    # Literal and case-insensitive as Python's `needle.lower() in content.lower()`: the
    # folded content is written by convostore, and LOCATE in a binary collation has no
    # wildcards and compares code points.
    ("text", " AND LOCATE(%(text)s, content_folded) > 0"),
    ("after_seq", " AND seq > %(after_seq)s"),
)
_EVENTS_FROM = f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = %(session_id)s"
EventShape = Literal["forward", "newest", "turn_start", "between"]
# shape -> (what precedes the conditions, what follows them)
_EVENT_SHAPES: dict[EventShape, tuple[str, str]] = {
    # The first matches in log order.
    "forward": (_EVENTS_FROM, " ORDER BY seq LIMIT %(limit)s"),
    # The newest matches, newest first.
    "newest": (_EVENTS_FROM, " ORDER BY seq DESC LIMIT %(last)s"),
    # The position of the nearest matching turn start before another position.
    "turn_start": (
        "SELECT seq FROM events WHERE session_id = %(session_id)s AND turn_start = 1"
        " AND seq < %(before)s",
        " ORDER BY seq DESC LIMIT 1",
    ),
    # The matches from one position up to another.
    "between": (
        _EVENTS_FROM + " AND seq >= %(from_seq)s AND seq < %(before)s",
        " ORDER BY seq",
    ),
}


@functools.cache
def events_sql(shape: EventShape, conditions: tuple[bool, ...]) -> str:
    """The read of one shape with the conditions flagged in ``conditions`` (one flag per
    `EVENT_CONDITIONS` entry). Parameters: session_id, the conditions' names (lineage for
    branch), and limit, last, before, from_seq as the shape needs."""
    head, tail = _EVENT_SHAPES[shape]
    fragments = [
        fragment for (_, fragment), used in zip(EVENT_CONDITIONS, conditions, strict=True) if used
    ]
    return head + "".join(fragments) + tail
