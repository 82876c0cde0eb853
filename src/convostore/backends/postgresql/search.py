"""Vector and text search, the vector index and its HNSW index, and re-embedding.

Vectors are ``real[]``. The declared index (one row of ``vector_index``) is built, where
pgvector is installed, as a partial HNSW index on the cast ``embedding::vector(width)``
of the messages of its model and width, with the operator class of its metric. A search
orders by the same expression, so the planner walks that index; pgvector 0.8's relaxed
iterative scan keeps walking until a filtered search (an owner, a session, roles) has
its k rows.

Text search runs on a GIN index of the ``search_terms`` tsvector, whose lexemes are the
words `convostore.embedding.text_tokens` gives (case and accents folded as on every
backend); a query is the conjunction of its words, each quoted as one lexeme.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, Final

from psycopg import sql

from convostore.backends import spi
from convostore.backends.postgresql import statements
from convostore.backends.postgresql.connection import DRIVER, Connection
from convostore.backends.postgresql.operations import fetch_all, fetch_one
from convostore.backends.postgresql.rows import event_from_row, tsquery, vector_text
from convostore.backends.sql.aio import drive
from convostore.backends.sql.embeddings import Embeddings
from convostore.model import Message, Role, SearchHit

__all__ = [
    "EMBEDDINGS",
    "HNSW_INDEX",
    "declare_vector_index",
    "set_embeddings",
    "text_search",
    "vector_search",
]

HNSW_INDEX: Final = "events_embedding_hnsw"
# pgvector's operator and operator class for each metric.
_DISTANCE: Final[dict[spi.Metric, str]] = {"cosine": "<=>", "euclidean": "<->"}
_OPERATOR_CLASS: Final[dict[spi.Metric, str]] = {
    "cosine": "vector_cosine_ops",
    "euclidean": "vector_l2_ops",
}
# Python's str.isspace() characters: a message that is only these is blank, as
# `str.strip()` sees it.
PYTHON_WHITESPACE: Final = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004"
    "\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)

EMBEDDINGS: Final = Embeddings(
    statements.DIALECT,
    "btrim(content, %(blank)s) <> ''",
    non_blank_parameters={"blank": PYTHON_WHITESPACE},
)
SET_EMBEDDINGS: Final = (
    "UPDATE events SET embedding = given.embedding::real[], embedding_model = %(model)s,"
    " stamp = given.stamp"
    " FROM unnest(%(ids)s::text[], %(vectors)s::text[], %(stamps)s::text[])"
    " AS given (id, embedding, stamp)"
    " WHERE events.id = given.id AND events.type = 'MESSAGE'"
)

# Search scopes: whether an owner, a session and roles narrow the search. Each is a
# fixed fragment, so the statements stay a small bounded set.
_SCOPE = (
    " AND s.owner_id = %(owner_id)s",
    " AND e.session_id = %(session_id)s",
    " AND e.role = ANY(%(roles)s::text[])",
)


def _scope_sql(owner: bool, session: bool, roles: bool) -> str:
    return "".join(
        fragment for fragment, on in zip(_SCOPE, (owner, session, roles), strict=True) if on
    )


def _from(owner: bool) -> str:
    return "FROM events e" + (" JOIN sessions s ON s.id = e.session_id" if owner else "")


@functools.cache
def vector_search_sql(
    metric: spi.Metric,
    width: int,
    by_model: bool,
    owner: bool,
    session: bool,
    roles: bool,
    exact: bool = False,
) -> str:
    """The k nearest messages of one width (and model), with their distances. The
    ORDER BY is the expression the HNSW index of that width and metric is built on, or,
    ``exact``, one the index cannot serve (the distance plus zero), so the rows of the
    scope are scanned and sorted. Parameters: vector, model, owner_id, session_id,
    roles, k."""
    distance = sql.SQL(
        "e.embedding::vector({width}) {operator} %(vector)s::vector({width})"
    ).format(width=sql.Literal(width), operator=sql.SQL(_DISTANCE[metric]))
    order = sql.SQL("({distance}) + 0").format(distance=distance) if exact else distance
    statement = sql.SQL(
        "SELECT {columns}, {distance} {source}"
        " WHERE e.type = 'MESSAGE' AND cardinality(e.embedding) = {width}{model}{scope}"
        " ORDER BY {order} LIMIT %(k)s"
    ).format(
        columns=sql.SQL(statements.EVENT_COLUMNS),
        distance=distance,
        order=order,
        source=sql.SQL(_from(owner)),
        width=sql.Literal(width),
        model=sql.SQL(" AND e.embedding_model = %(model)s" if by_model else ""),
        scope=sql.SQL(_scope_sql(owner, session, roles)),
    )
    return statement.as_string(None)


@functools.cache
def text_search_sql(owner: bool, session: bool, roles: bool) -> str:
    """The k messages holding every term, best first: the terms' occurrences over the
    square root of the message's length, as every backend ranks them. Only the ids and
    scores are sorted; the k winners are then read whole. Parameters: query, terms,
    owner_id, session_id, roles, k."""
    return (
        "SELECT ranked.score, " + statements.EVENT_COLUMNS + " FROM ("
        "SELECT e.id, (SELECT coalesce(sum(cardinality(t.positions)), 0)"
        " FROM unnest(e.search_terms) t WHERE t.lexeme = ANY(%(terms)s::text[]))::float8"
        " / sqrt(e.search_length) AS score "
        + _from(owner)
        + " WHERE e.search_terms @@ %(query)s::tsquery"
        + _scope_sql(owner, session, roles)
        + " ORDER BY score DESC, e.id LIMIT %(k)s"
        ") ranked JOIN events e ON e.id = ranked.id ORDER BY ranked.score DESC, e.id"
    )


def hnsw_index_ddl(schema: str, spec: spi.VectorIndexSpec) -> sql.Composed:
    """The HNSW index of ``spec``: its width and metric, over its model's messages of
    that width. The model name is DDL, which takes no parameters: it is a quoted
    literal."""
    return sql.SQL(
        "CREATE INDEX IF NOT EXISTS {name} ON {table}"
        " USING hnsw ((embedding::vector({width})) {operator_class})"
        " WHERE type = 'MESSAGE' AND embedding_model = {model}"
        " AND cardinality(embedding) = {width}"
    ).format(
        name=sql.Identifier(HNSW_INDEX),
        table=sql.Identifier(schema, "events"),
        width=sql.Literal(spec.dimensions),
        operator_class=sql.SQL(_OPERATOR_CLASS[spec.metric]),
        model=sql.Literal(spec.model),
    )


def _drop_hnsw_ddl(schema: str) -> sql.Composed:
    return sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(schema, HNSW_INDEX))


# ---------------------------------------------------------------------------- the index


async def declare_vector_index(
    connection: Connection,
    schema: str,
    spec: spi.VectorIndexSpec,
    *,
    replace: bool,
    build: bool,
    lock: tuple[str, tuple[Any, ...]],
) -> None:
    """Record ``spec`` if none is (with ``replace``, in place of what is, whose HNSW
    index is dropped), then, with ``build`` and pgvector, build the HNSW index of what
    is recorded if it is missing. One transaction, under the schema's advisory lock
    (``lock``: its statement and parameters), so concurrent connects build it once."""
    async with connection.transaction():
        await connection.execute(*lock)
        await drive(DRIVER, connection, EMBEDDINGS.declare_index(spec, replace))
        if replace:
            await connection.execute(_drop_hnsw_ddl(schema))
        # Only DDL where the index is missing: creating one, even IF NOT EXISTS, needs
        # the table's owner, and a role that only reads and writes may connect too.
        if build and not await _hnsw_index_exists(connection, schema):
            recorded = await drive(DRIVER, connection, EMBEDDINGS.spec())
            assert recorded is not None
            await connection.execute(hnsw_index_ddl(schema, recorded))


async def _hnsw_index_exists(connection: Connection, schema: str) -> bool:
    name = sql.Identifier(schema, HNSW_INDEX).as_string(connection)
    row = await fetch_one(connection, "SELECT to_regclass(%s) IS NOT NULL", (name,))
    return bool(row[0])


# ---------------------------------------------------------------------------- re-embedding


async def set_embeddings(
    connection: Connection,
    model: str,
    vectors: Sequence[tuple[str, tuple[float, ...]]],
    stamp: str,
) -> None:
    await connection.execute(
        SET_EMBEDDINGS,
        {
            "model": model,
            "ids": [message_id for message_id, _ in vectors],
            "vectors": [vector_text(vector) for _, vector in vectors],
            "stamps": [stamp] * len(vectors),
        },
    )


# ---------------------------------------------------------------------------- searching


def _query_vector(vector: Sequence[float]) -> str:
    return "[" + ",".join(map(repr, vector)) + "]"


async def vector_search(
    connection: Connection,
    vector: tuple[float, ...],
    metric: spi.Metric,
    model: str | None,
    k: int,
    scope: tuple[str | None, str | None, tuple[Role, ...] | None],
) -> list[SearchHit]:
    owner_id, session_id, roles = scope
    # Which filters the statement has: the model and each part of the scope given.
    shape = (
        metric,
        len(vector),
        model is not None,
        owner_id is not None,
        session_id is not None,
        roles is not None,
    )
    statement = vector_search_sql(*shape)
    parameters = {
        "vector": _query_vector(vector),
        "model": model,
        "owner_id": owner_id,
        "session_id": session_id,
        "roles": None if roles is None else [role.value for role in roles],
        "k": k,
    }
    # Planned for these very parameters, never by a generic plan: only a plan that sees
    # the model can prove the HNSW index's model predicate, and so walk that index.
    rows = await fetch_all(connection, statement, parameters, binary=True, prepare=False)
    if len(rows) < k:
        # An HNSW walk can end short of k rows that the scope holds (a filtered scope,
        # an index rebuilt over replaced vectors): a short answer is checked by the
        # exact scan, which only then costs a pass over the scope.
        exact = vector_search_sql(*shape, exact=True)
        rows = await fetch_all(connection, exact, parameters, binary=True, prepare=False)
    hits = [
        SearchHit(message, _score(metric, row[23]))
        for row in rows
        if isinstance(message := event_from_row(row), Message)
    ]
    # A relaxed iterative scan may hand rows back slightly out of order.
    hits.sort(key=lambda hit: -hit.score)
    return hits


def _score(metric: spi.Metric, distance: float) -> float:
    """Higher is better, as `convostore._vectors.top_k` scores: cosine similarity, or
    the negative Euclidean distance. A zero vector has no direction: similarity 0."""
    if math.isnan(distance):
        return 0.0
    return 1.0 - distance if metric == "cosine" else -distance


async def text_search(
    connection: Connection,
    terms: tuple[str, ...],
    k: int,
    scope: tuple[str | None, str | None, tuple[Role, ...] | None],
) -> list[SearchHit]:
    query = tsquery(terms)
    if query is None:
        return []
    owner_id, session_id, roles = scope
    statement = text_search_sql(owner_id is not None, session_id is not None, roles is not None)
    parameters = {
        "query": query,
        "terms": list(terms),
        "owner_id": owner_id,
        "session_id": session_id,
        "roles": None if roles is None else [role.value for role in roles],
        "k": k,
    }
    rows = await fetch_all(connection, statement, parameters, binary=True)
    return [
        SearchHit(message, float(row[0]))
        for row in rows
        if isinstance(message := event_from_row(row, 1), Message)
    ]
