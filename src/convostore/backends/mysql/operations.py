"""What each store operation does on one connection: plain async functions.

A ``write_`` function runs inside `convostore.backends.sql.aio.in_transaction` (one READ
COMMITTED transaction, retried on a deadlock). Each is all of one primitive of
`convostore.backends.interface.Backend`; what its statements found is decided by
`convostore.backends.sql.decisions`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, Final

from convostore.backends.mysql import statements as sql
from convostore.backends.mysql.connection import DRIVER, Connection
from convostore.backends.sql import appends
from convostore.backends.sql.aio import drive
from convostore.backends.sql.values import json_list
from convostore.errors import InvalidArgumentError
from convostore.prepare import AppendOutcome, PreparedAppend

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
    """`convostore.backends.sql.appends.append`, its rows no larger than the server takes."""

    def check(rows: Sequence[Sequence[Any]]) -> None:
        check_size(itertools.chain.from_iterable(rows), limit, "the append")

    return await drive(DRIVER, connection, appends.append(sql.APPENDS, sql.WRITES, append, check))
