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

from convostore.backends.sql.search import (
    SearchStatements,
    ranked,
    roles_json,
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
from convostore.prepare import new_stamp

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

SELECT_VECTOR_INDEX: Final = "SELECT dimensions, metric, model FROM vector_index WHERE id = 1"
INSERT_VECTOR_INDEX: Final = (
    "INSERT INTO vector_index (id, dimensions, metric, model) VALUES (1, ?, ?, ?)"
    " ON CONFLICT (id) DO NOTHING"
)
REPLACE_VECTOR_INDEX: Final = (
    "INSERT INTO vector_index (id, dimensions, metric, model) VALUES (1, ?, ?, ?)"
    " ON CONFLICT (id) DO UPDATE SET"
    " dimensions = excluded.dimensions, metric = excluded.metric, model = excluded.model"
)

# Messages with no vector of a model, of some roles, with non-blank content.
_PENDING_WHERE = (
    " WHERE type = 'MESSAGE' AND (embedding_model IS NULL OR embedding_model <> :model)"
    " AND role IN (SELECT value FROM json_each(:roles))"
    f" AND NOT {BLANK_FUNCTION}(content)"
)
# Keyset by id: every page starts where the last ended, so a whole run reads each row
# once even though embedded rows leave the pending set behind it.
PENDING_PAGE: Final = (
    "SELECT id, session_id, role, content FROM events"
    + _PENDING_WHERE
    + " AND id > :after ORDER BY id LIMIT :limit"
)
COUNT_PENDING: Final = "SELECT count(*) FROM events" + _PENDING_WHERE
SET_EMBEDDING: Final = (
    "UPDATE events SET embedding = ?, embedding_model = ?, stamp = ? "
    "WHERE id = ? AND type = 'MESSAGE'"
)

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
    row = connection.execute(SELECT_VECTOR_INDEX).fetchone()
    return None if row is None else VectorIndexSpec(row[0], row[1], row[2])


def write_vector_index(connection: Connection, spec: VectorIndexSpec, replace: bool) -> None:
    # The exact scan needs no index structure: the record is the index's declaration.
    statement = REPLACE_VECTOR_INDEX if replace else INSERT_VECTOR_INDEX
    connection.execute(statement, (spec.dimensions, spec.metric, spec.model))


def read_pending(
    connection: Connection, model: str, roles: Sequence[Role], after: str | None, limit: int
) -> list[PendingEmbedding]:
    rows = connection.execute(
        PENDING_PAGE,
        {"model": model, "roles": roles_json(roles), "after": after or "", "limit": limit},
    ).fetchall()
    return [PendingEmbedding(row[0], row[1], Role(row[2]), row[3]) for row in rows]


def read_count_pending(connection: Connection, model: str, roles: Sequence[Role]) -> int:
    row = connection.execute(COUNT_PENDING, {"model": model, "roles": roles_json(roles)})
    return int(row.fetchone()[0])


def write_embeddings(
    connection: Connection, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]]
) -> None:
    connection.executemany(
        SET_EMBEDDING,
        [(vector_blob(vector), model, new_stamp(), message_id) for message_id, vector in vectors],
    )


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
