"""MySQL's change feed for the shared vector cache (`convostore.backends.sql.vector_cache`):
positions in commit order, taken under one row lock as the last step of each write.

**Why not an AUTO_INCREMENT.** InnoDB hands out AUTO_INCREMENT values when a row is
inserted, not when its transaction commits: a transaction holding id 7 may commit after
another's id 8, and a cache that read "everything up to 8" would never look at 7 again.

**Positions in commit order.** ``vector_feed`` has one row, holding the last position
handed out. Every write that adds, changes or removes a vector ends with `record`: it
raises that position by one (an UPDATE, so the row stays locked by the transaction
until it commits or rolls back), then writes its changes to ``vector_changes`` under
that position, and commits. Those statements are the write's last, and none of them
waits for another lock (each transaction's changes have a position of their own), so:

- two transactions never hold the lock at once: the one that takes position p + 1 waited
  for the holder of p to commit (or roll back, which gives the position back);
- so positions are handed out and committed in one order, and every transaction with a
  position below p committed before p was taken.

A read snapshot that sees the feed at position P therefore sees every change at a
position up to P and none above it: exactly what the cache needs to apply changes
"after the last position it holds". The lock orders only the last step (two small
statements) of the writes that touch vectors; appends without vectors never take it.
Lock order: a write takes its sessions' rows first and the feed's row last, and the
holder of the feed's row waits for nothing, so the feed adds no deadlock.

**What is recorded.** An append or a re-embedding records the ``row_id`` of each event
whose vector it wrote; a deleted or expired session records its id (its parts and
their vectors go with it: the cache forgets the parts it knows of each session named).
The feed keeps the last `KEPT` positions: every `PRUNE_EVERY`-th position deletes the
older ones and records the position pruned through; a cache behind it rebuilds.

`MySQLFeed` answers the cache's requests on one connection, inside a read snapshot
(`convostore.backends.mysql.connection.snapshot`). `FeedVectors` is how a store keeps and
searches its vectors where the server has no graph of its own (see `native_vectors`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

from convostore.backends import spi
from convostore.backends.mysql import statements as sql
from convostore.backends.mysql.connection import (
    DRIVER,
    Connection,
    execute,
    fetch_all,
    fetch_one,
    snapshot,
)
from convostore.backends.mysql.url import MySQLTarget
from convostore.backends.sql import search as steps
from convostore.backends.sql.aio import drive
from convostore.backends.sql.values import json_list
from convostore.backends.sql.vector_cache import (
    Changes,
    Feed,
    Position,
    Rowids,
    SessionRow,
    VectorCache,
    VectorRow,
    key_parameters,
)
from convostore.model import SearchHit

__all__ = [
    "KEPT",
    "PRUNE_EVERY",
    "FeedVectors",
    "MySQLFeed",
    "record",
    "scan",
]

KEPT: Final = 65_536
PRUNE_EVERY: Final = 1024

# LAST_INSERT_ID(expr) hands the new position back in the statement's reply.
TAKE_POSITION: Final = "UPDATE vector_feed SET position = LAST_INSERT_ID(position + 1) WHERE id = 1"
PRUNE: Final = "DELETE FROM vector_changes WHERE position <= %s"
RECORD_PRUNED: Final = "UPDATE vector_feed SET pruned = %s WHERE id = 1"
_STRINGS = sql.DIALECT.strings_table
RECORD_ROWS_OF: Final = (
    "INSERT IGNORE INTO vector_changes (position, row_id, session_id)"
    " SELECT %s, e.row_id, '' FROM "
    + _STRINGS("%s", "wanted")
    + " JOIN events e ON e.id = wanted.value"
)
RECORD_SESSIONS: Final = (
    "INSERT IGNORE INTO vector_changes (position, row_id, session_id)"
    " SELECT %s, 0, wanted.value FROM " + _STRINGS("%s", "wanted")
)

SNAPSHOT_POSITION: Final = "SELECT 0, position, pruned FROM vector_feed WHERE id = 1"
CHANGES_AFTER: Final = "SELECT DISTINCT row_id, session_id FROM vector_changes WHERE position > %s"
_QUALIFIES = " e.type = 'MESSAGE' AND e.embedding IS NOT NULL AND length(e.embedding) = %(width)s"
_COLUMNS = "SELECT e.row_id, e.embedding, e.session_id, e.role FROM "


def _by_model(head: str, tail: str = "") -> dict[bool, str]:
    """The vectors that qualify, of any model (False) or of the request's (True)."""
    by_model = " AND e.embedding_model = %(model)s"
    return {False: head + _QUALIFIES + tail, True: head + _QUALIFIES + by_model + tail}


COUNT_VECTORS: Final = _by_model("SELECT count(*) FROM events e WHERE")
VECTORS_AFTER: Final = _by_model(
    _COLUMNS + "events e WHERE", " AND e.row_id > %(after)s ORDER BY e.row_id LIMIT %(limit)s"
)
VECTORS_OF_ROWS: Final = _by_model(
    _COLUMNS
    + sql.DIALECT.integers_table("%(rowids)s", "wanted")
    + " JOIN events e ON e.row_id = wanted.value WHERE"
)
VECTORS_OF_SESSIONS: Final = _by_model(
    _COLUMNS
    + _STRINGS("%(sessions)s", "wanted")
    + " JOIN sessions s ON s.id = wanted.value OR s.part_of = wanted.value"
    " JOIN events e ON e.session_id = s.id WHERE"
)
SESSIONS: Final = (
    "SELECT s.id, s.owner_id, s.part_of FROM "
    + _STRINGS("%s", "wanted")
    + " JOIN sessions s ON s.id = wanted.value"
)
DELETE_SESSION: Final = "DELETE FROM sessions WHERE id = %s"


# ---------------------------------------------------------------------------- writing


async def record(
    connection: Connection, message_ids: Sequence[str] = (), sessions: Sequence[str] = ()
) -> None:
    """The last step of a write (see the module): take the next position and record the
    rows of ``message_ids`` and the deleted ``sessions`` under it."""
    async with connection.cursor() as cursor:
        await cursor.execute(TAKE_POSITION)
        position = int(cursor.lastrowid)
    if message_ids:
        await execute(connection, RECORD_ROWS_OF, (position, json_list(message_ids)))
    if sessions:
        await execute(connection, RECORD_SESSIONS, (position, json_list(sessions)))
    if position % PRUNE_EVERY == 0 and position > KEPT:
        await execute(connection, PRUNE, (position - KEPT,))
        await execute(connection, RECORD_PRUNED, (position - KEPT,))


# ---------------------------------------------------------------------------- reading


class MySQLFeed(Feed):
    """The answers to the cache's requests, read on ``connection`` (in its snapshot)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    async def position(self) -> Position:
        return Position(*map(int, await fetch_one(self.connection, SNAPSHOT_POSITION)))

    async def changes_after(self, change: int) -> Changes:
        found = await fetch_all(self.connection, CHANGES_AFTER, (change,))
        rowids = sorted({int(row[0]) for row in found if row[1] == ""})
        return Changes(rowids, sorted({row[1] for row in found if row[1] != ""}))

    async def sessions_of(self, ids: list[str]) -> list[SessionRow]:
        return await fetch_all(self.connection, SESSIONS, (json_list(ids),))

    async def count_vectors(self, model: str | None, width: int) -> int:
        statement = COUNT_VECTORS[model is not None]
        return int((await fetch_one(self.connection, statement, key_parameters(model, width)))[0])

    async def vectors_after(
        self, model: str | None, width: int, after: int, limit: int
    ) -> list[VectorRow]:
        parameters = key_parameters(model, width) | {"after": after, "limit": limit}
        return _rows(await fetch_all(self.connection, VECTORS_AFTER[model is not None], parameters))

    async def vectors_of(
        self, model: str | None, width: int, rowids: list[int], sessions: list[str]
    ) -> list[VectorRow]:
        by_model, parameters = model is not None, key_parameters(model, width)
        rows: list[Any] = []
        if rowids:
            parameters["rowids"] = json.dumps(rowids)
            rows += await fetch_all(self.connection, VECTORS_OF_ROWS[by_model], parameters)
        if sessions:
            parameters["sessions"] = json_list(sessions)
            rows += await fetch_all(self.connection, VECTORS_OF_SESSIONS[by_model], parameters)
        return _rows(sorted({int(row[0]): row for row in rows}.values(), key=_row_id))


def _row_id(row: Sequence[Any]) -> int:
    return int(row[0])


def _rows(rows: Iterable[Sequence[Any]]) -> list[VectorRow]:
    return [(int(row[0]), bytes(row[1]), row[2], row[3]) for row in rows]


# ---------------------------------------------------------------------------- a store's vectors

# How a store opens a connection of its pool, for the work a declaration starts.
Connect = Callable[[], AbstractAsyncContextManager[Connection]]


class FeedVectors:
    """How a store keeps and searches vectors where the server has no graph of its own
    (`native_vectors.GraphVectors` where it has): each write that touches a vector ends
    with its change recorded in the feed (`record`); a search shortlists the rows through
    ``cache``, brought to its read snapshot through the feed, or scans them all where the
    URL's ``vector_search`` is ``scan`` (``cache`` None). Each write runs in the caller's
    transaction."""

    # Whether searches walk MariaDB's graph.
    native = False

    def __init__(self, target: MySQLTarget) -> None:
        self.cache = VectorCache() if target.vector_search != "scan" else None

    async def append(
        self, connection: Connection, prepared: spi.PreparedAppend, write: Callable[..., Any]
    ) -> spi.AppendOutcome:
        """``write(connection, prepared)``, then the vectors it added kept."""
        outcome: spi.AppendOutcome = await write(connection, prepared)
        if outcome.applied and (ids := prepared.embedded_message_ids):
            await self._added(connection, ids)
        return outcome

    async def set_embeddings(
        self, connection: Connection, ids: Sequence[str], write: Callable[..., Any], *args: Any
    ) -> None:
        """``write(connection, *args)``, which sets the vectors of ``ids``, then kept."""
        await write(connection, *args)
        if ids:
            await self._changed(connection, ids)

    async def delete_session(self, connection: Connection, session_id: str) -> bool:
        """Delete one session (its events and parts cascade), then record it."""
        deleted = await self._delete(connection, session_id)
        if deleted:
            await record(connection, sessions=[session_id])
        return deleted

    async def delete_expired(self, connection: Connection, before: int) -> int:
        """Delete the sessions expired at ``before`` (microseconds), each only if it still
        is (its parts go with it), then record those deleted."""
        deleted: list[str] = []
        for (session_id,) in await fetch_all(connection, sql.EXPIRED_SESSIONS, (before, before)):
            if await execute(connection, sql.DELETE_IF_EXPIRED, (session_id, before)):
                deleted.append(session_id)
        if deleted:
            await record(connection, sessions=deleted)
        return len(deleted)

    async def _added(self, connection: Connection, ids: Sequence[str]) -> None:
        await record(connection, message_ids=ids)

    async def _changed(self, connection: Connection, ids: Sequence[str]) -> None:
        await record(connection, message_ids=ids)

    async def _delete(self, connection: Connection, session_id: str) -> bool:
        return await execute(connection, DELETE_SESSION, (session_id,)) > 0

    async def declared(self, connect: Connect, *, replace: bool, reembedding: bool) -> None:
        """After a vector index was declared (``replace``: anew; ``reembedding``: before
        a re-embedding run): nothing is built here."""

    async def search(self, connection: Connection, query: spi.VectorQuery) -> list[SearchHit]:
        """The hits of ``query``, in one read snapshot."""
        cache, shortlisted = self.cache, None
        async with contextlib.AsyncExitStack() as turn:
            # The cache's turn is taken before the snapshot begins, so the snapshot is
            # never older than the cache; it is given back once the rows are shortlisted.
            if cache is not None:
                await turn.enter_async_context(cache.turn())
            async with snapshot(connection):
                if cache is not None:
                    shortlisted = await cache.shortlisted_async(MySQLFeed(connection), query)
                    await turn.aclose()
                return await scan(connection, query, shortlisted)

    def clear(self) -> None:
        """Forget what is kept in memory (the store closes)."""
        if self.cache is not None:
            self.cache.clear()


async def scan(
    connection: Connection, query: spi.VectorQuery, shortlisted: Rowids | None = None
) -> list[SearchHit]:
    """The exact search (`convostore.backends.sql.search`) of every vector in scope, or
    of the ``shortlisted`` rows only."""
    scope = query.scope.owner_id, query.scope.session_id, query.scope.roles
    search = steps.vector_search(
        sql.SEARCH, query.vector, query.metric, query.model, query.k, scope, shortlisted
    )
    return await drive(DRIVER, connection, search)
