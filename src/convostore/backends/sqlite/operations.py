"""What each store operation does on its thread: plain functions of a connection.

A ``write_`` function runs on the writer thread inside `in_write_transaction`; a
``read_`` function runs on a reader thread, inside `in_read_snapshot` when it runs
several queries. Each is all of one primitive of `convostore.store.Store`, so an
operation is one thread hop.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from convostore._time import to_micros
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.connection import RollbackAndReturn
from convostore.backends.sqlite.rows import (
    event_from_row,
    event_values,
    session_from_row,
    session_values,
    user_values,
)
from convostore.errors import (
    EventIdConflictError,
    InvalidArgumentError,
    SessionExistsError,
    SessionNotFoundError,
    StaleObjectError,
    UnknownUserError,
)
from convostore.filters import (
    EventFilter,
    apply_filter,
    branch_lineage,
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
    "read_one",
    "write_append",
    "write_delete",
    "write_find_or_insert_part",
    "write_insert_session",
    "write_put_user",
    "write_set_narration",
    "write_set_title",
    "write_update_session",
]

Connection = sqlite3.Connection

# SQLite integers are signed 64-bit; a window bound beyond that bounds nothing.
_MAX_INTEGER = 2**63 - 1


# Lists of ids, types, roles and branches are bound as one JSON text parameter. They
# hold only strings, so one encoder made once serves them all.
_encode_strings = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _json_list(values: Iterable[str]) -> str:
    return _encode_strings(list(values))


# ---------------------------------------------------------------------------- writes


def _unconfirmed_users(users: tuple[User, ...], required: tuple[str, ...]) -> list[str]:
    """The required ids not given as a `User` in the same call: those must be stored."""
    if not required:
        return []
    given = {user.id for user in users}
    return [user_id for user_id in required if user_id not in given]


def _require_users(
    connection: Connection, users: tuple[User, ...], required: tuple[str, ...]
) -> None:
    """`UnknownUserError` for a required id that is neither stored nor given as a
    `User` in the same call."""
    wanted = _unconfirmed_users(users, required)
    if not wanted:
        return
    missing = [row[0] for row in connection.execute(sql.MISSING_USERS, (_json_list(wanted),))]
    if missing:
        raise UnknownUserError(f"unknown user id(s): {', '.join(map(repr, missing))}")


def _insert_users(connection: Connection, users: tuple[User, ...]) -> None:
    """Insert the users that are not stored; a stored user is never overwritten."""
    if users:
        connection.executemany(sql.INSERT_USER_IF_ABSENT, [user_values(user) for user in users])


def _index_metadata(
    connection: Connection, session_id: str, pairs: tuple[tuple[str, str], ...]
) -> None:
    if pairs:
        connection.executemany(
            sql.INSERT_METADATA_ENTRY, [(name, value, session_id) for name, value in pairs]
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
        if if_absent:
            return None
        raise SessionExistsError(f"session {session.id!r} already exists")
    _require_users(connection, new.users_to_insert, new.required_user_ids)
    if session.part_of is not None:
        parent = connection.execute(sql.SELECT_PARENT, (session.part_of,)).fetchone()
        if parent is None:
            raise SessionNotFoundError(f"part_of names no session: {session.part_of!r}")
        parent_owner, parent_part_of = parent
        if parent_part_of is not None:
            raise InvalidArgumentError("part_of must name a top-level session")
        if parent_owner != session.owner_id:
            raise InvalidArgumentError("part_of must name a session with the same owner")
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
    found = connection.execute(sql.FIND_PART, (session.part_of, session.held_with)).fetchone()
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
        if not _session_exists(connection, changes.session_id):
            raise SessionNotFoundError(f"no session {changes.session_id!r}")
        raise StaleObjectError(f"session {changes.session_id!r} was written since it was read")
    connection.execute(sql.DELETE_METADATA_ENTRIES, (changes.session_id,))
    _index_metadata(connection, changes.session_id, changes.indexed_metadata)
    return session_from_row(row)


def write_set_title(
    connection: Connection, session_id: str, title: str | None, stamp: str
) -> Session:
    row = connection.execute(sql.SET_TITLE, (title, stamp, session_id)).fetchone()
    if row is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    return session_from_row(row)


def write_delete(connection: Connection, statement: str, parameter: str | int) -> int:
    """How many rows the statement deleted itself; the rows its cascades delete (parts,
    events) are not counted."""
    return connection.execute(statement, (parameter,)).rowcount


def write_append(connection: Connection, append: PreparedAppend) -> AppendOutcome:
    """The checks in the order `Store._append` gives, in as few statements as the
    common case allows: move the session on, then insert the events. Whatever a later
    check refuses is undone with the transaction."""
    events = append.events
    unconfirmed = _unconfirmed_users(append.users_to_insert, append.required_user_ids)
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
            raise SessionNotFoundError(f"no session {append.session_id!r}")
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
    """An event id is stored already. A single append retried in its own log answers
    the stored event and writes nothing; any other clash is `EventIdConflictError`."""
    ids = _json_list(prepared.event.id for prepared in append.events)
    stored = [event_from_row(row) for row in connection.execute(sql.EVENTS_WITH_IDS, (ids,))]
    if not stored:
        raise error  # Not an id clash: a bug, surfaced as a StoreError.
    clash = stored[0]
    if append.expected_version is None and clash.session_id == append.session_id:
        raise RollbackAndReturn(AppendOutcome(applied=False, events=[clash]))
    where = "" if clash.session_id == append.session_id else " by another session"
    raise EventIdConflictError(f"event id {clash.id!r} is already used{where}")


def write_set_narration(
    connection: Connection, session_id: str, message_id: str, text: str | None, stamp: str
) -> bool:
    cursor = connection.execute(sql.SET_NARRATION, (text, stamp, message_id, session_id))
    return cursor.rowcount > 0


# ---------------------------------------------------------------------------- reads


def read_one(connection: Connection, statement: str, parameter: str) -> Any:
    return connection.execute(statement, (parameter,)).fetchone()


def read_all(
    connection: Connection, statement: str, parameters: tuple[Any, ...] | dict[str, Any]
) -> list[Any]:
    return connection.execute(statement, parameters).fetchall()


def _conditions(event_filter: EventFilter) -> tuple[bool, ...]:
    """Which of `statements.EVENT_CONDITIONS` the filter sets."""
    return tuple(
        event_filter.exclude_synthetic
        if name == "exclude_synthetic"
        else getattr(event_filter, name) is not None
        for name, _ in sql.EVENT_CONDITIONS
    )


def _parameters(session_id: str, f: EventFilter) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "types": None if f.types is None else _json_list(f.types),
        # Roles are `Role` values, strings whose JSON is the role's name.
        "roles": None if f.roles is None else _json_list(f.roles),
        "lineage": None if f.branch is None else _json_list(branch_lineage(f.branch)),
        "since": None if f.since is None else to_micros(f.since),
        "until": None if f.until is None else to_micros(f.until),
        "text": f.text,
        "after_seq": None if f.after_seq is None else min(f.after_seq, _MAX_INTEGER),
        "limit": -1 if f.limit is None else min(f.limit, _MAX_INTEGER),
        "last": None if f.last is None else min(f.last, _MAX_INTEGER),
    }


def read_events(connection: Connection, session_id: str, event_filter: EventFilter) -> list[Event]:
    """What `filters.apply_filter` answers over the log, computed in SQL; over the
    active view when the filter asks for it and the log has a compaction."""
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
    rows = connection.execute(sql.events_sql(shape, conditions), parameters)
    return [event_from_row(row) for row in rows]


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
