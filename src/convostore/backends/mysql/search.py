"""Vector and text search, the vector index record, and re-embedding on MySQL.

Text search runs on the FULLTEXT index of ``search_tokens`` (see `schema`), in boolean
mode with every term required, ranked by InnoDB's relevance.

Vector search, as the URL's ``vector_search`` chooses:

- ``cache``: the shared `VectorCache` (`convostore.backends.sql.vector_cache`), brought to
  the read snapshot through the commit-ordered change feed (`vector_feed`), shortlists
  the rows; their float32 vectors are read and ranked exactly.
- ``scan``: the candidate vectors (of the searched model and width, in scope) are read
  in one statement and ranked in the client by `convostore._vectors`, the ranking every
  scanning backend shares.
- ``native``: MariaDB 11.7+'s graph (`native_vectors`), where it can answer.

Only the k best rows are then read whole.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from convostore.backends.interface import SearchScope, TextQuery, VectorQuery
from convostore.backends.mysql import statements as sql
from convostore.backends.mysql.connection import DRIVER, Connection
from convostore.backends.mysql.operations import execute, fetch_all, fetch_one
from convostore.backends.mysql.rows import fulltext_query
from convostore.backends.mysql.vector_feed import feed
from convostore.backends.sql.aio import drive
from convostore.backends.sql.search import (
    SearchStatements,
    hits,
    ranked,
    roles_json,
    scope_parameters,
    scoped,
)
from convostore.backends.sql.search import text_search as text_search_steps
from convostore.backends.sql.values import vector_blob
from convostore.backends.sql.vector_cache import VectorCache
from convostore.embedding import PendingEmbedding, VectorIndexSpec
from convostore.model import Role, SearchHit
from convostore.prepare import new_stamp

__all__ = [
    "count_pending",
    "declare_vector_index",
    "pending",
    "set_embeddings",
    "text_search",
    "vector_index_spec",
    "vector_search",
]

# A native index's search: the k best (row id, score), or None to scan instead.
NativeSearch = Callable[[Connection, VectorQuery], Awaitable[list[tuple[int, float]] | None]]

SELECT_VECTOR_INDEX: Final = "SELECT dimensions, metric, model FROM vector_index WHERE id = 1"
INSERT_VECTOR_INDEX: Final = (
    "INSERT INTO vector_index (id, dimensions, metric, model) VALUES (1, %s, %s, %s)"
    " ON DUPLICATE KEY UPDATE id = id"
)
REPLACE_VECTOR_INDEX: Final = (
    "INSERT INTO vector_index (id, dimensions, metric, model) VALUES (1, %s, %s, %s)"
    " ON DUPLICATE KEY UPDATE dimensions = VALUES(dimensions), metric = VALUES(metric),"
    " model = VALUES(model)"
)

# Messages with no vector of a model, of some roles, with non-blank content.
_PENDING_WHERE = (
    " WHERE type = 'MESSAGE' AND (embedding_model IS NULL OR embedding_model <> %(model)s)"
    " AND JSON_CONTAINS(%(roles)s, JSON_QUOTE(role))"
    " AND content REGEXP %(non_blank)s"
)
# A character str.strip() keeps: a message with none is blank (all of Python's
# whitespace lies below U+3001).
_NON_BLANK: Final = "[^" + "".join(c for c in map(chr, range(0x3001)) if c.isspace()) + "]"
# Keyset by id: every page starts where the last ended.
PENDING_PAGE: Final = (
    "SELECT id, session_id, role, content FROM events"
    + _PENDING_WHERE
    + " AND id > %(after)s ORDER BY id LIMIT %(limit)s"
)
COUNT_PENDING: Final = "SELECT count(*) FROM events" + _PENDING_WHERE
SET_EMBEDDING: Final = (
    "UPDATE events SET embedding = %s, embedding_model = %s, stamp = %s "
    "WHERE id = %s AND type = 'MESSAGE'"
)

_VECTOR_CANDIDATES = (
    "SELECT e.row_id, e.embedding FROM events e JOIN sessions s ON s.id = e.session_id"
    " WHERE e.type = 'MESSAGE' AND e.embedding IS NOT NULL"
    " AND length(e.embedding) = %(width)s"
)
_BY_MODEL = " AND e.embedding_model = %(model)s"
# The vectors of the shortlisted rows, in row order, for the exact ranking.
SHORTLISTED_VECTORS: Final = (
    "SELECT e.row_id, e.embedding FROM "
    "JSON_TABLE(%s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS wanted"
    " JOIN events e ON e.row_id = wanted.value ORDER BY e.row_id"
)
SEARCH: Final = SearchStatements(
    scope=(
        " AND s.owner_id = %(owner_id)s",
        " AND e.session_id = %(session_id)s",
        " AND JSON_CONTAINS(%(roles)s, JSON_QUOTE(e.role))",
    ),
    text_matches=(
        "SELECT e.row_id, MATCH (e.search_tokens) AGAINST (%(query)s IN BOOLEAN MODE) AS score"
        " FROM events e JOIN sessions s ON s.id = e.session_id"
        " WHERE MATCH (e.search_tokens) AGAINST (%(query)s IN BOOLEAN MODE)"
        " AND e.type = 'MESSAGE'"
    ),
    text_order=" ORDER BY score DESC, e.id LIMIT %(k)s",
    events_by_row=(
        f"SELECT e.row_id, {sql.EVENT_COLUMNS} FROM "
        "JSON_TABLE(%(rowids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS wanted"
        " JOIN events e ON e.row_id = wanted.value"
    ),
    reader=sql.DIALECT.rows,
)


async def vector_index_spec(connection: Connection) -> VectorIndexSpec | None:
    row = await fetch_one(connection, SELECT_VECTOR_INDEX)
    return None if row is None else VectorIndexSpec(int(row[0]), row[1], row[2])


async def declare_vector_index(
    connection: Connection, spec: VectorIndexSpec, replace: bool
) -> None:
    # The exact scan needs no index structure: the record is the index's declaration.
    statement = REPLACE_VECTOR_INDEX if replace else INSERT_VECTOR_INDEX
    await execute(connection, statement, (spec.dimensions, spec.metric, spec.model))


async def pending(
    connection: Connection, model: str, roles: Sequence[Role], after: str | None, limit: int
) -> list[PendingEmbedding]:
    rows = await fetch_all(
        connection,
        PENDING_PAGE,
        {
            "model": model,
            "roles": roles_json(roles),
            "non_blank": _NON_BLANK,
            "after": after or "",
            "limit": limit,
        },
    )
    return [PendingEmbedding(row[0], row[1], Role(row[2]), row[3]) for row in rows]


async def count_pending(connection: Connection, model: str, roles: Sequence[Role]) -> int:
    parameters = {"model": model, "roles": roles_json(roles), "non_blank": _NON_BLANK}
    row = await fetch_one(connection, COUNT_PENDING, parameters)
    return int(row[0])


async def set_embeddings(
    connection: Connection, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]]
) -> None:
    async with connection.cursor() as cursor:
        await cursor.executemany(
            SET_EMBEDDING,
            [
                (vector_blob(vector), model, new_stamp(), message_id)
                for message_id, vector in vectors
            ],
        )


def _nothing() -> None:
    pass


async def vector_search(
    connection: Connection,
    query: VectorQuery,
    native: NativeSearch | None = None,
    cache: VectorCache | None = None,
    release: Callable[[], None] = _nothing,
) -> list[SearchHit]:
    """``native``'s answer where it gives one (see `native_vectors`), else the rows
    ``cache`` shortlists ranked exactly (``release`` called once they are), else the
    exact scan."""
    if native is not None and (found := await native(connection, query)) is not None:
        return await drive(DRIVER, connection, hits(SEARCH, found))
    scope = query.scope
    if cache is not None:
        try:
            shortlisted = await cache.shortlisted_async(
                feed(connection),
                (query.model, len(query.vector)),
                query.vector,
                query.metric,
                query.k,
                scope.owner_id,
                scope.session_id,
                scope.roles,
            )
        finally:
            release()
        if shortlisted is not None:
            if not shortlisted.shape[0]:
                return []
            found_rows = await fetch_all(
                connection, SHORTLISTED_VECTORS, (json.dumps(shortlisted.tolist()),)
            )
            return await _ranked(connection, query, found_rows)
    base = _VECTOR_CANDIDATES + ("" if query.model is None else _BY_MODEL)
    statement = scoped(SEARCH, base, *_scope(scope)) + " ORDER BY e.row_id"
    parameters = {"width": 4 * len(query.vector), "model": query.model}
    parameters.update(scope_parameters(*_scope(scope)))
    return await _ranked(connection, query, await fetch_all(connection, statement, parameters))


async def _ranked(connection: Connection, query: VectorQuery, rows: list[Any]) -> list[SearchHit]:
    steps = ranked(SEARCH, query.vector, query.metric, query.k, rows)
    return await drive(DRIVER, connection, steps)


def _scope(scope: SearchScope) -> tuple[str | None, str | None, tuple[Role, ...] | None]:
    return scope.owner_id, scope.session_id, scope.roles


async def text_search(connection: Connection, query: TextQuery) -> list[SearchHit]:
    steps = text_search_steps(SEARCH, fulltext_query(query.terms), query.k, *_scope(query.scope))
    return await drive(DRIVER, connection, steps)
