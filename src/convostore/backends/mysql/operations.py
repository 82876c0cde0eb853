"""What each store operation does on one connection: plain async functions.

A ``write_`` function runs inside `convostore.backends.sql.aio.in_transaction` (one READ
COMMITTED transaction, retried on a deadlock); a ``read_`` function of several statements
runs inside `connection.in_snapshot` where it needs one snapshot. Each is all of one
primitive of `convostore.backends.interface.Backend`; what its statements found is
decided by `convostore.backends.sql.decisions`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Final

from asyncmy import errors

from convostore._time import to_micros
from convostore.backends.mysql import statements as sql
from convostore.backends.mysql.connection import DRIVER, ER_DUP_ENTRY, Connection, error_code
from convostore.backends.mysql.rows import event_from_row, event_row, new_session_row
from convostore.backends.mysql.schema import VALUE_PREFIX_LENGTH
from convostore.backends.sql import decisions
from convostore.backends.sql.aio import RollbackAndReturn
from convostore.backends.sql.event_cache import EventCache
from convostore.backends.sql.rows import user_values
from convostore.backends.sql.values import json_list
from convostore.errors import InvalidArgumentError
from convostore.filters import (
    EventFilter,
    apply_filter,
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
    "write_update_session",
]


fetch_one = DRIVER.fetch_one
fetch_all = DRIVER.fetch_all
execute = DRIVER.execute
_execute_many = DRIVER.execute_many


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


# ---------------------------------------------------------------------------- writes


async def _session_exists(connection: Connection, session_id: str) -> bool:
    (count,) = await fetch_one(connection, sql.STATEMENTS.session_exists, {"id": session_id})
    return int(count) > 0


async def _require_users(
    connection: Connection, users: tuple[User, ...], required: tuple[str, ...]
) -> None:
    wanted = decisions.unconfirmed_users(users, required)
    if not wanted:
        return
    rows = await fetch_all(connection, sql.MISSING_USERS, (json_list(wanted),))
    found_missing = {row[0] for row in rows}
    missing = [user_id for user_id in wanted if user_id in found_missing]
    if missing:
        raise decisions.unknown_users(missing)


async def _insert_users(connection: Connection, users: tuple[User, ...]) -> None:
    """Insert the users that are not stored; a stored user is never overwritten."""
    if users:
        await _execute_many(
            connection, sql.INSERT_USER_IF_ABSENT, [user_values(user) for user in users]
        )


async def _share_indexed_keys(connection: Connection) -> None:
    """Taken first in a write that indexes metadata, before any row lock a key add's
    backfill could wait on (see `convostore.backends.sql.statements`)."""
    await fetch_all(connection, sql.SHARE_INDEXED_KEYS)


async def _index_metadata(
    connection: Connection, session_id: str, candidates: tuple[tuple[str, str], ...]
) -> None:
    """Index the candidate entries whose key the database indexes now (read after
    `_share_indexed_keys`, which the transaction holds)."""
    if not candidates:
        return
    indexed = await fetch_all(connection, sql.STATEMENTS.select_indexed_keys)
    entries = decisions.kept_entries(candidates, (str(row[0]) for row in indexed))
    if entries:
        await _execute_many(
            connection,
            sql.INSERT_METADATA_ENTRY,
            [(session_id, name, value[:VALUE_PREFIX_LENGTH], value) for name, value in entries],
        )


async def write_insert_session(
    connection: Connection, new: NewSession, if_absent: bool, limit: int
) -> Session | None:
    session = new.session
    row = new_session_row(new)
    check_size(row, limit, "the session")
    if new.indexed_metadata:
        await _share_indexed_keys(connection)
    if await _session_exists(connection, session.id):
        decisions.refuse_existing(session, if_absent)
        return None
    await _require_users(connection, new.users_to_insert, new.required_user_ids)
    if session.part_of is not None:
        decisions.check_parent(
            session, await fetch_one(connection, sql.SELECT_PARENT, (session.part_of,))
        )
    await _insert_users(connection, new.users_to_insert)
    try:
        await execute(connection, sql.INSERT_SESSION, row)
    except errors.IntegrityError as error:
        # Inserted by another transaction since the look above: sessions have one key.
        if error_code(error) != ER_DUP_ENTRY:
            raise
        if if_absent:
            raise RollbackAndReturn(None) from error
        decisions.refuse_existing(session, if_absent)
    await _index_metadata(connection, session.id, new.indexed_metadata)
    return session


async def write_find_or_insert_part(connection: Connection, new: NewSession, limit: int) -> Session:
    """Under the parent's row lock no other part can appear between the look and the
    insert, so every caller settles on the earliest part."""
    if new.indexed_metadata:
        await _share_indexed_keys(connection)
    parent = await fetch_one(connection, sql.LOCK_PARENT, (new.session.part_of,))
    new = owned_by_parent(new, parent)
    session = new.session
    found = await fetch_one(
        connection,
        sql.STATEMENTS.find_part,
        {"part_of": session.part_of, "held_with": session.held_with},
    )
    if found is not None:
        return sql.DIALECT.rows.session(found)
    inserted = await write_insert_session(connection, new, False, limit)
    assert inserted is not None  # Absent, or the look above would have found it.
    return inserted


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
    # Always: the old metadata's entries go, and a key add must not backfill them meanwhile.
    await _share_indexed_keys(connection)
    if not await execute(connection, sql.UPDATE_SESSION, parameters):
        exists = await _session_exists(connection, changes.session_id)
        raise decisions.stale_or_missing(changes.session_id, exists)
    await execute(connection, sql.DELETE_METADATA_ENTRIES, (changes.session_id,))
    await _index_metadata(connection, changes.session_id, changes.indexed_metadata)
    row = await fetch_one(connection, sql.STATEMENTS.select_session, {"id": changes.session_id})
    return sql.DIALECT.rows.session(row)


async def write_delete_expired(connection: Connection, before: int) -> int:
    """Delete the sessions expired at ``before`` (microseconds), each only if it still
    is; a part of an expired parent goes with its parent and is not counted. (MySQL
    refuses a DELETE whose subquery reads the table it deletes from.)"""
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
        raise decisions.missing_session(append.session_id)
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
        ids = json_list(prepared.event.id for prepared in append.events)
        stored = await fetch_all(connection, sql.EVENTS_WITH_IDS, (ids,))
        if not stored:
            raise  # Not an id clash: the driver's error is raised.
        outcome = decisions.replay_or_conflict(append, list(map(event_from_row, stored)))
        raise RollbackAndReturn(outcome) from error
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


# ---------------------------------------------------------------------------- reads

_CONDITION_NAMES = tuple(name for name, _ in sql.EVENT_CONDITIONS)
READER = sql.DIALECT.rows


def _parameters(session_id: str, f: EventFilter) -> dict[str, Any]:
    parameters = decisions.read_parameters(sql.DIALECT, session_id, f)
    # The text filter searches the content folded as Python folds it (see `statements`).
    if f.text is not None:
        parameters["text"] = f.text.lower()
    return parameters


async def read_events(
    connection: Connection, cache: EventCache, session_id: str, event_filter: EventFilter
) -> list[Event]:
    """What `filters.apply_filter` answers over the log; over the active view when the
    filter asks for it and the log has a compaction. Rows read before come from
    ``cache`` rather than being decoded again."""
    if event_filter.active_view:
        boundary = await fetch_one(connection, sql.NEWEST_COMPACTION, (session_id,))
        if boundary is not None:
            return await _read_active_view(
                connection, cache, cache.event(boundary, READER), event_filter
            )
    conditions = decisions.event_conditions(_CONDITION_NAMES, event_filter)
    parameters = _parameters(session_id, event_filter)
    if event_filter.last is None:
        rows = await fetch_all(connection, sql.events_sql("forward", conditions), parameters)
        return [cache.event(row, READER) for row in rows]
    newest = await fetch_all(connection, sql.events_sql("newest", conditions), parameters)
    window = [cache.event(row, READER) for row in reversed(newest)]
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
    return [cache.event(row, READER) for row in rows] + window


async def _read_active_view(
    connection: Connection, cache: EventCache, boundary: Event, event_filter: EventFilter
) -> list[Event]:
    """The newest compaction's view, composed and filtered as `filters.active_view`
    has it, from the events it kept and every event after it."""
    session_id = boundary.session_id
    rows = await fetch_all(connection, sql.EVENTS_AFTER, (session_id, boundary.seq))
    after = [cache.event(row, READER) for row in rows]
    kept_ids, summaries = compaction_parts(boundary, after)
    kept: list[Event] = []
    if kept_ids:
        unique_ids = json_list(dict.fromkeys(kept_ids))
        rows = await fetch_all(connection, sql.KEPT_EVENTS, (unique_ids, session_id, boundary.seq))
        kept = sorted((cache.event(row, READER) for row in rows), key=lambda event: event.seq)
    return apply_filter(compose_view(kept, summaries, after), event_filter)
