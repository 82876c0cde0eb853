"""What each store operation does on one connection: plain async functions.

A ``write_`` function runs inside `convostore.backends.sql.aio.in_transaction` (one READ
COMMITTED transaction, retried on a deadlock). Each is all of one primitive of
`convostore.backends.interface.Backend`; what its statements found is decided by
`convostore.backends.sql.decisions`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Final

from asyncmy import errors

from convostore._time import to_micros
from convostore.backends.mysql import statements as sql
from convostore.backends.mysql.connection import DRIVER, ER_DUP_ENTRY, Connection, error_code
from convostore.backends.mysql.rows import event_from_row, event_row
from convostore.backends.sql import decisions
from convostore.backends.sql.aio import RollbackAndReturn, drive
from convostore.backends.sql.values import json_list
from convostore.backends.sql.writes import insert_users, require_users
from convostore.errors import InvalidArgumentError
from convostore.prepare import (
    AppendOutcome,
    PreparedAppend,
)

__all__ = [
    "check_size",
    "execute",
    "fetch_all",
    "fetch_one",
    "json_list",
    "write_append",
    "write_delete_expired",
]


fetch_one = DRIVER.fetch_one
fetch_all = DRIVER.fetch_all
execute = DRIVER.execute


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
    required = append.users_to_insert, append.required_user_ids
    await drive(DRIVER, connection, require_users(sql.WRITES, *required))
    if append.expected_version is not None and version != append.expected_version:
        raise RollbackAndReturn(AppendOutcome(applied=False))
    await drive(DRIVER, connection, insert_users(sql.WRITES, append.users_to_insert))
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
