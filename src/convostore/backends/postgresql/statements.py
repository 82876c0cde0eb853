"""PostgreSQL's dialect (`DIALECT`, and `STATEMENTS`: the shared statements in it), and
the statements only PostgreSQL runs, as named constants with bound parameters.

Table names are unqualified: each connection's search_path names the store's schema
(see `connection.configure_connection`). Column lists are joined from the constant names
below once, at import. Statements whose WHERE clause depends on the request (listings,
counts, event filters) are joined from fixed fragments only, one string per combination,
so the set of statements is bounded and each is prepared once per connection. No value
is ever formatted into SQL; the one identifier that varies (the collation the text
filter folds case with, chosen from a fixed list at connect) is quoted by psycopg.

Each write is one statement where it can be: data-modifying CTEs let one statement check,
move the session on and insert, atomically and in one round trip. Lists travel as
arrays and are unnested; JSON as text cast to ``json``.
"""

from __future__ import annotations

import functools
from typing import Final, Literal

from psycopg import sql

from convostore.backends.postgresql.rows import READER
from convostore.backends.sql.dialect import Dialect
from convostore.backends.sql.reads import IS_TURN_START, event_conditions
from convostore.backends.sql.statements import (
    EVENT_FIELDS,
    SESSION_FIELDS,
    USER_FIELDS,
    Statements,
    columns,
)

# fmt: off
# An appended event's columns after (session_id, seq), each with the type it has in the
# JSON document of an append (`rows.events_json`) and how it is cast to the column's type.
APPENDED_FIELDS: Final = (
    ("id", "text", ""), ("type", "text", ""), ("created_at", "timestamptz", ""),
    ("branch", "text", ""), ("metadata", "text", "::json"), ("payload", "text", "::json"),
    ("synthetic", "boolean", ""), ("role", "text", ""), ("content", "text", ""),
    ("author_id", "text", ""), ("recipient_ids", "text", "::json"),
    ("in_reply_to", "text", ""), ("tool_calls", "text", "::json"),
    ("tool_call_id", "text", ""), ("attachments", "text", "::json"),
    ("data", "text", "::json"), ("assets", "text", "::json"), ("narration", "text", ""),
    ("embedding", "text", "::real[]"), ("embedding_model", "text", ""),
    ("stamp", "text", ""), ("search_terms", "text", "::tsvector"),
    ("search_length", "integer", ""),
)
# fmt: on


def _param(name: str, sql_type: str | None) -> str:
    return f"%({name})s" + ("" if sql_type is None else "::" + sql_type)


# The schema's function that digests an indexed metadata value (see schema version 3).
VALUE_DIGEST: Final = "convostore_value_digest"

# A session write needs no statement of its own: the one statement that writes the
# session and its entries (INSERT_SESSION, UPDATE_SESSION) names session_metadata, so
# it takes ROW EXCLUSIVE on it when it is planned, before it takes its snapshot. A key
# change's SHARE ROW EXCLUSIVE on it conflicts with that: the key change waits for the
# writes in flight to commit, and a later write waits for the key change to commit, then
# sees the keys it committed. Appends never name session_metadata: they never wait.
LOCK_INDEXED_KEYS: Final = "LOCK TABLE session_metadata IN SHARE ROW EXCLUSIVE MODE"
# A session delete names session_metadata the same way (in a CTE that deletes nothing:
# the cascade deletes the entries), so that it waits for a key change before it locks
# the session's row, never between that row lock and its cascade. A key change's
# backfill can then wait for the rows it reads (`schema.KEY_STATEMENTS`) without a
# deadlock, and a delete that rolls back leaves its session indexed.
DELETES_LOCK_ENTRIES: Final = (
    "WITH entries_first AS (DELETE FROM session_metadata WHERE false RETURNING 1) "
)
DIALECT: Final = Dialect(
    name="postgresql",
    param=_param,
    time_param=lambda when: when,
    rows=READER,
    # The metadata index holds values of any length by their SHA-256 (a btree row has a
    # size limit): the digest finds the rows, the values are then compared whole.
    value_equals=lambda column, marker: (
        f"{VALUE_DIGEST}({column}) = {VALUE_DIGEST}({marker}) AND {column} = {marker}"
    ),
    database_size=(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c"
        " WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'm')"
    ),
    lock_indexed_keys=LOCK_INDEXED_KEYS,
    in_strings=lambda column, marker: f"{column} = ANY({marker})",
    deletes_lock_entries=DELETES_LOCK_ENTRIES,
)
STATEMENTS: Final = Statements(DIALECT)

USER_COLUMNS: Final = columns(USER_FIELDS)
SESSION_COLUMNS: Final = columns(SESSION_FIELDS)
EVENT_COLUMNS: Final = columns(EVENT_FIELDS, "e.")
# The users of a call that are inserted if absent: a JSON document (`rows.users_json`).
# A few values in one parameter cost the client far less to send than many arrays.
_USERS_GIVEN = (
    "json_to_recordset(%(users)s::json) AS given (id text, display_name text,"
    " username text, email text, kind text, metadata text)"
)
# The ids of %(required_users)s (given by id, so they must be stored) that are not, in
# the order given; NULL when every one is stored.
_MISSING_USERS = (
    "SELECT array_agg(required.id ORDER BY required.n) AS ids"
    " FROM unnest(%(required_users)s::text[]) WITH ORDINALITY AS required (id, n)"
    " WHERE NOT EXISTS (SELECT 1 FROM users u WHERE u.id = required.id)"
)

# ---------------------------------------------------------------------------- users

UPSERT_USER: Final = (
    f"INSERT INTO users ({USER_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s::json)"
    " ON CONFLICT (id) DO UPDATE SET display_name = excluded.display_name,"
    " username = excluded.username, email = excluded.email, kind = excluded.kind,"
    " metadata = excluded.metadata"
)


def _users_added(once: str) -> str:
    """The step that stores the users a statement gives (those absent), once the step
    ``once`` has written its row."""
    return f"""users_added AS (
    INSERT INTO users ({USER_COLUMNS})
    SELECT given.id, given.display_name, given.username, given.email, given.kind,
        given.metadata::json
    FROM {_USERS_GIVEN}
    WHERE EXISTS (SELECT 1 FROM {once})
    ON CONFLICT (id) DO NOTHING
)"""


# ---------------------------------------------------------------------------- sessions


# One statement checks the users and the parent, inserts the session, then (only if it
# was inserted) its users and its metadata entries of the keys indexed when it runs, and
# answers what a refusal needs to say why: (inserted, existed before, missing user ids,
# parent found, parent's part_of, parent's owner).
INSERT_SESSION: Final = f"""WITH missing_users AS ({_MISSING_USERS}),
parent AS (SELECT owner_id, part_of FROM sessions WHERE id = %(part_of)s),
inserted AS (
    INSERT INTO sessions ({SESSION_COLUMNS})
    SELECT %(id)s, %(owner_id)s, %(title)s, %(kind)s, %(part_of)s, %(held_with)s,
        %(created_at)s, %(last_activity_at)s, %(expires_at)s, %(metadata)s::json, 0, %(stamp)s
    WHERE (SELECT ids FROM missing_users) IS NULL
        AND (%(part_of)s::text IS NULL OR EXISTS (
            SELECT 1 FROM parent WHERE parent.part_of IS NULL
            AND parent.owner_id IS NOT DISTINCT FROM %(owner_id)s::text))
    ON CONFLICT (id) DO NOTHING
    RETURNING id
),
{_users_added("inserted")},
metadata_indexed AS (
    INSERT INTO session_metadata (name, value, session_id)
    SELECT entry.name, entry.value, inserted.id
    FROM inserted, unnest(%(metadata_names)s::text[], %(metadata_values)s::text[])
        AS entry (name, value)
    WHERE entry.name IN (SELECT name FROM indexed_metadata_keys)
)
SELECT EXISTS (SELECT 1 FROM inserted), EXISTS (SELECT 1 FROM sessions WHERE id = %(id)s),
    (SELECT ids FROM missing_users), EXISTS (SELECT 1 FROM parent),
    (SELECT part_of FROM parent), (SELECT owner_id FROM parent)"""
# Taken before looking for a part: every caller of find_or_create_part for one parent
# then looks (and inserts) one after another, so all settle on the earliest part.
# NO KEY UPDATE, since a key add's backfill may lock the parent FOR KEY SHARE meanwhile.
LOCK_PARENT: Final = "SELECT owner_id, part_of FROM sessions WHERE id = %s FOR NO KEY UPDATE"
# The metadata index follows the new metadata: entries no longer true go, new ones come,
# for the keys indexed when it runs (see LOCK_INDEXED_KEYS).
UPDATE_SESSION: Final = f"""WITH updated AS (
    UPDATE sessions SET title = %(title)s, metadata = %(metadata)s::json,
        expires_at = %(expires_at)s, stamp = %(new_stamp)s
    WHERE id = %(id)s AND stamp = %(expected_stamp)s
    RETURNING {SESSION_COLUMNS}
),
entries AS (
    SELECT * FROM unnest(%(metadata_names)s::text[], %(metadata_values)s::text[])
        AS entry (name, value)
    WHERE entry.name IN (SELECT name FROM indexed_metadata_keys)
),
cleared AS (
    DELETE FROM session_metadata m USING updated
    WHERE m.session_id = updated.id
        AND NOT EXISTS (SELECT 1 FROM entries WHERE entries.name = m.name
            AND entries.value = m.value)
),
indexed AS (
    INSERT INTO session_metadata (name, value, session_id)
    SELECT entries.name, entries.value, updated.id FROM updated, entries
    ON CONFLICT DO NOTHING
)
SELECT {SESSION_COLUMNS} FROM updated"""

# ---------------------------------------------------------------------------- the log

_APPENDED_COLUMNS = ", ".join(name for name, _, _ in APPENDED_FIELDS)
_APPENDED_TYPES = ", ".join(f"{name} {kind}" for name, kind, _ in APPENDED_FIELDS)
_APPENDED_VALUES = ", ".join(f"w.{name}{cast}" for name, _, cast in APPENDED_FIELDS)
# One statement is the whole append: it moves the session on (the row lock it takes
# orders concurrent appends, so seq values are gap-free), inserts the events at the seq
# values that returns, then the users and participants, all only if the session moved.
# The events travel as one JSON document (`rows.events_json`), in order.
# The checks are in the UPDATE's WHERE: no row back means "no such session", "an unknown
# user" or "another version", which only that rare path tells apart. An event id that
# is stored already fails the whole statement on the unique index.
APPEND: Final = f"""WITH missing_users AS ({_MISSING_USERS}),
advanced AS (
    UPDATE sessions SET version = version + 1, last_seq = last_seq + %(count)s::bigint,
        stamp = %(stamp)s,
        last_activity_at = greatest(last_activity_at, %(activity_at)s::timestamptz),
        message_count = message_count + %(message_count)s::bigint,
        started_by = coalesce(started_by, %(started_by)s::text)
    WHERE id = %(session_id)s
        AND (%(expected_version)s::bigint IS NULL OR version = %(expected_version)s::bigint)
        AND (SELECT ids FROM missing_users) IS NULL
    RETURNING last_seq
),
inserted AS (
    INSERT INTO events (session_id, seq, {_APPENDED_COLUMNS})
    SELECT %(session_id)s, advanced.last_seq - %(count)s::bigint + w.n, {_APPENDED_VALUES}
    FROM advanced CROSS JOIN ROWS FROM (json_to_recordset(%(events)s::json)
        AS ({_APPENDED_TYPES})) WITH ORDINALITY AS w ({_APPENDED_COLUMNS}, n)
    RETURNING seq, author_id
),
{_users_added("advanced")},
participants_added AS (
    INSERT INTO participants (session_id, user_id, first_seq)
    SELECT %(session_id)s, inserted.author_id, min(inserted.seq) FROM inserted
    WHERE inserted.author_id IS NOT NULL GROUP BY inserted.author_id
    ON CONFLICT DO NOTHING
)
SELECT last_seq FROM advanced"""
# Why an append moved nothing: the session's version (NULL: no session) and the
# required user ids that are not stored, in the order given.
APPEND_REFUSAL: Final = f"""SELECT (SELECT version FROM sessions WHERE id = %(session_id)s),
    ({_MISSING_USERS})"""
EVENTS_WITH_IDS: Final = f"SELECT {EVENT_COLUMNS} FROM events e WHERE e.id = ANY(%s::text[])"

# ---------------------------------------------------------------------------- reads

# The EventFilter conditions (`convostore.backends.sql.reads`). The text condition is
# literal and case-insensitive, as Python's `needle.lower() in content.lower()`: strpos
# has no wildcards, and lower() under the chosen collation ({collation}, filled in at
# connect) maps case fully.
EVENT_CONDITIONS: Final = event_conditions(
    DIALECT,
    " AND strpos(lower(e.content{collation}), lower(%(text)s::text{collation})) > 0",
    alias="e.",
)
_MATCHES = "FROM events e WHERE e.session_id = %(session_id)s"
_IS_TURN_START = IS_TURN_START.format(a="e.")
ReadShape = Literal["forward", "last"]
# The newest compaction boundary of the session, for the active view.
_BOUNDARY = (
    "boundary AS (SELECT e.seq, e.payload FROM events e WHERE e.session_id = %(session_id)s"
    " AND e.type = 'COMPACTION' ORDER BY e.seq DESC LIMIT 1)"
)
# What an active view is composed from, each row tagged with its part: 0, the boundary
# and every event after it; 1, the events it keeps (each once, however often named).
_VIEW_PARTS = (
    f"SELECT 0 AS part, {EVENT_COLUMNS} FROM events e, boundary"
    " WHERE e.session_id = %(session_id)s AND e.seq >= boundary.seq"
    f" UNION ALL SELECT 1, {EVENT_COLUMNS} FROM boundary"
    " CROSS JOIN LATERAL (SELECT DISTINCT json_array_elements_text("
    "boundary.payload -> 'kept_event_ids') AS id) kept"
    " JOIN events e ON e.id = kept.id"
    " WHERE e.session_id = %(session_id)s AND e.seq < boundary.seq"
)


def _conditions_sql(conditions: tuple[bool, ...], collation: str | None) -> str:
    collate = "" if collation is None else " COLLATE " + sql.Identifier(collation).as_string(None)
    return "".join(
        fragment.replace("{collation}", collate)
        for (_, fragment), used in zip(EVENT_CONDITIONS, conditions, strict=True)
        if used
    )


def _matches_sql(shape: ReadShape, where: str, part: str = "", guard: str = "") -> tuple[str, str]:
    """(the CTEs, the final SELECT) of a read of one shape. ``part`` is the column that
    tags its rows and ``guard`` a condition on the final SELECT alone, both for the
    active view's statement."""
    if shape == "forward":
        # LIMIT NULL: no limit.
        return "", (
            f"SELECT {part}{EVENT_COLUMNS} {_MATCHES}{where}{guard} ORDER BY e.seq LIMIT %(limit)s"
        )
    # The newest `last` matches, extended back to the nearest matching turn start at or
    # before the first of them (none: not extended). Three index probes, one statement.
    ctes = (
        f"window_rows AS (SELECT e.seq {_MATCHES}{where} ORDER BY e.seq DESC LIMIT %(last)s),"
        " window_start AS (SELECT min(seq) AS seq FROM window_rows),"
        " read_from AS (SELECT coalesce((SELECT e.seq"
        f" {_MATCHES}{where}{_IS_TURN_START} AND e.seq <= window_start.seq"
        " ORDER BY e.seq DESC LIMIT 1), window_start.seq) AS seq FROM window_start)"
    )
    select = (
        f"SELECT {part}{EVENT_COLUMNS} {_MATCHES}{where}{guard}"
        " AND e.seq >= (SELECT seq FROM read_from) ORDER BY e.seq"
    )
    return ctes, select


@functools.cache
def events_sql(
    shape: ReadShape, conditions: tuple[bool, ...], collation: str | None, active_view: bool
) -> str:
    """The read of one shape with the conditions flagged in ``conditions`` (one flag per
    `EVENT_CONDITIONS` entry). Parameters: session_id, the conditions' names (lineage
    for branch), limit or last.

    With ``active_view``, the rows are tagged with a leading part column: 0 and 1 are
    the parts of the view of the newest compaction, to be composed by the caller; 2 is
    the filtered log itself, read only when the log has no compaction.
    """
    where = _conditions_sql(conditions, collation)
    if not active_view:
        ctes, select = _matches_sql(shape, where, "")
        return (f"WITH {ctes} " if ctes else "") + select
    # The filtered log is read only where no boundary exists: a one-time filter, so the
    # branch costs nothing when the view is composed instead.
    ctes, select = _matches_sql(
        shape, where, part="2 AS part, ", guard=" AND NOT EXISTS (SELECT 1 FROM boundary)"
    )
    return (
        f"WITH {_BOUNDARY}{', ' + ctes if ctes else ''} "
        f"({_VIEW_PARTS}) UNION ALL ({select}) ORDER BY part, seq"
    )


# ---------------------------------------------------------------------------- stats
