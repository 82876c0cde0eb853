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

from collections.abc import Awaitable, Callable
from typing import Final

from convostore.backends.interface import SearchScope, TextQuery, VectorQuery
from convostore.backends.mysql import statements as sql
from convostore.backends.mysql.connection import DRIVER, Connection
from convostore.backends.mysql.rows import fulltext_query
from convostore.backends.mysql.vector_feed import feed
from convostore.backends.sql.aio import drive
from convostore.backends.sql.embeddings import Embeddings
from convostore.backends.sql.search import (
    SearchStatements,
    hits,
)
from convostore.backends.sql.search import text_search as text_search_steps
from convostore.backends.sql.search import vector_search as vector_search_steps
from convostore.backends.sql.values import vector_blob
from convostore.backends.sql.vector_cache import VectorCache
from convostore.model import Role, SearchHit

__all__ = ["EMBEDDINGS", "text_search", "vector_search"]

# A native index's search: the k best (row id, score), or None to scan instead.
NativeSearch = Callable[[Connection, VectorQuery], Awaitable[list[tuple[int, float]] | None]]

# A character str.strip() keeps: a message with none is blank (all of Python's
# whitespace lies below U+3001).
_NON_BLANK: Final = "[^" + "".join(c for c in map(chr, range(0x3001)) if c.isspace()) + "]"
EMBEDDINGS: Final = Embeddings(
    sql.DIALECT,
    "content REGEXP %(non_blank)s",
    non_blank_parameters={"non_blank": _NON_BLANK},
    vector=vector_blob,
)

SEARCH: Final = SearchStatements(
    sql.DIALECT,
    "row_id",
    text_matches=(
        "SELECT e.row_id, MATCH (e.search_tokens) AGAINST (%(query)s IN BOOLEAN MODE) AS score"
        " FROM events e JOIN sessions s ON s.id = e.session_id"
        " WHERE MATCH (e.search_tokens) AGAINST (%(query)s IN BOOLEAN MODE)"
        " AND e.type = 'MESSAGE'"
    ),
    text_order=" ORDER BY score DESC, e.id LIMIT %(k)s",
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
    scope = _scope(query.scope)
    shortlisted = None
    if cache is not None:
        try:
            shortlisted = await cache.shortlisted_async(
                feed(connection),
                (query.model, len(query.vector)),
                *(query.vector, query.metric, query.k, *scope),
            )
        finally:
            release()
    steps = vector_search_steps(
        SEARCH, query.vector, query.metric, query.model, query.k, scope, shortlisted
    )
    return await drive(DRIVER, connection, steps)


def _scope(scope: SearchScope) -> tuple[str | None, str | None, tuple[Role, ...] | None]:
    return scope.owner_id, scope.session_id, scope.roles


async def text_search(connection: Connection, query: TextQuery) -> list[SearchHit]:
    steps = text_search_steps(SEARCH, fulltext_query(query.terms), query.k, *_scope(query.scope))
    return await drive(DRIVER, connection, steps)
