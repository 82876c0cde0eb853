"""MariaDB's own vector index (MariaDB 11.7 and newer), where the server has one.

The vectors stay where every server keeps them (``events.embedding``, a float32 blob).
Where the server has the ``VECTOR`` type, the vectors of the declared index's model and
width are copied into ``native_vectors``: ``VECTOR(width) NOT NULL`` with a ``VECTOR
INDEX`` (MariaDB's mhnsw graph) of the declared metric. ``native_vector_state`` records
which declaration the table was built for, once its backfill is complete, so a store
that connects after an interrupted build builds it again. Building runs at connect (and
after a re-embedding) under the migration lock.

Why a table of its own: a ``VECTOR INDEX`` column must be NOT NULL and of one width,
and most events carry no vector. Why no foreign key: InnoDB runs ``ON DELETE CASCADE``
below the server layer that keeps the graph, so a cascaded delete leaves the graph
pointing at missing rows, and a search that meets one ends early (tested on 11.8.9).
Every write that removes or changes a vector therefore removes or changes its row here
in the same transaction: appends, re-embeddings, deleted and expired sessions.

**No write is lost to a rebuild.** Each of those writes first holds the one row of
``native_vector_guard`` shared until it commits (`guard`); a build records its state,
then waits for that row exclusively (`settle`) before it copies every vector. A write
that began before the state was recorded (and so copied into the old table, or nothing)
has committed by then, and the copy sees it; a write that takes the guard after the
wait sees the new state and copies itself.

A search uses the index when it asks for the declared model, width and metric over all
messages or an owner's (a session's few vectors are scanned exactly). A scope (an
owner, roles) keeps the rows in it among the graph's `SCOPED_CANDIDATES` nearest per hit
asked for. The rows found are scored again from their stored vectors, exactly as a scan
scores them; fewer than k rows (a narrow scope, or a graph walk that ended early) fall
back to the exact scan.
Zero vectors have no direction (their cosine distance is NULL in MariaDB and 0 as a
similarity in convostore): they are left out of the graph, and a zero query is scanned.

`vectors_of` chooses at open how a store keeps and searches its vectors: `GraphVectors`
on a server with the graph, else `vector_feed.FeedVectors`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, Final, TypeVar

import numpy as np
from asyncmy import errors

from convostore._vectors import best, from_blobs, scores
from convostore.backends import spi
from convostore.backends.mysql import statements as sql
from convostore.backends.mysql import vector_feed
from convostore.backends.mysql.connection import (
    DRIVER,
    Connection,
    ServerFacts,
    error_code,
    execute,
    fetch_all,
    fetch_one,
    snapshot,
)
from convostore.backends.mysql.schema import migration_lock
from convostore.backends.mysql.url import MySQLTarget
from convostore.backends.sql import search as steps
from convostore.backends.sql.aio import drive
from convostore.backends.sql.embeddings import SELECT_VECTOR_INDEX
from convostore.model import SearchHit

__all__ = [
    "EF_SEARCH",
    "GRAPH_M",
    "NATIVE_SINCE",
    "GraphVectors",
    "build_graph",
    "create_table",
    "drop",
    "guard",
    "search",
    "settle",
    "vectors_of",
]

T = TypeVar("T")

log = logging.getLogger("convostore.mysql")

# The first MariaDB with VECTOR and VECTOR INDEX.
NATIVE_SINCE: Final = (11, 7)
# The defaults of a store's graph (`GraphVectors.graph_m` and ``ef_search``): neighbours
# per node (MariaDB's default is 6; more gives better recall for wide vectors at a
# slower build), and the candidates a search keeps while walking the graph (MariaDB's
# mhnsw_ef_search; the server keeps at least the LIMIT). See benchmarks/mariadb_vectors.py.
GRAPH_M: Final = 16
EF_SEARCH: Final = 100
# The MariaDB names of each metric: the index's DISTANCE and the function its ORDER BY
# must use for the index to serve it.
_DISTANCE: Final[dict[spi.Metric, str]] = {"cosine": "cosine", "euclidean": "euclidean"}
_DISTANCE_FUNCTION: Final[dict[spi.Metric, str]] = {
    "cosine": "VEC_DISTANCE_COSINE",
    "euclidean": "VEC_DISTANCE_EUCLIDEAN",
}
# A scoped search takes this many of the graph's nearest per hit asked for, then keeps
# those in scope. When k of them are, they are the scope's k nearest (as far as the
# graph finds its nearest); when fewer are, the scope is narrow, so its exact scan is
# small, and that answers instead.
SCOPED_CANDIDATES: Final = 20
ER_NO_SUCH_TABLE: Final = 1146
# Denied: on the database, on a table, or a command.
ACCESS_DENIED: Final = frozenset({1044, 1142, 1227})

PROBE: Final = "SELECT VEC_FromText('[1]')"
GUARD: Final = "SELECT id FROM native_vector_guard WHERE id = 1 LOCK IN SHARE MODE"
SETTLE: Final = "SELECT id FROM native_vector_guard WHERE id = 1 FOR UPDATE"
SELECT_STATE: Final = "SELECT dimensions, metric, model FROM native_vector_state WHERE id = 1"
CLEAR_STATE: Final = "DELETE FROM native_vector_state"
RECORD_STATE: Final = (
    "INSERT INTO native_vector_state (id, dimensions, metric, model) VALUES (1, %s, %s, %s)"
)
DROP_TABLE: Final = "DROP TABLE IF EXISTS native_vectors"
TABLE_EXISTS: Final = (
    "SELECT count(*) FROM information_schema.tables"
    " WHERE table_schema = DATABASE() AND table_name = 'native_vectors'"
)
# Width and metric come from the declaration: an int and an allowlisted name.
CREATE_TABLE: Final = (
    "CREATE TABLE native_vectors ("
    " row_id BIGINT NOT NULL PRIMARY KEY,"
    " embedding VECTOR({dimensions}) NOT NULL,"
    " VECTOR INDEX native_vectors_graph (embedding) M={m} DISTANCE={distance}"
    ") ENGINE=InnoDB"
)
# The vectors of the recorded declaration among some events, zero vectors left out
# (the only ones at distance 0 from the zero vector of their width).
_COPY = (
    "INSERT INTO native_vectors (row_id, embedding)"
    " SELECT e.row_id, e.embedding FROM events e JOIN native_vector_state v"
    " ON v.id = 1 AND e.embedding_model = v.model AND length(e.embedding) = 4 * v.dimensions"
    " WHERE e.type = 'MESSAGE'"
    " AND VEC_DISTANCE_EUCLIDEAN(e.embedding, REPEAT(x'00', length(e.embedding))) > 0"
)
_UPSERT = " ON DUPLICATE KEY UPDATE embedding = VALUES(embedding)"
COPY_ALL: Final = _COPY + _UPSERT
_DELETE_EVENTS = "DELETE n FROM native_vectors n JOIN events e ON e.row_id = n.row_id WHERE 1 = 1"


def _by_ids(count: int) -> str:
    # A list of bound ids: a JSON_TABLE subquery would be a temporary table per write.
    return " AND e.id IN (" + ", ".join(["%s"] * count) + ")"


def copy_events_sql(count: int) -> str:
    """Copy the vectors of ``count`` events (their ids the parameters) into the graph."""
    return _COPY + _by_ids(count) + _UPSERT


def delete_events_sql(count: int) -> str:
    """Delete the graph's rows of ``count`` events (their ids the parameters)."""
    return _DELETE_EVENTS + _by_ids(count)


# A session's vectors and its parts' (parts are one level deep).
DELETE_OF_SESSION: Final = (
    "DELETE n FROM native_vectors n JOIN events e ON e.row_id = n.row_id"
    " JOIN sessions s ON s.id = e.session_id WHERE s.id = %s OR s.part_of = %s"
)
LOCK_SESSION: Final = "SELECT id FROM sessions WHERE id = %s FOR UPDATE"
# The vectors of the sessions expired at a time and of their parts; their rows stay
# locked until the sessions are deleted in the same transaction.
DELETE_OF_EXPIRED: Final = (
    "DELETE n FROM native_vectors n JOIN events e ON e.row_id = n.row_id"
    " JOIN sessions s ON s.id = e.session_id LEFT JOIN sessions p ON p.id = s.part_of"
    " WHERE s.expires_at < %s OR p.expires_at < %s"
)
_OWNER = " AND s.owner_id = %(owner_id)s"
_ROLES = " AND JSON_CONTAINS(%(roles)s, JSON_QUOTE(e.role))"


def search_sql(metric: spi.Metric, owner: bool, roles: bool, ef_search: int) -> str:
    """The k rows in scope nearest the query among the graph's ``candidates`` nearest,
    with their stored vectors. The graph is read alone, in a derived table that drives
    the join (joined directly, the optimizer starts from ``events`` or the owner's
    sessions and sorts every vector in them).
    Parameters: vector, candidates, owner_id, roles, k."""
    return (
        f"SET STATEMENT mhnsw_ef_search = {int(ef_search)} FOR"
        " SELECT STRAIGHT_JOIN c.row_id, e.embedding FROM ("
        f"SELECT n.row_id, {_DISTANCE_FUNCTION[metric]}(n.embedding, %(vector)s) AS distance"
        " FROM native_vectors n ORDER BY distance LIMIT %(candidates)s"
        ") c JOIN events e ON e.row_id = c.row_id"
        + (" JOIN sessions s ON s.id = e.session_id" if owner else "")
        + " WHERE 1 = 1"
        + (_OWNER if owner else "")
        + (_ROLES if roles else "")
        + " ORDER BY c.distance LIMIT %(k)s"
    )


async def _unless_unbuilt(run: Awaitable[T]) -> T | None:
    """``run``'s result, or None when ``native_vectors`` is not built (never declared,
    or being rebuilt by another store)."""
    try:
        return await run
    except errors.ProgrammingError as error:
        if error_code(error) == ER_NO_SUCH_TABLE:
            return None
        raise


# ---------------------------------------------------------------------------- building


async def build_graph(connection: Connection, spec: spi.VectorIndexSpec, graph_m: int) -> bool:
    """Make ``native_vectors`` hold ``spec``'s vectors in a graph of ``graph_m``
    neighbours per node (the caller holds the migration lock); nothing when it already
    does. True when it was (re)built."""
    state = await fetch_one(connection, SELECT_STATE)
    (exists,) = await fetch_one(connection, TABLE_EXISTS)
    if exists and state is not None and _spec(state) == spec:
        return False
    await create_table(connection, spec, graph_m, exists)
    await execute(connection, RECORD_STATE, (spec.dimensions, spec.metric, spec.model))
    # Writes that began before the state row was visible copied into the old table or
    # nothing: once they have committed, the copy of everything takes them in.
    await settle(connection)
    await execute(connection, COPY_ALL)
    return True


async def drop(connection: Connection) -> None:
    """Forget the graph: the state first, so no write copies into a table being dropped."""
    await execute(connection, CLEAR_STATE)
    (exists,) = await fetch_one(connection, TABLE_EXISTS)
    if exists:
        await execute(connection, DROP_TABLE)


async def create_table(
    connection: Connection, spec: spi.VectorIndexSpec, graph_m: int, exists: bool
) -> None:
    """The state cleared and the graph's table made anew, empty."""
    await execute(connection, CLEAR_STATE)
    if exists:
        await execute(connection, DROP_TABLE)
    ddl = CREATE_TABLE.format(
        dimensions=int(spec.dimensions), m=int(graph_m), distance=_DISTANCE[spec.metric]
    )
    await execute(connection, ddl)


async def settle(connection: Connection) -> None:
    """Wait until every write that holds the guard has committed (autocommit: the lock
    is released as soon as it is granted)."""
    await fetch_one(connection, SETTLE)


async def guard(connection: Connection) -> None:
    """Hold the guard shared until the caller's transaction ends (see the module)."""
    await fetch_one(connection, GUARD)


def _spec(row: Sequence[Any]) -> spi.VectorIndexSpec:
    return spi.VectorIndexSpec(int(row[0]), row[1], row[2])


# ---------------------------------------------------------------------------- searching


async def search(
    connection: Connection, query: spi.VectorQuery, ef_search: int = EF_SEARCH
) -> list[tuple[int, float]] | None:
    """The k best (row id, score) by the graph, walked with ``ef_search`` candidates,
    scored as the exact scan scores; None when the graph cannot answer this query (the
    caller scans)."""
    scope = query.scope
    if query.model is None or scope.session_id is not None or not any(query.vector):
        return None
    state = await fetch_one(connection, SELECT_STATE)
    if state is None or _spec(state) != spi.VectorIndexSpec(
        len(query.vector), query.metric, query.model
    ):
        return None
    scoped = scope.owner_id is not None or scope.roles is not None
    statement = search_sql(
        query.metric, scope.owner_id is not None, scope.roles is not None, ef_search
    )
    parameters = {
        "vector": np.asarray(query.vector, dtype="<f4").tobytes(),
        "owner_id": scope.owner_id,
        "roles": None if scope.roles is None else json.dumps([r.value for r in scope.roles]),
        "candidates": query.k * (SCOPED_CANDIDATES if scoped else 1),
        "k": query.k,
    }
    rows = await _unless_unbuilt(fetch_all(connection, statement, parameters))
    if rows is None or len(rows) < query.k:
        return None
    # In row order, as the scan reads them, so equal scores rank as they do there.
    rows = sorted(rows, key=lambda row: int(row[0]))
    matrix = from_blobs([row[1] for row in rows], len(query.vector))
    ranked = best(scores(query.vector, matrix, query.metric), query.k)
    return [(int(rows[index][0]), score) for index, score in ranked]


# ---------------------------------------------------------------------------- a store's vectors


async def vectors_of(
    connection: Connection, facts: ServerFacts, target: MySQLTarget
) -> vector_feed.FeedVectors:
    """How a store on this server keeps and searches its vectors: with the graph where
    the server has VECTOR columns and indexes (MariaDB 11.7 or newer whose vector
    functions answer)."""
    if facts.family == "mariadb" and facts.version >= NATIVE_SINCE:
        try:
            await fetch_one(connection, PROBE)
        except errors.ProgrammingError:
            pass
        else:
            return GraphVectors(target)
    return vector_feed.FeedVectors(target)


class GraphVectors(vector_feed.FeedVectors):
    """On a server with MariaDB's graph, every store keeps the graph current, whatever
    it searches with (each write ends with its change recorded in the feed, after the
    graph's rows). Only a store whose URL says ``vector_search=native`` (``native``)
    builds the graph and searches it; it keeps no cache."""

    def __init__(self, target: MySQLTarget) -> None:
        super().__init__(target)
        self.target = target
        self.native = target.vector_search == "native"
        if self.native:
            self.cache = None
        # The graph's neighbours per node, and a search's candidates, for this store.
        self.graph_m = GRAPH_M
        self.ef_search = EF_SEARCH

    async def _added(self, connection: Connection, ids: Sequence[str]) -> None:
        # The messages' vectors copied into the graph, then recorded.
        await guard(connection)
        await _unless_unbuilt(execute(connection, copy_events_sql(len(ids)), ids))
        await super()._added(connection, ids)

    async def _changed(self, connection: Connection, ids: Sequence[str]) -> None:
        # The graph made to match: the old rows removed, those of the declaration copied.
        await guard(connection)
        if await _unless_unbuilt(execute(connection, delete_events_sql(len(ids)), ids)) is not None:
            await execute(connection, copy_events_sql(len(ids)), ids)
        await super()._changed(connection, ids)

    async def _delete(self, connection: Connection, session_id: str) -> bool:
        # The session's vectors in the graph go first: a cascade would not reach them.
        if await fetch_one(connection, LOCK_SESSION, (session_id,)) is None:
            return False
        await guard(connection)
        await _unless_unbuilt(execute(connection, DELETE_OF_SESSION, (session_id, session_id)))
        return await super()._delete(connection, session_id)

    async def delete_expired(self, connection: Connection, before: int) -> int:
        await guard(connection)
        await _unless_unbuilt(execute(connection, DELETE_OF_EXPIRED, (before, before)))
        return await super().delete_expired(connection, before)

    async def declared(
        self, connect: vector_feed.Connect, *, replace: bool, reembedding: bool
    ) -> None:
        """A graph of another declaration goes, whoever searches it; this store builds
        one only if it searches it, and after a re-embedding run (`end_reembed`), over
        every vector at once."""
        build = self.native and not reembedding
        if replace or build:
            async with connect() as connection:
                await self.rebuild(connection, replace=replace, build=build)

    async def rebuild(self, connection: Connection, *, replace: bool, build: bool) -> None:
        """Under the migration lock: with ``replace``, drop the graph; with ``build``,
        build the graph of the recorded declaration where it is not built. A user
        without the privileges to do so is warned, and searches scan."""
        async with migration_lock(connection, self.target):
            try:
                if replace:
                    await drop(connection)
                spec = await fetch_one(connection, SELECT_VECTOR_INDEX)
                if build and spec is not None:
                    await build_graph(connection, _spec(spec), self.graph_m)
            except errors.OperationalError as error:
                if error_code(error) not in ACCESS_DENIED:
                    raise
                log.warning(
                    "%s: MariaDB's vector index is not %s (%s); vector search scans until "
                    "a user with CREATE and DROP on the database connects",
                    self.target.where,
                    "rebuilt" if replace else "built",
                    error.args[1] if len(error.args) > 1 else error,
                )

    async def search(self, connection: Connection, query: spi.VectorQuery) -> list[SearchHit]:
        if not self.native:
            return await super().search(connection, query)
        async with snapshot(connection):
            found = await search(connection, query, self.ef_search)
            if found is None:
                return await vector_feed.scan(connection, query)
            return await drive(DRIVER, connection, steps.hits(sql.SEARCH, found))
