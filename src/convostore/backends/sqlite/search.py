"""Vector and text search, the vector index record, and re-embedding on SQLite.

Text search runs on an FTS5 index of the words of each message's content, the
`text_tokens` every backend matches (schema version 4), fed in batches and brought up
to date before each search (schema version 6, `text_index`).

Vector search ranks the rows a `VectorCache` shortlists in the read snapshot (see
`convostore.backends.sql.vector_cache`, fed by `convostore.backends.sqlite.vector_cache`)
exactly, on their float32 vectors read from the database. A snapshot older than the
cache (a search that began before a change another search already applied) scans the
database as it sees it instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from convostore.backends import spi
from convostore.backends.sql.embeddings import Embeddings
from convostore.backends.sql.search import SearchStatements, text_search, vector_search
from convostore.backends.sql.steps import drive
from convostore.backends.sql.vector_cache import VectorCache
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.connection import BLANK_FUNCTION
from convostore.backends.sqlite.rows import vector_blob
from convostore.backends.sqlite.vector_cache import SQLiteFeed
from convostore.model import Role, SearchHit

__all__ = [
    "VectorCache",
    "read_count_pending",
    "read_pending",
    "read_text_search",
    "read_vector_index",
    "read_vector_search",
    "scan",
    "write_embeddings",
    "write_vector_index",
]

Connection = sqlite3.Connection

EMBEDDINGS: Final = Embeddings(sql.DIALECT, f"NOT {BLANK_FUNCTION}(content)", vector=vector_blob)

SEARCH: Final = SearchStatements(
    sql.DIALECT,
    "rowid",
    text_matches=(
        "SELECT e.rowid, -bm25(events_fts) AS score FROM events_fts"
        " JOIN events e ON e.rowid = events_fts.rowid JOIN sessions s ON s.id = e.session_id"
        " WHERE events_fts MATCH :query"
    ),
    text_order=" ORDER BY score DESC, e.id LIMIT :k",
)


def read_vector_index(connection: Connection) -> spi.VectorIndexSpec | None:
    return drive(connection, EMBEDDINGS.spec())


def write_vector_index(connection: Connection, spec: spi.VectorIndexSpec, replace: bool) -> None:
    drive(connection, EMBEDDINGS.declare_index(spec, replace))


def read_pending(
    connection: Connection, model: str, roles: Sequence[Role], after: str | None, limit: int
) -> list[spi.PendingEmbedding]:
    return drive(connection, EMBEDDINGS.pending(model, roles, after, limit))


def read_count_pending(connection: Connection, model: str, roles: Sequence[Role]) -> int:
    return drive(connection, EMBEDDINGS.count_pending(model, roles))


def write_embeddings(
    connection: Connection,
    model: str,
    vectors: Sequence[tuple[str, tuple[float, ...]]],
    stamp: str,
) -> None:
    drive(connection, EMBEDDINGS.set_embeddings(model, vectors, stamp))


def read_vector_search(
    connection: Connection,
    cache: VectorCache | None,
    vector: tuple[float, ...],
    metric: spi.Metric,
    model: str | None,
    k: int,
    owner_id: str | None,
    session_id: str | None,
    roles: tuple[Role, ...] | None,
) -> list[SearchHit]:
    """The search, in a read snapshot: the rows ``cache`` shortlists, ranked exactly;
    without a cache, or where the snapshot is older than the cache, the rows in scope
    scanned."""
    scope = owner_id, session_id, roles
    shortlisted = None
    if cache is not None:
        search = spi.VectorQuery(vector, metric, model, k, spi.SearchScope(*scope))
        shortlisted = cache.shortlisted(SQLiteFeed(connection), search)
    return drive(connection, vector_search(SEARCH, vector, metric, model, k, scope, shortlisted))


def scan(connection: Connection, *arguments: Any) -> list[SearchHit]:
    """`read_vector_search` without the cache: every vector in scope read."""
    return read_vector_search(connection, None, *arguments)


def read_text_search(
    connection: Connection,
    terms: tuple[str, ...],
    k: int,
    owner_id: str | None,
    session_id: str | None,
    roles: tuple[Role, ...] | None,
) -> list[SearchHit]:
    # Each term quoted: what the user typed is never read as FTS5 query syntax.
    query = " ".join(f'"{term}"' for term in terms)
    return drive(connection, text_search(SEARCH, query, k, owner_id, session_id, roles))
