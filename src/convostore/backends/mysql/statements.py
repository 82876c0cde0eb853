"""MySQL's dialect (`DIALECT`, and `STATEMENTS`: the shared statements in it), and the
statements only MySQL runs, as named constants with bound parameters.

Statements whose WHERE clause depends on the request (event filters) are joined from
fixed fragments only, one string per combination, so the set is bounded. No value is
ever formatted into SQL. Lists of values are bound as one JSON parameter and read with
``JSON_TABLE`` (MariaDB 10.6+, MySQL 8).
"""

from __future__ import annotations

from typing import Final

from convostore._time import to_micros
from convostore.backends.mysql.rows import event_row, new_session_row
from convostore.backends.mysql.schema import VALUE_PREFIX_LENGTH
from convostore.backends.sql.appends import AppendStatements
from convostore.backends.sql.decisions import MAX_INTEGER
from convostore.backends.sql.dialect import Dialect
from convostore.backends.sql.reads import LogReads
from convostore.backends.sql.statements import (
    EVENT_FIELDS,
    SESSION_FIELDS,
    USER_FIELDS,
    Statements,
    columns,
)
from convostore.backends.sql.values import MICROS_READER, json_list
from convostore.backends.sql.writes import KeyStatements, SessionWrites

# What an insert writes beyond the fields read back: the text filter's and the text
# index's forms of the content.
EVENT_INSERT_FIELDS: Final = (*EVENT_FIELDS, "content_folded", "search_tokens")
SESSION_INSERT_FIELDS: Final = (*SESSION_FIELDS, "is_part")

# The listing indexes of `convostore.backends.sql.statements.LISTING_INDEXES` by their
# names here: ``is_part`` (which never changes) stands in for the partial indexes MySQL
# does not have.
_INDEXES: Final = {
    "sessions_top_by_created": "sessions_by_created",
    "sessions_top_kind_by_created": "sessions_kind_by_created",
    "sessions_by_created": "sessions_all_by_created",
    "sessions_top_by_activity": "sessions_by_activity",
    "sessions_top_kind_by_activity": "sessions_kind_by_activity",
    "sessions_by_activity": "sessions_all_by_activity",
}

# READ COMMITTED takes no gap locks, so a write's locking read of the keys would not
# keep a new key out: the key set is guarded by a row every migrated database has, the
# first migration's record, shared by session writes and taken alone by a key change.
SHARE_INDEXED_KEYS: Final = (
    "SELECT version FROM convostore_schema WHERE version = 1 LOCK IN SHARE MODE"
)
LOCK_INDEXED_KEYS: Final = "SELECT version FROM convostore_schema WHERE version = 1 FOR UPDATE"
DIALECT: Final = Dialect(
    name="mysql",
    param=lambda name, sql_type: f"%({name})s",
    time_param=to_micros,
    rows=MICROS_READER,
    # A listing's cost per page must never rest on the planner's guess.
    index_hint=lambda index: f" FORCE INDEX ({_INDEXES[index]})",
    # The index finds the rows by the value's prefix; the whole value decides.
    value_equals=lambda column, marker: (
        f"{column}_prefix = LEFT({marker}, {VALUE_PREFIX_LENGTH}) AND {column} = {marker}"
    ),
    top_level="is_part = 0",
    # Spelled out: MySQL walks an index range for this, not always for (a, b) < (x, y).
    keyset_before=lambda a, b, x, y: f"({a} < {x} OR ({a} = {x} AND {b} < {y}))",
    returning=False,
    strings=json_list,
    no_limit=MAX_INTEGER,
    database_size=(
        "SELECT coalesce(sum(data_length + index_length), 0) FROM information_schema.tables"
        " WHERE table_schema = DATABASE()"
    ),
    share_indexed_keys=SHARE_INDEXED_KEYS,
    lock_indexed_keys=LOCK_INDEXED_KEYS,
    keep_existing=lambda column: f" ON DUPLICATE KEY UPDATE {column} = {column}",
    replace_existing=lambda key, columns: (
        " ON DUPLICATE KEY UPDATE "
        + ", ".join(f"{column} = VALUES({column})" for column in columns)
    ),
    strings_table=lambda marker, alias: (
        f"JSON_TABLE({marker}, '$[*]' COLUMNS (value VARCHAR(255) PATH '$')) AS {alias}"
    ),
    in_strings=lambda column, marker: f"JSON_CONTAINS({marker}, JSON_QUOTE({column}))",
    integers=lambda marker, alias: (
        f"JSON_TABLE({marker}, '$[*]' COLUMNS (value BIGINT PATH '$')) AS {alias}"
    ),
)


class MySQLStatements(Statements):
    """The shared statements, but participants: MySQL keeps no participants table, so
    they are read from the log's ``events_by_author`` index."""

    def __init__(self, dialect: Dialect) -> None:
        super().__init__(dialect)
        # session_id. Everyone who wrote in a session, in order of their first message.
        self.participants = (
            f"SELECT {columns(USER_FIELDS, 'u.')} FROM (SELECT author_id, min(seq) AS first_seq"
            " FROM events WHERE session_id = %(session_id)s AND author_id IS NOT NULL"
            " GROUP BY author_id) p JOIN users u ON u.id = p.author_id ORDER BY p.first_seq"
        )


STATEMENTS: Final = MySQLStatements(DIALECT)

EVENT_COLUMNS: Final = columns(EVENT_FIELDS)


def _placeholders(fields: tuple[str, ...]) -> str:
    return ", ".join("%s" for _ in fields)


# ---------------------------------------------------------------------------- sessions

INSERT_SESSION: Final = (
    f"INSERT INTO sessions ({columns(SESSION_INSERT_FIELDS)}) "
    f"VALUES ({_placeholders(SESSION_INSERT_FIELDS)})"
)
# The sessions past their expiry, each deleted with a check of its expiry again, so one
# extended in between survives. A part of an expired parent goes with its parent.
EXPIRED_SESSIONS: Final = (
    "SELECT s.id FROM sessions s WHERE s.expires_at < %s AND NOT EXISTS (SELECT 1 FROM "
    "sessions parent WHERE parent.id = s.part_of AND parent.expires_at < %s) ORDER BY s.id"
)
DELETE_IF_EXPIRED: Final = "DELETE FROM sessions WHERE id = %s AND expires_at < %s"
# A key's entry another store backfilled meanwhile is left as it is.
INSERT_METADATA_ENTRY: Final = (
    "INSERT INTO session_metadata (session_id, name, value_prefix, value)"
    " VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE value_prefix = value_prefix"
)
KEY_STATEMENTS: Final = KeyStatements(
    sessions_with_key=(
        "SELECT id, metadata FROM sessions WHERE JSON_CONTAINS_PATH(metadata, 'one', %(path)s)"
    ),
    insert_entry=INSERT_METADATA_ENTRY,
    entry=lambda name, value, session_id: (
        session_id,
        name,
        value[:VALUE_PREFIX_LENGTH],
        value,
    ),
)

# ---------------------------------------------------------------------------- the log

LOCK_SESSION: Final = "SELECT version, last_seq FROM sessions WHERE id = %s FOR UPDATE"
ADVANCE_SESSION: Final = (
    "UPDATE sessions SET version = version + 1, last_seq = last_seq + %s, stamp = %s, "
    "last_activity_at = GREATEST(last_activity_at, coalesce(%s, last_activity_at)), "
    "message_count = message_count + %s, started_by = coalesce(started_by, %s) "
    "WHERE id = %s"
)
INSERT_EVENTS: Final = f"INSERT INTO events ({columns(EVENT_INSERT_FIELDS)}) VALUES "
EVENT_ROW: Final = f"({_placeholders(EVENT_INSERT_FIELDS)})"
# The append (`convostore.backends.sql.appends`): under the session's row lock, the
# version check and the new ``seq`` values cannot race another append.
APPENDS: Final = AppendStatements(
    lock_session=LOCK_SESSION,
    advance=ADVANCE_SESSION,
    insert_events=lambda count: INSERT_EVENTS + ", ".join([EVENT_ROW] * count),
    event_row=event_row,
    events_with_ids=(
        f"SELECT {columns(EVENT_FIELDS, 'e.')} FROM "
        + DIALECT.strings_table("%(ids)s", "wanted")
        + " JOIN events e ON e.id = wanted.value"
    ),
)
# The reads of the log select each row's ``row_id`` first, the key of the store's
# `convostore.backends.sql.event_cache.EventCache`. The text filter is literal and
# case-insensitive as Python's `needle.lower() in content.lower()`: the folded content
# is written by convostore, and LOCATE in a binary collation has no wildcards and
# compares code points.
READS: Final = LogReads(
    DIALECT,
    " AND LOCATE(%(text)s, content_folded) > 0",
    key="row_id",
    turn_start=" AND turn_start = 1",
    fold_text=True,
)


# The session writes (`convostore.backends.sql.writes`).
WRITES: Final = SessionWrites(STATEMENTS, INSERT_SESSION, new_session_row, KEY_STATEMENTS)
