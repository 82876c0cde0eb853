"""What each store operation does on one connection: plain async functions.

Each is all of one primitive of `convostore.store.Store`: one statement where it can be
(its own transaction, one round trip), else one transaction. A statement that changed
nothing is followed, on that rare path only, by one that finds out why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from psycopg import errors

from convostore.backends.postgresql import statements as sql
from convostore.backends.postgresql.connection import Connection
from convostore.backends.postgresql.rows import (
    event_from_row,
    events_json,
    session_from_row,
    user_values,
    users_json,
)
from convostore.errors import (
    EventIdConflictError,
    InvalidArgumentError,
    SessionExistsError,
    SessionNotFoundError,
    StaleObjectError,
    StoreError,
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
    "append",
    "fetch_all",
    "fetch_one",
    "find_or_insert_part",
    "insert_session",
    "put_user",
    "read_events",
    "row_count",
    "set_title",
    "update_session",
]

# PostgreSQL integers are signed 64-bit; a window bound beyond that bounds nothing.
_MAX_INTEGER: Final = 2**63 - 1
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


async def row_count(connection: Connection, statement: str, parameters: Any) -> int:
    """How many rows the statement changed itself (not those its cascades change)."""
    cursor = await connection.execute(statement, parameters)
    return cursor.rowcount


# ---------------------------------------------------------------------------- users


def _unconfirmed_users(users: tuple[User, ...], required: tuple[str, ...]) -> list[str]:
    """The required ids not given as a `User` in the same call: those must be stored."""
    if not required:
        return []
    given = {user.id for user in users}
    return [user_id for user_id in required if user_id not in given]


def _unknown_users(missing: list[str]) -> UnknownUserError:
    return UnknownUserError(f"unknown user id(s): {', '.join(map(repr, missing))}")


async def put_user(connection: Connection, user: User) -> None:
    await connection.execute(sql.UPSERT_USER, user_values(user))


# ---------------------------------------------------------------------------- sessions


def _entries(pairs: tuple[tuple[str, str], ...]) -> dict[str, list[str]]:
    return {
        "metadata_names": [name for name, _ in pairs],
        "metadata_values": [value for _, value in pairs],
    }


async def insert_session(
    connection: Connection, new: NewSession, if_absent: bool
) -> Session | None:
    session = new.session
    row = await fetch_one(
        connection,
        sql.INSERT_SESSION,
        {
            "id": session.id,
            "owner_id": session.owner_id,
            "title": session.title,
            "kind": session.kind,
            "part_of": session.part_of,
            "held_with": session.held_with,
            "created_at": session.created_at,
            "last_activity_at": session.last_activity_at,
            "expires_at": session.expires_at,
            "metadata": new.metadata_json,
            "stamp": session.stamp,
            "required_users": _unconfirmed_users(new.users_to_insert, new.required_user_ids),
            "users": users_json(new.users_to_insert),
            **_entries(new.indexed_metadata),
        },
    )
    inserted, existed, missing, parent_found, parent_part_of, parent_owner = row
    if inserted:
        return session
    # The checks in the order the contract gives them. Passing all of them here means
    # the id was taken by a session inserted at the same moment.
    if not existed and missing:
        raise _unknown_users(missing)
    if not existed and session.part_of is not None:
        if not parent_found:
            raise SessionNotFoundError(f"part_of names no session: {session.part_of!r}")
        if parent_part_of is not None:
            raise InvalidArgumentError("part_of must name a top-level session")
        if parent_owner != session.owner_id:
            raise InvalidArgumentError("part_of must name a session with the same owner")
    if if_absent:
        return None
    raise SessionExistsError(f"session {session.id!r} already exists")


async def find_or_insert_part(connection: Connection, new: NewSession) -> Session:
    """Under the parent's row lock no other part can appear between the look and the
    insert, so every caller settles on the earliest part."""
    session = new.session
    async with connection.pipeline(), connection.transaction():
        # Each statement sees what committed before it ran: the look runs after the lock
        # is granted, though BEGIN, the lock and the look travel in one round trip.
        locked = await connection.execute(sql.LOCK_PARENT, (session.part_of,))
        found = await connection.execute(
            sql.FIND_PART, (session.part_of, session.held_with), binary=True
        )
        new = owned_by_parent(new, await locked.fetchone())
        row = await found.fetchone()
        if row is not None:
            return session_from_row(row)
        inserted = await insert_session(connection, new, False)
        assert inserted is not None  # Absent, or the look above would have found it.
        return inserted


async def update_session(connection: Connection, changes: SessionChanges) -> Session:
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
    (exists,) = await fetch_one(connection, sql.SESSION_EXISTS, (changes.session_id,))
    if not exists:
        raise SessionNotFoundError(f"no session {changes.session_id!r}")
    raise StaleObjectError(f"session {changes.session_id!r} was written since it was read")


async def set_title(
    connection: Connection, session_id: str, title: str | None, stamp: str
) -> Session:
    row = await fetch_one(connection, sql.SET_TITLE, (title, stamp, session_id), binary=True)
    if row is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    return session_from_row(row)


# ---------------------------------------------------------------------------- the log


async def append(connection: Connection, prepared: PreparedAppend) -> AppendOutcome:
    """The checks in the order `Store._append` gives, in one statement in the common
    case; whatever it refuses leaves nothing written, since it is one statement."""
    events = prepared.events
    required = _unconfirmed_users(prepared.users_to_insert, prepared.required_user_ids)
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
            return AppendOutcome(
                applied=True,
                events=[replace(p.event, seq=first_seq + i) for i, p in enumerate(events)],
            )
        refused = await _refusal(connection, prepared, required)
        if refused is not None:
            return refused
    raise StoreError(f"the append to session {prepared.session_id!r} kept racing; try again")


async def _refusal(
    connection: Connection, prepared: PreparedAppend, required: list[str]
) -> AppendOutcome | None:
    """Why an append moved nothing: an error, a batch for another version, or None when
    nothing is wrong any more (it raced a session or a user being created)."""
    version, missing = await fetch_one(
        connection,
        sql.APPEND_REFUSAL,
        {"session_id": prepared.session_id, "required_users": required},
    )
    if version is None:
        raise SessionNotFoundError(f"no session {prepared.session_id!r}")
    if missing:
        raise _unknown_users(missing)
    if prepared.expected_version is not None and version != prepared.expected_version:
        return AppendOutcome(applied=False)
    return None


async def _stored_id_outcome(
    connection: Connection, prepared: PreparedAppend
) -> AppendOutcome | None:
    """An event id is stored already. A single append retried in its own log answers
    the stored event and writes nothing; any other clash is `EventIdConflictError`.
    None when the stored event is gone by now."""
    ids = [p.event.id for p in prepared.events]
    rows = await fetch_all(connection, sql.EVENTS_WITH_IDS, (ids,), binary=True)
    if not rows:
        return None
    stored = {event.id: event for event in map(event_from_row, rows)}
    clash = next(stored[event_id] for event_id in ids if event_id in stored)
    if prepared.expected_version is None and clash.session_id == prepared.session_id:
        return AppendOutcome(applied=False, events=[clash])
    where = "" if clash.session_id == prepared.session_id else " by another session"
    raise EventIdConflictError(f"event id {clash.id!r} is already used{where}")


def _conditions(event_filter: EventFilter) -> tuple[bool, ...]:
    """Which of `statements.EVENT_CONDITIONS` the filter sets."""
    return tuple(
        event_filter.exclude_synthetic
        if name == "exclude_synthetic"
        else getattr(event_filter, name) is not None
        for name, _ in sql.EVENT_CONDITIONS
    )


def _bounded(value: int | None) -> int | None:
    return None if value is None else min(value, _MAX_INTEGER)


def _read_parameters(session_id: str, f: EventFilter) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "types": None if f.types is None else list(f.types),
        "roles": None if f.roles is None else [str(role) for role in f.roles],
        "lineage": None if f.branch is None else list(branch_lineage(f.branch)),
        "since": f.since,
        "until": f.until,
        "text": f.text,
        "after_seq": _bounded(f.after_seq),
        "limit": _bounded(f.limit),
        "last": _bounded(f.last),
    }


async def read_events(
    connection: Connection, session_id: str, event_filter: EventFilter, collation: str | None
) -> list[Event]:
    """What `filters.apply_filter` answers over the log, computed in one statement;
    over the active view when the filter asks for it and the log has a compaction."""
    statement = sql.events_sql(
        "forward" if event_filter.last is None else "last",
        _conditions(event_filter),
        collation,
        event_filter.active_view,
    )
    rows = await fetch_all(
        connection, statement, _read_parameters(session_id, event_filter), binary=True
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
