"""Vector and text search, the vector index record, and re-embedding on SQLite.

Text search runs on an FTS5 index of the words of each message's content, the
`text_tokens` every backend matches (schema version 4), fed in batches and brought up
to date before each search (schema version 5, `text_index`).

Vector search is an exact scan of a `VectorCache`: the store keeps the vectors of the
searched (model, width) in memory as one float32 matrix, with each row's rowid, norm,
session, owner and role, and ranks them with one matrix product; only the k best rows
are then read whole. The cache costs ``rows x (4 x dimensions + 21)`` bytes, about
156 MB for 100,000 vectors of 384 dimensions, per store object, plus room for appends
(an eighth when built, up to half when grown); it is built by the first vector search,
and dropped at close.

Each search brings the cache to its own read snapshot before it ranks, so it answers
exactly what a scan of the database would. Schema version 3 keeps a generation counter
that every delete from events, and every change of a row's vector, model, role or
session, moves (triggers, in the writing transaction, whatever connection writes).
In one generation events only grow, and a new row's rowid is above every rowid there
was, so a search reads the rows above the highest rowid the cache has seen (usually
none) and appends them; a snapshot older than the cache's takes the rows up to its own
highest rowid. A new generation rebuilds the cache; a snapshot of an older generation
than the cache's (a search that began before a change another search already saw)
scans the database as it sees it, without the cache.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from convostore._vectors import Matrix, Scores, best, from_blobs, row_norms, scores
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.connection import BLANK_FUNCTION
from convostore.backends.sqlite.rows import event_from_row, vector_blob
from convostore.embedding import Metric, PendingEmbedding, VectorIndexSpec
from convostore.model import Message, Role, SearchHit
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

# Search scopes: whether an owner, a session and roles narrow the search. Each is a
# fixed fragment, so the statements stay a small bounded set.
_SCOPE = (
    " AND s.owner_id = :owner_id",
    " AND e.session_id = :session_id",
    " AND e.role IN (SELECT value FROM json_each(:roles))",
)
_VECTOR_CANDIDATES = (
    "SELECT e.rowid, e.embedding FROM events e JOIN sessions s ON s.id = e.session_id"
    " WHERE e.type = 'MESSAGE' AND e.embedding IS NOT NULL"
    " AND length(e.embedding) = :width"
)
_BY_MODEL = " AND e.embedding_model = :model"
_BY_ROWID = " ORDER BY e.rowid"

# Where a read snapshot stands: the generation, and the highest rowid of events.
SNAPSHOT_POSITION: Final = (
    "SELECT (SELECT generation FROM vector_generation WHERE id = 1),"
    " coalesce((SELECT max(rowid) FROM events), 0)"
)
# The vectors of one width (and model) above a rowid, in rowid order, for the cache.
_CACHED_VECTORS = (
    " FROM events e WHERE e.rowid > :after AND e.type = 'MESSAGE'"
    " AND e.embedding IS NOT NULL AND length(e.embedding) = :width"
)
CACHED_VECTORS: Final = {
    False: "SELECT e.rowid, e.embedding, e.session_id, e.role" + _CACHED_VECTORS + _BY_ROWID,
    True: "SELECT e.rowid, e.embedding, e.session_id, e.role"
    + _CACHED_VECTORS
    + _BY_MODEL
    + _BY_ROWID,
}
COUNT_CACHED_VECTORS: Final = {
    False: "SELECT count(*)" + _CACHED_VECTORS,
    True: "SELECT count(*)" + _CACHED_VECTORS + _BY_MODEL,
}
SESSION_OWNERS: Final = (
    "SELECT id, owner_id FROM sessions WHERE id IN (SELECT value FROM json_each(:ids))"
)
_TEXT_MATCHES = (
    "SELECT e.rowid, -bm25(events_fts) AS score FROM events_fts"
    " JOIN events e ON e.rowid = events_fts.rowid JOIN sessions s ON s.id = e.session_id"
    " WHERE events_fts MATCH :query"
)
_EVENTS_BY_ROWID = (
    f"SELECT e.rowid, {sql.EVENT_COLUMNS} FROM events e"
    " WHERE e.rowid IN (SELECT value FROM json_each(:rowids))"
)


def _scoped(base: str, owner_id: str | None, session_id: str | None, roles: Any) -> str:
    chosen = (owner_id is not None, session_id is not None, roles is not None)
    return base + "".join(fragment for fragment, on in zip(_SCOPE, chosen, strict=True) if on)


def _roles_json(roles: Sequence[Role] | None) -> str | None:
    return None if roles is None else json.dumps([role.value for role in roles])


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
        {"model": model, "roles": _roles_json(roles), "after": after or "", "limit": limit},
    ).fetchall()
    return [PendingEmbedding(row[0], row[1], Role(row[2]), row[3]) for row in rows]


def read_count_pending(connection: Connection, model: str, roles: Sequence[Role]) -> int:
    row = connection.execute(COUNT_PENDING, {"model": model, "roles": _roles_json(roles)})
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
    """The search, in a read snapshot, on ``cache`` brought to that snapshot."""
    generation, top = connection.execute(SNAPSHOT_POSITION).fetchone()
    key = (model, len(vector))
    candidates = cache.candidates(connection, key, generation, top, owner_id, session_id, roles)
    if candidates is None:
        return _scan(connection, vector, metric, model, k, owner_id, session_id, roles)
    ranked = candidates.rank(vector, metric, k)
    return _hits(connection, ranked)


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
    statement = _scoped(base, owner_id, session_id, roles) + _BY_ROWID
    parameters = {
        "width": 4 * len(vector),
        "model": model,
        "owner_id": owner_id,
        "session_id": session_id,
        "roles": _roles_json(roles),
    }
    rows = connection.execute(statement, parameters).fetchall()
    matrix = from_blobs([row[1] for row in rows], len(vector))
    ranked = best(scores(vector, matrix, metric), k)
    return _hits(connection, [(rows[index][0], score) for index, score in ranked])


def read_text_search(
    connection: Connection,
    terms: tuple[str, ...],
    k: int,
    owner_id: str | None,
    session_id: str | None,
    roles: tuple[Role, ...] | None,
) -> list[SearchHit]:
    statement = _scoped(_TEXT_MATCHES, owner_id, session_id, roles) + (
        " ORDER BY score DESC, e.id LIMIT :k"
    )
    parameters = {
        # Each term quoted: what the user typed is never read as FTS5 query syntax.
        "query": " ".join(f'"{term}"' for term in terms),
        "owner_id": owner_id,
        "session_id": session_id,
        "roles": _roles_json(roles),
        "k": k,
    }
    rows = connection.execute(statement, parameters).fetchall()
    return _hits(connection, [(row[0], float(row[1])) for row in rows])


def _hits(connection: Connection, ranked: list[tuple[int, float]]) -> list[SearchHit]:
    """The ranked rows read whole, in rank order."""
    if not ranked:
        return []
    rowids = json.dumps([rowid for rowid, _ in ranked])
    rows = connection.execute(_EVENTS_BY_ROWID, {"rowids": rowids}).fetchall()
    messages = {row[0]: event_from_row(row[1:]) for row in rows}
    return [
        SearchHit(message, score)
        for rowid, score in ranked
        if isinstance(message := messages.get(rowid), Message)
    ]


# ---------------------------------------------------------------------------- the cache

CacheKey = tuple[str | None, int]
"""The model searched (None: every model) and the width of its vectors."""

Rowids = npt.NDArray[np.int64]
Codes = npt.NDArray[np.int32]
RoleCodes = npt.NDArray[np.int8]
# Vectors read from the database per fetch while the cache is filled.
_FETCH = 4096
_NO_OWNER = -1
_ABSENT = -2  # what a scope names that no cached row has
_BEFORE_ALL = -(2**63)  # below every rowid


@dataclass(frozen=True, slots=True)
class Candidates:
    """The cached rows one snapshot holds, and the codes its scope names (None: any)."""

    rowids: Rowids
    matrix: Matrix
    norms: Scores
    sessions: Codes
    owners: Codes
    roles: RoleCodes
    session: int | None = None
    owner: int | None = None
    role_codes: tuple[int, ...] | None = None

    def rows_in_scope(self) -> npt.NDArray[np.intp] | None:
        """The positions of the rows the scope keeps, or None for every row."""
        keep: npt.NDArray[np.bool_] | None = None
        for column, code in ((self.sessions, self.session), (self.owners, self.owner)):
            if code is not None:
                matches = column == code
                keep = matches if keep is None else keep & matches
        if self.role_codes is not None:
            matches = np.isin(self.roles, self.role_codes)
            keep = matches if keep is None else keep & matches
        return None if keep is None else np.flatnonzero(keep)

    def rank(self, vector: tuple[float, ...], metric: Metric, k: int) -> list[tuple[int, float]]:
        """The k best (rowid, score) in scope, scored as `convostore._vectors.top_k`."""
        rows = self.rows_in_scope()
        if rows is None:
            ranked = best(scores(vector, self.matrix, metric, self.norms), k)
            return [(int(self.rowids[row]), score) for row, score in ranked]
        if rows.shape[0] * 2 < self.matrix.shape[0]:
            # A narrow scope: copying its rows out costs less than scoring every row.
            scored = scores(vector, self.matrix[rows], metric, self.norms[rows])
        else:
            scored = scores(vector, self.matrix, metric, self.norms)[rows]
        return [(int(self.rowids[rows[at]]), score) for at, score in best(scored, k)]


class _VectorTable:
    """The vectors of one key as of one generation, up to one rowid, in rowid order.

    The arrays have room beyond ``count``. Rows below ``count`` are never written again
    (a full array is replaced by a larger copy), so the rows a search took stay as they
    were while it ranks them, outside the lock.
    """

    def __init__(self, key: CacheKey, generation: int, capacity: int) -> None:
        self.key = key
        self.generation = generation
        # The highest rowid of events in the newest snapshot applied.
        self.watermark = _BEFORE_ALL
        self.count = 0
        self.rowids: Rowids = np.empty(capacity, dtype=np.int64)
        self.matrix: Matrix = np.empty((capacity, key[1]), dtype=np.float32)
        self.norms: Scores = np.empty(capacity, dtype=np.float32)
        self.sessions: Codes = np.empty(capacity, dtype=np.int32)
        self.owners: Codes = np.empty(capacity, dtype=np.int32)
        self.roles: RoleCodes = np.empty(capacity, dtype=np.int8)
        self.session_codes: dict[str, int] = {}
        self.session_owners: list[int] = []  # by session code
        self.owner_codes: dict[str, int] = {}
        self.role_codes: dict[str, int] = {}

    def load(self, connection: Connection, after: int, top: int) -> None:
        """Append the key's rows above rowid ``after`` in the snapshot, whose highest
        rowid is ``top``."""
        model, width = self.key
        parameters = {"after": after, "width": 4 * width, "model": model}
        count = self.count
        try:
            cursor = connection.execute(CACHED_VECTORS[model is not None], parameters)
            while rows := cursor.fetchmany(_FETCH):
                self._append(connection, rows)
        except BaseException:
            self.count = count  # All or nothing: the next search reads the rows again.
            raise
        self.watermark = top

    def _append(self, connection: Connection, rows: list[Any]) -> None:
        start, end = self.count, self.count + len(rows)
        self._reserve(end)
        self.matrix[start:end] = from_blobs([row[1] for row in rows], self.key[1])
        self.norms[start:end] = row_norms(self.matrix[start:end])
        self.rowids[start:end] = [row[0] for row in rows]
        self._learn_sessions(connection, {row[2] for row in rows})
        sessions = [self.session_codes[row[2]] for row in rows]
        self.sessions[start:end] = sessions
        self.owners[start:end] = [self.session_owners[code] for code in sessions]
        codes = self.role_codes
        self.roles[start:end] = [codes.setdefault(row[3], len(codes)) for row in rows]
        self.count = end

    def _reserve(self, rows: int) -> None:
        capacity = self.rowids.shape[0]
        if rows <= capacity:
            return
        capacity = max(rows, capacity + capacity // 2)
        for name in ("rowids", "matrix", "norms", "sessions", "owners", "roles"):
            old = getattr(self, name)
            new = np.empty((capacity, *old.shape[1:]), dtype=old.dtype)
            new[: self.count] = old[: self.count]
            setattr(self, name, new)

    def _learn_sessions(self, connection: Connection, session_ids: set[str]) -> None:
        """Code the sessions not seen yet, and their owners (which never change)."""
        new = [session_id for session_id in session_ids if session_id not in self.session_codes]
        if not new:
            return
        owners = dict(connection.execute(SESSION_OWNERS, {"ids": json.dumps(new)}).fetchall())
        for session_id in new:
            owner = owners.get(session_id)
            code = _NO_OWNER
            if owner is not None:
                code = self.owner_codes.setdefault(owner, len(self.owner_codes))
            self.session_codes[session_id] = len(self.session_owners)
            self.session_owners.append(code)

    def candidates(
        self,
        top: int,
        owner_id: str | None,
        session_id: str | None,
        roles: tuple[Role, ...] | None,
    ) -> Candidates:
        """The rows of the snapshot whose highest rowid is ``top``, and the codes its
        scope names; no rows when the scope names what no row has."""
        count = self.count
        if top < self.watermark:
            # An older snapshot of this generation holds the rows up to its top.
            count = int(np.searchsorted(self.rowids[:count], top, side="right"))
        session = None if session_id is None else self.session_codes.get(session_id, _ABSENT)
        owner = None if owner_id is None else self.owner_codes.get(owner_id, _ABSENT)
        role_codes = None
        if roles is not None:
            role_codes = tuple(
                self.role_codes[r.value] for r in roles if r.value in self.role_codes
            )
        if session == _ABSENT or owner == _ABSENT or role_codes == ():
            count = 0
        return Candidates(
            self.rowids[:count],
            self.matrix[:count],
            self.norms[:count],
            self.sessions[:count],
            self.owners[:count],
            self.roles[:count],
            session,
            owner,
            role_codes,
        )


class VectorCache:
    """The vectors one store searches, held in memory for the store's life (see the
    module's docstring): one table, of the key searched last, shared by the store's
    reader threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: _VectorTable | None = None

    def candidates(
        self,
        connection: Connection,
        key: CacheKey,
        generation: int,
        top: int,
        owner_id: str | None,
        session_id: str | None,
        roles: tuple[Role, ...] | None,
    ) -> Candidates | None:
        """The cached rows the snapshot of ``connection`` holds (at ``generation``, with
        ``top`` its highest rowid), brought up to it first; None when the snapshot is of
        an older generation than the cache."""
        # Held while rows are read: a search that waits needs those rows too, and
        # reading them once is cheaper than twice.
        with self._lock:
            table = self._table
            if table is not None and table.key == key and table.generation >= generation:
                if table.generation > generation:
                    return None
                if top > table.watermark:
                    table.load(connection, table.watermark, top)
                return table.candidates(top, owner_id, session_id, roles)
            # Another key or a newer generation: the old table goes before the new one is
            # built, so the two are not held at once; its size is the new one's guess.
            rows = None if table is None or table.key != key else table.count
            table = self._table = None
            table = self._table = _build(connection, key, generation, top, rows)
            return table.candidates(top, owner_id, session_id, roles)

    def clear(self) -> None:
        """Forget every vector (the store is closing)."""
        with self._lock:
            self._table = None


def _build(
    connection: Connection, key: CacheKey, generation: int, top: int, rows: int | None
) -> _VectorTable:
    """A table of ``key`` as the snapshot holds it, sized for about ``rows`` rows
    (counted first when not known)."""
    if rows is None:
        model, width = key
        parameters = {"after": _BEFORE_ALL, "width": 4 * width, "model": model}
        statement = COUNT_CACHED_VECTORS[model is not None]
        rows = int(connection.execute(statement, parameters).fetchone()[0])
    # Room for an eighth more, so the appends that follow rarely copy the matrix.
    table = _VectorTable(key, generation, rows + rows // 8 + 64)
    table.load(connection, _BEFORE_ALL, top)
    return table
