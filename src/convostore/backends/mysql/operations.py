"""What each store operation does on one connection: plain async functions.

A ``write_`` function runs inside `connection.in_transaction` (one READ COMMITTED
transaction, retried on a deadlock); a ``read_`` function of several statements runs
inside `connection.in_snapshot` where it needs one snapshot. Each is all of one
primitive of `convostore.store.Store`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Final

from asyncmy import errors

from convostore._time import to_micros
from convostore.backends.mysql import statements as sql
from convostore.backends.mysql.connection import (
    ER_DUP_ENTRY,
    Connection,
    RollbackAndReturn,
    error_code,
)
from convostore.backends.mysql.rows import (
    event_from_row,
    event_row,
    new_session_row,
    session_from_row,
    user_values,
)
from convostore.backends.mysql.schema import VALUE_PREFIX_LENGTH
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
    is_turn_start,
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
    "check_size",
    "execute",
    "fetch_all",
    "fetch_one",
    "json_list",
    "read_events",
    "write_append",
    "write_delete_expired",
    "write_find_or_insert_part",
    "write_insert_session",
    "write_set_title",
    "write_update_session",
]

# MySQL's LIMIT takes an unsigned 64-bit count; a window bound beyond it bounds nothing.
_NO_LIMIT: Final = 2**64 - 1
_MAX_BOUND: Final = 2**63 - 1

_encode_strings = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def json_list(values: Iterable[str]) -> str:
    """Ids, types, roles or branches bound as one JSON parameter."""
    return _encode_strings(list(values))


async def fetch_one(connection: Connection, statement: str, parameters: Any = None) -> Any:
    async with connection.cursor() as cursor:
        await cursor.execute(statement, parameters)
        return await cursor.fetchone()


async def fetch_all(connection: Connection, statement: str, parameters: Any = None) -> list[Any]:
    async with connection.cursor() as cursor:
        await cursor.execute(statement, parameters)
        return list(await cursor.fetchall())


async def execute(connection: Connection, statement: str, parameters: Any = None) -> int:
    """Run the statement; how many rows it changed itself (not its cascades)."""
    async with connection.cursor() as cursor:
        return await cursor.execute(statement, parameters)


# What a statement's text costs beyond its values, with room to spare.
_STATEMENT_MARGIN: Final = 64 * 1024


def check_size(parameters: Iterable[Any], limit: int, what: str) -> None:
    """`InvalidArgumentError` for values that make a statement larger than the server
    accepts (its ``max_allowed_packet``), which it would answer by dropping the
    connection. Text is counted at four bytes a character, and exactly only then."""
    texts = [value for value in parameters if isinstance(value, str | bytes)]
    room = limit - _STATEMENT_MARGIN
    if sum(map(len, texts)) * 4 <= room:
        return
    # Escaping may double a byte: quotes and backslashes.
    size = sum(2 * len(t.encode() if isinstance(t, str) else t) for t in texts)
    if size > room:
        raise InvalidArgumentError(
            f"{what} is too large for this server: about {size} bytes, and its "
            f"max_allowed_packet is {limit}"
        )


async def _execute_many(connection: Connection, statement: str, rows: list[Any]) -> None:
    async with connection.cursor() as cursor:
        await cursor.executemany(statement, rows)


# ---------------------------------------------------------------------------- writes


def _unconfirmed_users(users: tuple[User, ...], required: tuple[str, ...]) -> list[str]:
    """The required ids not given as a `User` in the same call: those must be stored."""
    given = {user.id for user in users}
    return [user_id for user_id in required if user_id not in given]


async def _require_users(
    connection: Connection, users: tuple[User, ...], required: tuple[str, ...]
) -> None:
    wanted = _unconfirmed_users(users, required)
    if not wanted:
        return
    rows = await fetch_all(connection, sql.MISSING_USERS, (json_list(wanted),))
    found_missing = {row[0] for row in rows}
    missing = [user_id for user_id in wanted if user_id in found_missing]
    if missing:
        raise UnknownUserError(f"unknown user id(s): {', '.join(map(repr, missing))}")


async def _insert_users(connection: Connection, users: tuple[User, ...]) -> None:
    """Insert the users that are not stored; a stored user is never overwritten."""
    if users:
        await _execute_many(
            connection, sql.INSERT_USER_IF_ABSENT, [user_values(user) for user in users]
        )


async def _index_metadata(
    connection: Connection, session_id: str, pairs: tuple[tuple[str, str], ...]
) -> None:
    if pairs:
        await _execute_many(
            connection,
            sql.INSERT_METADATA_ENTRY,
            [(session_id, name, value[:VALUE_PREFIX_LENGTH], value) for name, value in pairs],
        )


async def write_insert_session(
    connection: Connection, new: NewSession, if_absent: bool, limit: int
) -> Session | None:
    session = new.session
    row = new_session_row(new)
    check_size(row, limit, "the session")
    if await fetch_one(connection, sql.SESSION_EXISTS, (session.id,)) is not None:
        if if_absent:
            return None
        raise SessionExistsError(f"session {session.id!r} already exists")
    await _require_users(connection, new.users_to_insert, new.required_user_ids)
    if session.part_of is not None:
        parent = await fetch_one(connection, sql.SELECT_PARENT, (session.part_of,))
        if parent is None:
            raise SessionNotFoundError(f"part_of names no session: {session.part_of!r}")
        parent_owner, parent_part_of = parent
        if parent_part_of is not None:
            raise InvalidArgumentError("part_of must name a top-level session")
        if parent_owner != session.owner_id:
            raise InvalidArgumentError("part_of must name a session with the same owner")
    await _insert_users(connection, new.users_to_insert)
    try:
        await execute(connection, sql.INSERT_SESSION, row)
    except errors.IntegrityError as error:
        # Inserted by another transaction since the look above: sessions have one key.
        if error_code(error) != ER_DUP_ENTRY:
            raise
        if if_absent:
            raise RollbackAndReturn(None) from error
        raise SessionExistsError(f"session {session.id!r} already exists") from error
    await _index_metadata(connection, session.id, new.indexed_metadata)
    return session


async def write_find_or_insert_part(connection: Connection, new: NewSession, limit: int) -> Session:
    """Under the parent's row lock no other part can appear between the look and the
    insert, so every caller settles on the earliest part."""
    parent = await fetch_one(connection, sql.LOCK_PARENT, (new.session.part_of,))
    new = owned_by_parent(new, parent)
    session = new.session
    found = await fetch_one(connection, sql.FIND_PART, (session.part_of, session.held_with))
    if found is not None:
        return session_from_row(found)
    inserted = await write_insert_session(connection, new, False, limit)
    assert inserted is not None  # Absent, or the look above would have found it.
    return inserted


async def _stored_session(connection: Connection, session_id: str) -> Session:
    row = await fetch_one(connection, sql.SELECT_SESSION, (session_id,))
    return session_from_row(row)


async def write_update_session(
    connection: Connection, changes: SessionChanges, limit: int
) -> Session:
    parameters = (
        changes.title,
        changes.metadata_json,
        None if changes.expires_at is None else to_micros(changes.expires_at),
        changes.new_stamp,
        changes.session_id,
        changes.expected_stamp,
    )
    check_size(parameters, limit, "the session")
    changed = await execute(connection, sql.UPDATE_SESSION, parameters)
    if not changed:
        if await fetch_one(connection, sql.SESSION_EXISTS, (changes.session_id,)) is None:
            raise SessionNotFoundError(f"no session {changes.session_id!r}")
        raise StaleObjectError(f"session {changes.session_id!r} was written since it was read")
    await execute(connection, sql.DELETE_METADATA_ENTRIES, (changes.session_id,))
    await _index_metadata(connection, changes.session_id, changes.indexed_metadata)
    return await _stored_session(connection, changes.session_id)


async def write_set_title(
    connection: Connection, session_id: str, title: str | None, stamp: str
) -> Session:
    # The stamp always changes, so a session that exists is always a changed row.
    if not await execute(connection, sql.SET_TITLE, (title, stamp, session_id)):
        raise SessionNotFoundError(f"no session {session_id!r}")
    return await _stored_session(connection, session_id)


async def write_delete_expired(connection: Connection, before: int) -> int:
    """Delete the sessions expired at ``before`` (microseconds), each only if it still
    is; a part of an expired parent goes with its parent and is not counted."""
    rows = await fetch_all(connection, sql.EXPIRED_SESSIONS, (before, before))
    deleted = 0
    for (session_id,) in rows:
        deleted += await execute(connection, sql.DELETE_IF_EXPIRED, (session_id, before))
    return deleted


async def write_append(connection: Connection, append: PreparedAppend, limit: int) -> AppendOutcome:
    """The checks in the order `Store._append` gives, under the session's row lock:
    the version check and the new ``seq`` values cannot race another append."""
    events = append.events
    locked = await fetch_one(connection, sql.LOCK_SESSION, (append.session_id,))
    if locked is None:
        raise SessionNotFoundError(f"no session {append.session_id!r}")
    version, last_seq = locked
    await _require_users(connection, append.users_to_insert, append.required_user_ids)
    if append.expected_version is not None and version != append.expected_version:
        raise RollbackAndReturn(AppendOutcome(applied=False))
    await _insert_users(connection, append.users_to_insert)
    first_seq = last_seq + 1
    statement = sql.INSERT_EVENTS + ", ".join(sql.EVENT_ROW for _ in events)
    parameters = [value for i, p in enumerate(events) for value in event_row(p, first_seq + i)]
    check_size(parameters, limit, "the append")
    try:
        await execute(connection, statement, parameters)
    except errors.IntegrityError as error:
        if error_code(error) != ER_DUP_ENTRY:
            raise
        await _raise_for_stored_id(connection, append)
        raise
    await execute(
        connection,
        sql.ADVANCE_SESSION,
        (
            last_seq + len(events),
            append.new_stamp,
            None if append.activity_at is None else to_micros(append.activity_at),
            append.new_message_count,
            append.started_by,
            append.session_id,
        ),
    )
    return AppendOutcome(
        applied=True,
        events=[replace(p.event, seq=first_seq + i) for i, p in enumerate(events)],
    )


async def _raise_for_stored_id(connection: Connection, append: PreparedAppend) -> None:
    """An event id is stored already. A single append retried in its own log answers
    the stored event and writes nothing; any other clash is `EventIdConflictError`."""
    ids = [prepared.event.id for prepared in append.events]
    stored = {
        event.id: event
        for event in map(
            event_from_row, await fetch_all(connection, sql.EVENTS_WITH_IDS, (json_list(ids),))
        )
    }
    clash = next((stored[event_id] for event_id in ids if event_id in stored), None)
    if clash is None:
        return  # Not an id clash: the driver's error is raised.
    if append.expected_version is None and clash.session_id == append.session_id:
        raise RollbackAndReturn(AppendOutcome(applied=False, events=[clash]))
    where = "" if clash.session_id == append.session_id else " by another session"
    raise EventIdConflictError(f"event id {clash.id!r} is already used{where}")


# ---------------------------------------------------------------------------- reads


def _conditions(event_filter: EventFilter) -> tuple[bool, ...]:
    """Which of `statements.EVENT_CONDITIONS` the filter sets."""
    return tuple(
        event_filter.exclude_synthetic
        if name == "exclude_synthetic"
        else getattr(event_filter, name) is not None
        for name, _ in sql.EVENT_CONDITIONS
    )


def _bounded(value: int) -> int:
    return min(value, _MAX_BOUND)


def _parameters(session_id: str, f: EventFilter) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "types": None if f.types is None else json_list(f.types),
        "roles": None if f.roles is None else json_list(str(role) for role in f.roles),
        "lineage": None if f.branch is None else json_list(branch_lineage(f.branch)),
        "since": None if f.since is None else to_micros(f.since),
        "until": None if f.until is None else to_micros(f.until),
        "text": None if f.text is None else f.text.lower(),
        "after_seq": None if f.after_seq is None else _bounded(f.after_seq),
        "limit": _NO_LIMIT if f.limit is None else min(f.limit, _NO_LIMIT),
        "last": None if f.last is None else min(f.last, _NO_LIMIT),
    }


async def read_events(
    connection: Connection, session_id: str, event_filter: EventFilter
) -> list[Event]:
    """What `filters.apply_filter` answers over the log; over the active view when the
    filter asks for it and the log has a compaction."""
    if event_filter.active_view:
        boundary = await fetch_one(connection, sql.NEWEST_COMPACTION, (session_id,))
        if boundary is not None:
            return await _read_active_view(connection, event_from_row(boundary), event_filter)
    conditions = _conditions(event_filter)
    parameters = _parameters(session_id, event_filter)
    if event_filter.last is None:
        rows = await fetch_all(connection, sql.events_sql("forward", conditions), parameters)
        return [event_from_row(row) for row in rows]
    newest = await fetch_all(connection, sql.events_sql("newest", conditions), parameters)
    window = [event_from_row(row) for row in reversed(newest)]
    if (
        not window
        or len(window) < event_filter.last  # The window holds every match already.
        or is_turn_start(window[0])
        or not event_filter.can_match_turn_start
    ):
        return window
    parameters["before"] = window[0].seq
    start = await fetch_one(connection, sql.events_sql("turn_start", conditions), parameters)
    if start is None:
        return window
    parameters["from_seq"] = start[0]
    rows = await fetch_all(connection, sql.events_sql("between", conditions), parameters)
    return [event_from_row(row) for row in rows] + window


def needs_snapshot(event_filter: EventFilter) -> bool:
    """Whether `read_events` needs one snapshot for its statements: for the active view,
    whose boundary and later events must agree. A window of the last n events does
    not: its extension reads only positions before the window, which appends (at the
    end of the log) never change."""
    return event_filter.active_view


async def _read_active_view(
    connection: Connection, boundary: Event, event_filter: EventFilter
) -> list[Event]:
    """The newest compaction's view, composed and filtered as `filters.active_view`
    has it, from the events it kept and every event after it."""
    session_id = boundary.session_id
    rows = await fetch_all(connection, sql.EVENTS_AFTER, (session_id, boundary.seq))
    after = [event_from_row(row) for row in rows]
    kept_ids, summaries = compaction_parts(boundary, after)
    kept: list[Event] = []
    if kept_ids:
        unique_ids = json_list(dict.fromkeys(kept_ids))
        rows = await fetch_all(connection, sql.KEPT_EVENTS, (unique_ids, session_id, boundary.seq))
        kept = sorted(map(event_from_row, rows), key=lambda event: event.seq)
    return apply_filter(compose_view(kept, summaries, after), event_filter)
