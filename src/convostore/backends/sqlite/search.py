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

import json
import sqlite3
from collections.abc import Sequence
from typing import Final

from convostore.backends.sql.embeddings import Embeddings
from convostore.backends.sql.search import (
    SearchStatements,
    ranked,
    scope_parameters,
    scoped,
    text_search,
)
from convostore.backends.sql.steps import drive
from convostore.backends.sql.vector_cache import VectorCache
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.connection import BLANK_FUNCTION
from convostore.backends.sqlite.rows import vector_blob
from convostore.backends.sqlite.vector_cache import feed
from convostore.embedding import Metric, PendingEmbedding, VectorIndexSpec
from convostore.model import Role, SearchHit

__all__ = [
    "VectorCache",
    "read_count_pending",
    "read_pending",
    "read_text_search",
    "read_vector_index",
    "read_vector_search",
    "write_embeddings",
    "write_vector_index",
]

Connection = sqlite3.Connection

EMBEDDINGS: Final = Embeddings(sql.DIALECT, f"NOT {BLANK_FUNCTION}(content)", vector=vector_blob)

_VECTOR_CANDIDATES = (
    "SELECT e.rowid, e.embedding FROM events e JOIN sessions s ON s.id = e.session_id"
    " WHERE e.type = 'MESSAGE' AND e.embedding IS NOT NULL"
    " AND length(e.embedding) = :width"
)
_BY_MODEL = " AND e.embedding_model = :model"
_BY_ROWID = " ORDER BY e.rowid"

# The vectors of the shortlisted rows, in rowid order, for the exact ranking.
SHORTLISTED_VECTORS: Final = (
    "SELECT rowid, embedding FROM events WHERE rowid IN (SELECT value FROM json_each(:rowids))"
    " ORDER BY rowid"
)
SEARCH: Final = SearchStatements(
    scope=(
        " AND s.owner_id = :owner_id",
        " AND e.session_id = :session_id",
        " AND e.role IN (SELECT value FROM json_each(:roles))",
    ),
    text_matches=(
        "SELECT e.rowid, -bm25(events_fts) AS score FROM events_fts"
        " JOIN events e ON e.rowid = events_fts.rowid JOIN sessions s ON s.id = e.session_id"
        " WHERE events_fts MATCH :query"
    ),
    text_order=" ORDER BY score DESC, e.id LIMIT :k",
    events_by_row=(
        f"SELECT e.rowid, {sql.EVENT_COLUMNS} FROM events e"
        " WHERE e.rowid IN (SELECT value FROM json_each(:rowids))"
    ),
    reader=sql.DIALECT.rows,
)


def read_vector_index(connection: Connection) -> VectorIndexSpec | None:
    return drive(connection, EMBEDDINGS.spec())


def write_vector_index(connection: Connection, spec: VectorIndexSpec, replace: bool) -> None:
    drive(connection, EMBEDDINGS.declare_index(spec, replace))


def read_pending(
    connection: Connection, model: str, roles: Sequence[Role], after: str | None, limit: int
) -> list[PendingEmbedding]:
    return drive(connection, EMBEDDINGS.pending(model, roles, after, limit))


def read_count_pending(connection: Connection, model: str, roles: Sequence[Role]) -> int:
    return drive(connection, EMBEDDINGS.count_pending(model, roles))


def write_embeddings(
    connection: Connection, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]]
) -> None:
    drive(connection, EMBEDDINGS.set_embeddings(model, vectors))


def read_vector_search(
    connection: Connection,
    cache: VectorCache,
    vector: tuple[float, ...],
    metric: Metric,
    model: str | None,
    k: int,
    owner_id: str | None,
    session_id: str | None,
    roles: tuple[Role, ...] | None,
) -> list[SearchHit]:
    """The search, in a read snapshot: the rows ``cache`` shortlists, ranked exactly."""
    shortlisted = cache.shortlisted(
        feed(connection), (model, len(vector)), vector, metric, k, owner_id, session_id, roles
    )
    if shortlisted is None:
        return _scan(connection, vector, metric, model, k, owner_id, session_id, roles)
    if not shortlisted.shape[0]:
        return []
    rows = connection.execute(
        SHORTLISTED_VECTORS, {"rowids": json.dumps(shortlisted.tolist())}
    ).fetchall()
    return drive(connection, ranked(SEARCH, vector, metric, k, rows))


def _scan(
    connection: Connection,
    vector: tuple[float, ...],
    metric: Metric,
    model: str | None,
    k: int,
    owner_id: str | None,
    session_id: str | None,
    roles: tuple[Role, ...] | None,
) -> list[SearchHit]:
    """The search without the cache: every candidate vector read from the database."""
    base = _VECTOR_CANDIDATES + ("" if model is None else _BY_MODEL)
    statement = scoped(SEARCH, base, owner_id, session_id, roles) + _BY_ROWID
    parameters = {"width": 4 * len(vector), "model": model}
    parameters.update(scope_parameters(owner_id, session_id, roles))
    rows = connection.execute(statement, parameters).fetchall()
    return drive(connection, ranked(SEARCH, vector, metric, k, rows))


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
