"""What each store operation does on one connection: plain async functions.

Each is all of one primitive of `convostore.backends.interface.Backend`: one statement
where it can be (its own transaction, one round trip), else one transaction. A statement
that changed nothing is followed, on that rare path only, by one that finds out why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from psycopg import errors

from convostore.backends import spi
from convostore.backends.decisions import owned_by_parent
from convostore.backends.postgresql import statements as sql
from convostore.backends.postgresql.connection import Connection
from convostore.backends.postgresql.rows import (
    event_from_row,
    events_json,
    session_from_row,
    user_values,
    users_json,
)
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
from convostore.backends.sql.reads import EVENT_CONDITION_NAMES
from convostore.errors import StoreError
from convostore.filters import (
    EventFilter,
    apply_filter,
    compaction_parts,
    compose_view,
)
from convostore.model import Event, Session, User

__all__ = [
    "append",
    "fetch_all",
    "fetch_one",
    "find_or_insert_part",
    "insert_session",
    "put_user",
    "read_events",
    "update_session",
]

# An append that changed nothing although nothing was wrong when it was looked into (a
# session or user that appeared in between) is tried again, this many times at most.
_APPEND_ATTEMPTS: Final = 3
_EVENT_ID_INDEX: Final = "events_by_id"


async def fetch_one(
    connection: Connection, statement: str, parameters: Any = None, *, binary: bool = False
) -> Any:
    cursor = await connection.execute(statement, parameters, binary=binary)
    return await cursor.fetchone()


async def fetch_all(
    connection: Connection,
    statement: str,
    parameters: Any = None,
    *,
    binary: bool = False,
    prepare: bool | None = None,
) -> list[Any]:
    cursor = await connection.execute(statement, parameters, binary=binary, prepare=prepare)
    return await cursor.fetchall()


# ---------------------------------------------------------------------------- users


async def put_user(connection: Connection, user: User) -> None:
    await connection.execute(sql.UPSERT_USER, user_values(user))


# ---------------------------------------------------------------------------- sessions


def _entries(pairs: tuple[tuple[str, str], ...]) -> dict[str, list[str]]:
    return {
        "metadata_names": [name for name, _ in pairs],
        "metadata_values": [value for _, value in pairs],
    }


async def insert_session(
    connection: Connection, new: spi.NewSession, if_absent: bool
) -> Session | None:
    """One statement: see `statements.LOCK_INDEXED_KEYS` for how it keeps the metadata
    index whole while keys are added and dropped."""
    row = await fetch_one(connection, sql.INSERT_SESSION, _insert_parameters(new))
    return _inserted(new, row, if_absent)


def _insert_parameters(new: spi.NewSession) -> dict[str, Any]:
    return {
        **dict(zip(spi.SESSION_COLUMNS, spi.session_values(new), strict=True)),
        "stamp": new.session.stamp,
        "required_users": unconfirmed_users(new.users_to_insert, new.required_user_ids),
        "users": users_json(new.users_to_insert),
        **_entries(new.indexed_metadata),
    }


def _inserted(new: spi.NewSession, row: Any, if_absent: bool) -> Session | None:
    """The session ``INSERT_SESSION`` inserted, or why it did not."""
    session = new.session
    inserted, existed, missing, parent_found, parent_part_of, parent_owner = row
    if inserted:
        return session
    # The checks in the order the contract gives them. Passing all of them here means
    # the id was taken by a session inserted at the same moment.
    if not existed and missing:
        raise unknown_users(missing)
    if not existed:
        check_parent(session, (parent_owner, parent_part_of) if parent_found else None)
    refuse_existing(session, if_absent)
    return None


async def find_or_insert_part(connection: Connection, new: spi.NewSession) -> Session:
    """Under the parent's row lock no other part can appear between the look and the
    insert, so every caller settles on the earliest part."""
    session = new.session
    async with connection.pipeline(), connection.transaction():
        # Each statement sees what committed before it ran: the look runs after the lock
        # is granted, though BEGIN, the lock and the look travel in one round trip.
        locked = await connection.execute(sql.LOCK_PARENT, (session.part_of,))
        found = await connection.execute(
            sql.STATEMENTS.find_part,
            {"part_of": session.part_of, "held_with": session.held_with},
            binary=True,
        )
        new = owned_by_parent(new, await locked.fetchone())
        row = await found.fetchone()
        if row is not None:
            return session_from_row(row)
        row = await fetch_one(connection, sql.INSERT_SESSION, _insert_parameters(new))
        inserted = _inserted(new, row, False)
        assert inserted is not None  # Absent, or the look above would have found it.
        return inserted


async def update_session(connection: Connection, changes: spi.SessionChanges) -> Session:
    row = await fetch_one(
        connection,
        sql.UPDATE_SESSION,
        {
            "title": changes.title,
            "metadata": changes.metadata_json,
            "expires_at": changes.expires_at,
            "new_stamp": changes.new_stamp,
            "id": changes.session_id,
            "expected_stamp": changes.expected_stamp,
            **_entries(changes.indexed_metadata),
        },
        binary=True,
    )
    if row is not None:
        return session_from_row(row)
    (count,) = await fetch_one(
        connection, sql.STATEMENTS.session_exists, {"id": changes.session_id}
    )
    raise stale_or_missing(changes.session_id, count > 0)


# ---------------------------------------------------------------------------- the log


async def append(connection: Connection, prepared: spi.PreparedAppend) -> spi.AppendOutcome:
    """The checks in the order `Backend.append` gives, in one statement in the common
    case; whatever it refuses leaves nothing written, since it is one statement."""
    events = prepared.events
    required = unconfirmed_users(prepared.users_to_insert, prepared.required_user_ids)
    parameters: dict[str, Any] = {
        "session_id": prepared.session_id,
        "count": len(events),
        "stamp": prepared.new_stamp,
        "activity_at": prepared.activity_at,
        "message_count": prepared.new_message_count,
        "started_by": prepared.started_by,
        "expected_version": prepared.expected_version,
        "required_users": required,
        "users": users_json(prepared.users_to_insert),
        "events": events_json(events),
    }
    for _ in range(_APPEND_ATTEMPTS):
        try:
            row = await fetch_one(connection, sql.APPEND, parameters)
        except errors.UniqueViolation as error:
            if error.diag.constraint_name != _EVENT_ID_INDEX:
                raise
            replayed = await _stored_id_outcome(connection, prepared)
            if replayed is not None:
                return replayed
            continue  # The stored event is gone again (its session deleted): retry.
        if row is not None:
            first_seq = int(row[0]) - len(events) + 1
            return spi.AppendOutcome(
                applied=True,
                events=[replace(p.event, seq=first_seq + i) for i, p in enumerate(events)],
            )
        refused = await _refusal(connection, prepared, required)
        if refused is not None:
            return refused
    raise StoreError(f"the append to session {prepared.session_id!r} kept racing; try again")


async def _refusal(
    connection: Connection, prepared: spi.PreparedAppend, required: list[str]
) -> spi.AppendOutcome | None:
    """Why an append moved nothing: an error, a batch for another version, or None when
    nothing is wrong any more (it raced a session or a user being created)."""
    version, missing = await fetch_one(
        connection,
        sql.APPEND_REFUSAL,
        {"session_id": prepared.session_id, "required_users": required},
    )
    if version is None:
        raise missing_session(prepared.session_id)
    if missing:
        raise unknown_users(missing)
    if prepared.expected_version is not None and version != prepared.expected_version:
        return spi.AppendOutcome(applied=False)
    return None


async def _stored_id_outcome(
    connection: Connection, prepared: spi.PreparedAppend
) -> spi.AppendOutcome | None:
    """An event id is stored already: a retried append or `EventIdConflictError` (see
    `replay_or_conflict`). None when the stored event is gone by now."""
    ids = [p.event.id for p in prepared.events]
    rows = await fetch_all(connection, sql.EVENTS_WITH_IDS, (ids,), binary=True)
    if not rows:
        return None
    return replay_or_conflict(prepared, [event_from_row(row) for row in rows])


async def read_events(
    connection: Connection, session_id: str, event_filter: EventFilter, collation: str | None
) -> list[Event]:
    """What `filters.apply_filter` answers over the log, computed in one statement;
    over the active view when the filter asks for it and the log has a compaction."""
    statement = sql.events_sql(
        "forward" if event_filter.last is None else "last",
        event_conditions(EVENT_CONDITION_NAMES, event_filter),
        collation,
        event_filter.active_view,
    )
    rows = await fetch_all(
        connection, statement, read_parameters(sql.DIALECT, session_id, event_filter), binary=True
    )
    if not event_filter.active_view:
        return [event_from_row(row) for row in rows]
    if not rows or rows[0][0] == _FILTERED_LOG:
        return [event_from_row(row, 1) for row in rows]
    return _compose_active_view(rows, event_filter)


_VIEW_FROM_BOUNDARY, _KEPT, _FILTERED_LOG = 0, 1, 2


def _compose_active_view(rows: list[Any], event_filter: EventFilter) -> list[Event]:
    """The view is composed and filtered here, as `filters.active_view` has it. It
    holds the events the newest compaction kept and every event after it: what
    compaction keeps small, not the whole log."""
    boundary, *after = [event_from_row(row, 1) for row in rows if row[0] == _VIEW_FROM_BOUNDARY]
    kept = [event_from_row(row, 1) for row in rows if row[0] == _KEPT]
    _, summaries = compaction_parts(boundary, after)
    return apply_filter(compose_view(kept, summaries, after), event_filter)
