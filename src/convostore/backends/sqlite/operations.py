"""What each store operation does on its thread: plain functions of a connection.

A ``write_`` function runs on the writer thread inside `in_write_transaction`; a
``read_`` function runs on a reader thread, inside `in_read_snapshot` when it runs
several queries. Each is all of one primitive of
`convostore.backends.interface.Backend`, so an operation is one thread hop.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from convostore._time import to_micros
from convostore.backends.sql.decisions import (
    check_parent,
    event_conditions,
    missing_session,
    read_parameters,
    refuse_existing,
    replay_or_conflict,
    stale_or_missing,
    unconfirmed_users,
    unknown_users,
)
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.connection import RollbackAndReturn
from convostore.backends.sqlite.event_cache import EventCache, read_through
from convostore.backends.sqlite.rows import (
    event_from_row,
    event_values,
    session_from_row,
    session_values,
    user_values,
)
from convostore.filters import (
    EventFilter,
    apply_filter,
    compaction_parts,
    compose_view,
)
from convostore.model import Event, Session, User
from convostore.prepare import (
    AppendOutcome,
    NewSession,
    PreparedAppend,
    SessionChanges,
    owned_by_parent,
)

__all__ = [
    "read_all",
    "read_events",
    "write_append",
    "write_changed",
    "write_find_or_insert_part",
    "write_insert_session",
    "write_put_user",
    "write_returning",
    "write_update_session",
]

Connection = sqlite3.Connection

# Lists of ids, types, roles and branches are bound as one JSON text parameter. They
# hold only strings, so one encoder made once serves them all.
_encode_strings = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _json_list(values: Iterable[str]) -> str:
    return _encode_strings(list(values))


# ---------------------------------------------------------------------------- writes


def _require_users(
    connection: Connection, users: tuple[User, ...], required: tuple[str, ...]
) -> None:
    """`UnknownUserError` for a required id that is neither stored nor given as a
    `User` in the same call."""
    wanted = unconfirmed_users(users, required)
    if not wanted:
        return
    missing = [row[0] for row in connection.execute(sql.MISSING_USERS, (_json_list(wanted),))]
    if missing:
        raise unknown_users(missing)


def _insert_users(connection: Connection, users: tuple[User, ...]) -> None:
    """Insert the users that are not stored; a stored user is never overwritten."""
    if users:
        connection.executemany(sql.INSERT_USER_IF_ABSENT, [user_values(user) for user in users])


def _index_metadata(
    connection: Connection, session_id: str, candidates: tuple[tuple[str, str], ...]
) -> None:
    """Index the candidate entries whose key the database indexes now, as this write
    transaction (which no key add or drop interleaves) finds it."""
    if candidates:
        connection.executemany(
            sql.INSERT_METADATA_ENTRY, [(name, value, session_id) for name, value in candidates]
        )


def _session_exists(connection: Connection, session_id: str) -> bool:
    return connection.execute(sql.SESSION_EXISTS, (session_id,)).fetchone() is not None


def write_put_user(connection: Connection, user: User) -> None:
    connection.execute(sql.UPSERT_USER, user_values(user))


def write_insert_session(
    connection: Connection, new: NewSession, if_absent: bool
) -> Session | None:
    session = new.session
    if _session_exists(connection, session.id):
        refuse_existing(session, if_absent)
        return None
    _require_users(connection, new.users_to_insert, new.required_user_ids)
    if session.part_of is not None:
        check_parent(session, connection.execute(sql.SELECT_PARENT, (session.part_of,)).fetchone())
    _insert_users(connection, new.users_to_insert)
    connection.execute(sql.INSERT_SESSION, session_values(new))
    _index_metadata(connection, session.id, new.indexed_metadata)
    return session


def write_find_or_insert_part(connection: Connection, new: NewSession) -> Session:
    """Under the write lock no other part can appear between the look and the insert,
    so every caller settles on the earliest part."""
    parent = connection.execute(sql.SELECT_PARENT, (new.session.part_of,)).fetchone()
    new = owned_by_parent(new, parent)
    session = new.session
    found = connection.execute(
        sql.STATEMENTS.find_part, {"part_of": session.part_of, "held_with": session.held_with}
    ).fetchone()
    if found is not None:
        return session_from_row(found)
    inserted = write_insert_session(connection, new, False)
    assert inserted is not None  # Absent, or the look above would have found it.
    return inserted


def write_update_session(connection: Connection, changes: SessionChanges) -> Session:
    row = connection.execute(
        sql.UPDATE_SESSION,
        (
            changes.title,
            changes.metadata_json,
            None if changes.expires_at is None else to_micros(changes.expires_at),
            changes.new_stamp,
            changes.session_id,
            changes.expected_stamp,
        ),
    ).fetchone()
    if row is None:
        raise stale_or_missing(changes.session_id, _session_exists(connection, changes.session_id))
    connection.execute(sql.DELETE_METADATA_ENTRIES, (changes.session_id,))
    _index_metadata(connection, changes.session_id, changes.indexed_metadata)
    return session_from_row(row)


def write_changed(connection: Connection, statement: str, parameters: Any) -> int:
    """How many rows the statement changed itself; the rows its cascades change (parts,
    events) are not counted."""
    return connection.execute(statement, parameters).rowcount


def write_returning(connection: Connection, statement: str, parameters: Any) -> Any:
    """The row a statement with RETURNING gives, or None."""
    return connection.execute(statement, parameters).fetchone()


def write_append(connection: Connection, append: PreparedAppend) -> AppendOutcome:
    """The checks in the order `Store._append` gives, in as few statements as the
    common case allows: move the session on, then insert the events. Whatever a later
    check refuses is undone with the transaction."""
    events = append.events
    unconfirmed = unconfirmed_users(append.users_to_insert, append.required_user_ids)
    advanced = connection.execute(
        sql.ADVANCE_SESSION,
        (
            len(events),
            append.new_stamp,
            None if append.activity_at is None else to_micros(append.activity_at),
            append.new_message_count,
            append.started_by,
            append.session_id,
            append.expected_version,
            _json_list(unconfirmed) if unconfirmed else None,
        ),
    ).fetchone()
    if advanced is None:
        if not _session_exists(connection, append.session_id):
            raise missing_session(append.session_id)
        _require_users(connection, append.users_to_insert, append.required_user_ids)
        return AppendOutcome(applied=False)  # A batch for another version.
    last_seq, unknown_users = advanced
    if unknown_users:
        _require_users(connection, append.users_to_insert, append.required_user_ids)
    _insert_users(connection, append.users_to_insert)
    first_seq = last_seq - len(events) + 1
    try:
        if len(events) == 1:
            connection.execute(sql.INSERT_EVENT, event_values(events[0], first_seq))
        else:
            connection.executemany(
                sql.INSERT_EVENT,
                [event_values(prepared, first_seq + i) for i, prepared in enumerate(events)],
            )
    except sqlite3.IntegrityError as error:
        _raise_for_stored_id(connection, append, error)
    stored: list[Event] = []
    for offset, prepared in enumerate(events):
        # "event.seq is 0 until the backend assigns it" (PreparedEvent): the event was
        # made for this append and nothing else holds it, so it takes its seq in place
        # rather than as a copy of every field, on the hottest path there is.
        object.__setattr__(prepared.event, "seq", first_seq + offset)
        stored.append(prepared.event)
    return AppendOutcome(applied=True, events=stored)


def _raise_for_stored_id(
    connection: Connection, append: PreparedAppend, error: sqlite3.IntegrityError
) -> None:
    """An event id is stored already: a retried append (rolled back, answering the stored
    event) or `EventIdConflictError`."""
    ids = _json_list(prepared.event.id for prepared in append.events)
    stored = [event_from_row(row) for row in connection.execute(sql.EVENTS_WITH_IDS, (ids,))]
    if not stored:
        raise error  # Not an id clash: a bug, surfaced as a StoreError.
    raise RollbackAndReturn(replay_or_conflict(append, stored))


# ---------------------------------------------------------------------------- reads


def read_all(connection: Connection, statement: str, parameters: Any) -> list[Any]:
    return connection.execute(statement, parameters).fetchall()


def _conditions(event_filter: EventFilter) -> tuple[bool, ...]:
    """Which of `statements.EVENT_CONDITIONS` the filter sets."""
    return event_conditions(_CONDITION_NAMES, event_filter)


_CONDITION_NAMES = tuple(name for name, _ in sql.EVENT_CONDITIONS)


def _parameters(session_id: str, f: EventFilter) -> dict[str, Any]:
    return read_parameters(sql.DIALECT, session_id, f)


def read_events(
    connection: Connection, cache: EventCache, session_id: str, event_filter: EventFilter
) -> list[Event]:
    """What `filters.apply_filter` answers over the log, computed in SQL; over the
    active view when the filter asks for it and the log has a compaction. Events already
    in ``cache`` are not decoded again (`event_cache.read_through`)."""
    if event_filter.active_view:
        boundary = connection.execute(sql.NEWEST_COMPACTION, (session_id,)).fetchone()
        if boundary is not None:
            return _read_active_view(connection, event_from_row(boundary), event_filter)
    conditions = _conditions(event_filter)
    parameters = _parameters(session_id, event_filter)
    if event_filter.last is None:
        shape: sql.EventShape = "forward"
    else:
        shape = "window" if event_filter.can_match_turn_start else "window_whole"
    return read_through(
        connection,
        cache,
        sql.events_sql(shape, conditions, keys=True),
        sql.events_sql(shape, conditions),
        parameters,
    )


def _read_active_view(
    connection: Connection, boundary: Event, event_filter: EventFilter
) -> list[Event]:
    """The view is composed and filtered in Python, as `filters.active_view` has it. It
    holds the events the newest compaction kept and every event after it: what
    compaction keeps small, not the whole log."""
    session_id = boundary.session_id
    after = [
        event_from_row(row)
        for row in connection.execute(sql.EVENTS_AFTER, (session_id, boundary.seq))
    ]
    kept_ids, summaries = compaction_parts(boundary, after)
    kept: list[Event] = []
    if kept_ids:
        unique_ids = _json_list(dict.fromkeys(kept_ids))  # each once, however often named
        rows = connection.execute(sql.KEPT_EVENTS, (unique_ids, session_id, boundary.seq))
        kept = [event_from_row(row) for row in rows]
    return apply_filter(compose_view(kept, summaries, after), event_filter)
