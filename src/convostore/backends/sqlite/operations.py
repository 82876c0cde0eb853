"""What each store operation does on its thread: plain functions of a connection.

A ``write_`` function runs on the writer thread inside `in_write_transaction`; a
``read_`` function runs on a reader thread, inside `in_read_snapshot` when it runs
several queries. Each is all of one primitive of
`convostore.backends.interface.Backend`, so an operation is one thread hop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from convostore._time import to_micros
from convostore.backends import spi
from convostore.backends.sql import writes
from convostore.backends.sql.decisions import (
    missing_session,
    replay_or_conflict,
    unconfirmed_users,
)
from convostore.backends.sql.steps import RollbackAndReturn, drive
from convostore.backends.sql.values import json_list
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.event_cache import EventCache, read_through
from convostore.backends.sqlite.rows import (
    event_from_row,
    event_values,
    user_values,
)
from convostore.filters import EventFilter
from convostore.model import Event, Session, User

__all__ = [
    "read_all",
    "read_events",
    "write_append",
    "write_appends",
    "write_changed",
    "write_find_or_insert_part",
    "write_insert_session",
    "write_put_user",
    "write_returning",
    "write_update_session",
]

Connection = sqlite3.Connection


# ---------------------------------------------------------------------------- writes


def _require_users(
    connection: Connection, users: tuple[User, ...], required: tuple[str, ...]
) -> None:
    """`UnknownUserError` for a required id that is neither stored nor given as a
    `User` in the same call."""
    drive(connection, writes.require_users(sql.WRITES, users, required))


def _insert_users(connection: Connection, users: tuple[User, ...]) -> None:
    """Insert the users that are not stored; a stored user is never overwritten."""
    drive(connection, writes.insert_users(sql.WRITES, users))


def _session_exists(connection: Connection, session_id: str) -> bool:
    return connection.execute(sql.SESSION_EXISTS, (session_id,)).fetchone() is not None


def write_put_user(connection: Connection, user: User) -> None:
    connection.execute(sql.STATEMENTS.upsert_user, user_values(user))


def write_insert_session(
    connection: Connection, new: spi.NewSession, if_absent: bool
) -> Session | None:
    return drive(connection, writes.insert_session(sql.WRITES, new, if_absent))


def write_find_or_insert_part(connection: Connection, new: spi.NewSession) -> Session:
    return drive(connection, writes.find_or_insert_part(sql.WRITES, new))


def write_update_session(connection: Connection, changes: spi.SessionChanges) -> Session:
    return drive(connection, writes.update_session(sql.WRITES, changes))


def write_changed(connection: Connection, statement: str, parameters: Any) -> int:
    """How many rows the statement changed itself; the rows its cascades change (parts,
    events) are not counted."""
    return connection.execute(statement, parameters).rowcount


def write_returning(connection: Connection, statement: str, parameters: Any) -> Any:
    """The row a statement with RETURNING gives, or None."""
    return connection.execute(statement, parameters).fetchone()


def write_append(connection: Connection, append: spi.PreparedAppend) -> spi.AppendOutcome:
    """The checks in the order `Backend.append` gives, in as few statements as the
    common case allows: move the session on, then insert the events. Whatever a later
    check refuses is undone with the transaction."""
    events = append.events
    unconfirmed = unconfirmed_users(append.users_to_insert, append.required_user_ids)
    advanced = connection.execute(
        sql.ADVANCE_SESSION,
        (*_advance_values(append), json_list(unconfirmed) if unconfirmed else None),
    ).fetchone()
    if advanced is None:
        if not _session_exists(connection, append.session_id):
            raise missing_session(append.session_id)
        _require_users(connection, append.users_to_insert, append.required_user_ids)
        return spi.AppendOutcome(applied=False)  # A batch for another version.
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
    return _applied(append, first_seq)


def _advance_values(append: spi.PreparedAppend) -> tuple[Any, ...]:
    """The values `sql.ADVANCE_SESSION` (and `sql.advance_sessions`, per session) moves
    an append's session on by, in order."""
    return (
        len(append.events),
        append.new_stamp,
        None if append.activity_at is None else to_micros(append.activity_at),
        append.new_message_count,
        append.started_by,
        append.session_id,
        append.expected_version,
    )


def _applied(append: spi.PreparedAppend, first_seq: int) -> spi.AppendOutcome:
    """The outcome of an append stored with seqs from ``first_seq`` on."""
    for offset, prepared in enumerate(append.events):
        # "event.seq is 0 until the backend assigns it" (PreparedEvent): the event was
        # made for this append and nothing else holds it, so it takes its seq in place
        # rather than as a copy of every field, on the hottest path there is.
        object.__setattr__(prepared.event, "seq", first_seq + offset)
    return spi.AppendOutcome(applied=True, events=[prepared.event for prepared in append.events])


def write_appends(
    connection: Connection, batch: list[tuple[spi.PreparedAppend]]
) -> list[spi.AppendOutcome]:
    """`write_append` of each append, in order, in fewer statements. The group commit
    runs it (see `in_group_transaction`), and runs each append alone if this raises.

    Appends to sessions that differ are taken together (`_write_together`); an append
    to a session already taken starts the next set, so a session's appends keep their
    order.
    """
    outcomes: list[spi.AppendOutcome] = []
    together: dict[str, spi.PreparedAppend] = {}
    for (append,) in batch:
        if append.session_id in together:
            outcomes += _write_together(connection, list(together.values()))
            together.clear()
        together[append.session_id] = append
    outcomes += _write_together(connection, list(together.values()))
    return outcomes


def _write_together(
    connection: Connection, appends: list[spi.PreparedAppend]
) -> list[spi.AppendOutcome]:
    """`write_append` of appends to sessions that differ: their sessions moved on by one
    statement, the users they give stored by one more, their events inserted by one
    more. An append that moves no session on (its session missing, or not at the
    expected version) runs alone after the others, to the same outcome."""
    if len(appends) < 2:
        return [write_append(connection, append) for append in appends]
    required = [
        user_id
        for append in appends
        for user_id in unconfirmed_users(append.users_to_insert, append.required_user_ids)
    ]
    if required and connection.execute(sql.UNKNOWN_USERS, (json_list(required),)).fetchone():
        # One of them is refused (or needs a user another of them gives): each runs
        # alone, in order, to its own outcome.
        return [write_append(connection, append) for append in appends]
    parameters = [value for append in appends for value in _advance_values(append)]
    last_seqs = dict(connection.execute(sql.advance_sessions(len(appends)), parameters))
    first_seqs = {
        append.session_id: last_seqs[append.session_id] - len(append.events) + 1
        for append in appends
        if append.session_id in last_seqs
    }
    _insert_users(
        connection,
        tuple(user for a in appends if a.session_id in first_seqs for user in a.users_to_insert),
    )
    connection.executemany(
        sql.INSERT_EVENT,
        [
            event_values(prepared, first_seqs[append.session_id] + offset)
            for append in appends
            if append.session_id in first_seqs
            for offset, prepared in enumerate(append.events)
        ],
    )
    return [
        _applied(append, first_seqs[append.session_id])
        if append.session_id in first_seqs
        else write_append(connection, append)
        for append in appends
    ]


def _raise_for_stored_id(
    connection: Connection, append: spi.PreparedAppend, error: sqlite3.IntegrityError
) -> None:
    """An event id is stored already: a retried append (rolled back, answering the stored
    event) or `EventIdConflictError`."""
    ids = json_list(prepared.event.id for prepared in append.events)
    stored = [event_from_row(row) for row in connection.execute(sql.EVENTS_WITH_IDS, (ids,))]
    if not stored:
        raise error  # Not an id clash: a bug, surfaced as a StoreError.
    raise RollbackAndReturn(replay_or_conflict(append, stored))


# ---------------------------------------------------------------------------- reads


def read_all(connection: Connection, statement: str, parameters: Any) -> list[Any]:
    return connection.execute(statement, parameters).fetchall()


def read_events(
    connection: Connection, cache: EventCache, session_id: str, event_filter: EventFilter
) -> list[Event]:
    """What `filters.apply_filter` answers over the log, computed in SQL; over the
    active view when the filter asks for it and the log has a compaction. Events already
    in ``cache`` are not decoded again (`event_cache.read_through`)."""
    reads = sql.READS
    if event_filter.active_view:
        boundary = connection.execute(
            reads.newest_compaction, {"session_id": session_id}
        ).fetchone()
        if boundary is not None:
            view = reads.active_view(event_from_row(boundary), event_filter, _events)
            return drive(connection, view)
    conditions = reads.flags(event_filter)
    parameters = reads.parameters(session_id, event_filter)
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


def _events(rows: Sequence[Any]) -> list[Event]:
    return [event_from_row(row) for row in rows]
