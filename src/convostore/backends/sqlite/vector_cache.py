"""The vectors a SQLite store searches, held in memory in compact form.

A `VectorCache` keeps, for the (model, width) searched, every vector's rowid, its signs
as bits (width / 8 bytes), the vector quantised to int8 with its scale (width + 4
bytes), its exact norm, and codes for its session, owner and role: about 460 bytes for
384 dimensions, against 1,557 for the float32 copy it replaces. It follows the database
through the change log of schema version 5 (`vector_changes`): each search applies the
changes committed since the last one it saw, so inserts, deletes, expiry and
re-embedding by any connection or process cost what they change, not a rebuild.

A search ranks in three steps, each on fewer rows:

1. over more than `SIGNS_FROM` rows in scope, the Hamming distance of the signs picks
   the nearest 1/256 (at least `SIGNS_KEEP`, and every row tied with the last);
2. the int8 vectors score those, and the best `shortlist(k)` go on (ties kept);
3. the caller reads their float32 vectors from the database and ranks them exactly.

A scope of at most `shortlist(k)` rows skips to step 3, so small and narrowly filtered
searches are exact. Scopes (owner, session, roles) and the model are applied exactly,
before step 1; only the ranking inside them is approximate. ``benchmarks/recall.py``
measures recall@10 on real sentence embeddings.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from convostore._vectors import Matrix, Scores, from_blobs, row_norms
from convostore.embedding import Metric
from convostore.model import Role

__all__ = ["SIGNS_FROM", "SIGNS_KEEP", "CacheKey", "VectorCache", "shortlist"]

Connection = sqlite3.Connection
CacheKey = tuple[str | None, int]
"""The model searched (None: every model) and the width of its vectors."""

Rowids = npt.NDArray[np.int64]
Positions = npt.NDArray[np.intp]

SIGNS_FROM: Final = 8_192
SIGNS_KEEP: Final = 2_048
_SIGNS_SHARE: Final = 256  # step 1 keeps the nearest 1/256 of the scope
_BLOCK: Final = 32_768  # rows per block of step 1
_FETCH: Final = 4096  # rows read from the database per fetch
_NO_OWNER: Final = -1
_ABSENT: Final = -2  # what a scope names that no cached row has

# Where a read snapshot stands: the generation, the last change logged (AUTOINCREMENT's
# record, kept when the log is pruned), and the change the log has been pruned through.
SNAPSHOT_POSITION: Final = (
    "SELECT (SELECT generation FROM vector_generation WHERE id = 1),"
    " coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'vector_changes'), 0),"
    " (SELECT through FROM vector_changes_pruned WHERE id = 1)"
)
CHANGED_ROWIDS: Final = (
    "SELECT DISTINCT event_rowid FROM vector_changes WHERE id > :after ORDER BY event_rowid"
)
_QUALIFIES = " e.type = 'MESSAGE' AND e.embedding IS NOT NULL AND length(e.embedding) = :width"
_BY_MODEL = " AND e.embedding_model = :model"
_COLUMNS = "SELECT e.rowid, e.embedding, e.session_id, e.role FROM events e WHERE"
ALL_VECTORS: Final = {
    False: _COLUMNS + _QUALIFIES + " ORDER BY e.rowid",
    True: _COLUMNS + _QUALIFIES + _BY_MODEL + " ORDER BY e.rowid",
}
COUNT_VECTORS: Final = {
    False: "SELECT count(*) FROM events e WHERE" + _QUALIFIES,
    True: "SELECT count(*) FROM events e WHERE" + _QUALIFIES + _BY_MODEL,
}
_OF_ROWIDS = " AND e.rowid IN (SELECT value FROM json_each(:rowids))"
VECTORS_OF_ROWIDS: Final = {
    False: _COLUMNS + _QUALIFIES + _OF_ROWIDS + " ORDER BY e.rowid",
    True: _COLUMNS + _QUALIFIES + _BY_MODEL + _OF_ROWIDS + " ORDER BY e.rowid",
}
SESSION_OWNERS: Final = (
    "SELECT id, owner_id FROM sessions WHERE id IN (SELECT value FROM json_each(:ids))"
)


def shortlist(k: int) -> int:
    """How many rows the int8 step hands to the exact ranking for a top ``k``."""
    return max(64, 4 * k)


def sign_words(matrix: Matrix) -> npt.NDArray[np.uint64]:
    """Each row's signs (1 for a positive value) packed into 64-bit words."""
    rows, width = matrix.shape
    packed = np.packbits(matrix > 0, axis=1)
    padded = np.zeros((rows, 8 * -(-width // 64)), dtype=np.uint8)
    padded[:, : packed.shape[1]] = packed
    return padded.view(np.uint64)


def quantised(matrix: Matrix) -> tuple[npt.NDArray[np.int8], Scores]:
    """Each row as int8 values and the scale that gives them back (row ≈ scale x codes)."""
    scales = (np.abs(matrix).max(axis=1) / 127.0).astype(np.float32)
    scales[scales == 0.0] = 1.0
    codes = np.rint(matrix / scales[:, None]).astype(np.int8)
    return codes, scales


class _VectorTable:
    """The vectors of one key as of one change, in slots.

    Slots below ``ordered`` are in rowid order; the rest (rows appended out of order)
    are found by a linear search, and both are merged when that tail grows. A deleted
    row's slot is dead until it is reused by its rowid or the table is compacted.
    """

    _ARRAYS = ("rowids", "live", "codes", "scales", "norms", "sessions", "owners", "roles")

    def __init__(self, key: CacheKey, generation: int, change: int, capacity: int) -> None:
        self.key = key
        self.generation = generation
        self.change = change  # the last logged change applied
        self.count = 0
        self.ordered = 0
        self.dead = 0
        width = key[1]
        self.rowids: Rowids = np.empty(capacity, dtype=np.int64)
        self.live = np.empty(capacity, dtype=np.bool_)
        self.signs = np.empty((-(-width // 64), capacity), dtype=np.uint64)  # by word
        self.codes = np.empty((capacity, width), dtype=np.int8)
        self.scales: Scores = np.empty(capacity, dtype=np.float32)
        self.norms: Scores = np.empty(capacity, dtype=np.float32)
        self.sessions = np.empty(capacity, dtype=np.int32)
        self.owners = np.empty(capacity, dtype=np.int32)
        self.roles = np.empty(capacity, dtype=np.int8)
        self.session_codes: dict[str, int] = {}
        self.session_owners: list[int] = []  # by session code
        self.owner_codes: dict[str, int] = {}
        self.role_codes: dict[str, int] = {}

    # ------------------------------------------------------------ following the log

    def load_all(self, connection: Connection) -> None:
        model, width = self.key
        parameters = {"width": 4 * width, "model": model}
        cursor = connection.execute(ALL_VECTORS[model is not None], parameters)
        while rows := cursor.fetchmany(_FETCH):
            self._append(connection, rows)

    def apply_changes(self, connection: Connection, upto: int) -> None:
        """Bring the table from its change to ``upto``: every row named since is
        forgotten, then read again if it is still a vector of the key."""
        changed = [row[0] for row in connection.execute(CHANGED_ROWIDS, {"after": self.change})]
        model, width = self.key
        for start in range(0, len(changed), _FETCH):
            chunk = np.array(changed[start : start + _FETCH], dtype=np.int64)
            slots = self._slots_of(chunk)
            self.dead += int(np.count_nonzero(self.live[slots]))
            self.live[slots] = False
            parameters = {"width": 4 * width, "model": model, "rowids": json.dumps(chunk.tolist())}
            rows = connection.execute(VECTORS_OF_ROWIDS[model is not None], parameters).fetchall()
            if rows:
                self._put(connection, rows, slots, chunk)
        self.change = upto
        if 4 * self.dead > self.count or self.count - self.ordered > max(1024, self.count // 16):
            self._compact()

    def _slots_of(self, rowids: Rowids) -> Positions:
        """The slots holding any of ``rowids`` (sorted), live or dead."""
        ordered = self.rowids[: self.ordered]
        at = np.searchsorted(ordered, rowids)
        inside = at < self.ordered
        found = at[inside][ordered[at[inside]] == rowids[inside]]
        tail = self.ordered + np.flatnonzero(
            np.isin(self.rowids[self.ordered : self.count], rowids)
        )
        return np.concatenate([found, tail]).astype(np.intp)

    def _put(
        self, connection: Connection, rows: list[Any], slots: Positions, rowids: Rowids
    ) -> None:
        """Write ``rows`` (in rowid order) to their old slots, or append them."""
        slot_of = dict(zip(self.rowids[slots].tolist(), slots.tolist(), strict=True))
        reused = [(index, slot_of[row[0]]) for index, row in enumerate(rows) if row[0] in slot_of]
        new = [row for row in rows if row[0] not in slot_of]
        if reused:
            self.dead -= len(reused)
            indexes = [index for index, _ in reused]
            self._write(
                connection, [rows[index] for index in indexes], np.array([s for _, s in reused])
            )
        if new:
            self._append(connection, new)

    def _append(self, connection: Connection, rows: list[Any]) -> None:
        start, end = self.count, self.count + len(rows)
        self._reserve(end)
        in_order = self.ordered == self.count and (
            start == 0 or rows[0][0] > self.rowids[start - 1]
        )
        self._write(connection, rows, np.arange(start, end))
        self.count = end
        if in_order:
            self.ordered = end

    def _write(self, connection: Connection, rows: list[Any], slots: Positions) -> None:
        matrix = from_blobs([row[1] for row in rows], self.key[1])
        self.rowids[slots] = [row[0] for row in rows]
        self.live[slots] = True
        self.signs[:, slots] = sign_words(matrix).T
        self.codes[slots], self.scales[slots] = quantised(matrix)
        self.norms[slots] = row_norms(matrix)
        self._learn_sessions(connection, {row[2] for row in rows})
        sessions = [self.session_codes[row[2]] for row in rows]
        self.sessions[slots] = sessions
        self.owners[slots] = [self.session_owners[code] for code in sessions]
        codes = self.role_codes
        self.roles[slots] = [codes.setdefault(row[3], len(codes)) for row in rows]

    def _reserve(self, rows: int) -> None:
        capacity = self.rowids.shape[0]
        if rows > capacity:
            self._resize(np.arange(self.count), max(rows, capacity + capacity // 2))

    def _compact(self) -> None:
        """Drop the dead slots and put the rest in rowid order."""
        keep = np.flatnonzero(self.live[: self.count])
        keep = keep[np.argsort(self.rowids[keep], kind="stable")]
        self._resize(keep, len(keep) + len(keep) // 8 + 64)
        self.count = self.ordered = len(keep)
        self.dead = 0

    def _resize(self, keep: Positions, capacity: int) -> None:
        for name in self._ARRAYS:
            old = getattr(self, name)
            new = np.empty((capacity, *old.shape[1:]), dtype=old.dtype)
            new[: len(keep)] = old[keep]
            setattr(self, name, new)
        signs = np.empty((self.signs.shape[0], capacity), dtype=np.uint64)
        signs[:, : len(keep)] = self.signs[:, keep]
        self.signs = signs

    def _learn_sessions(self, connection: Connection, session_ids: set[str]) -> None:
        """Code the sessions not seen yet, and their owners (a change of owner moves the
        generation, which rebuilds the table)."""
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

    # ------------------------------------------------------------ ranking

    def _in_scope(
        self, owner_id: str | None, session_id: str | None, roles: tuple[Role, ...] | None
    ) -> npt.NDArray[np.bool_] | None:
        """Which slots are live rows in scope; None when every slot is."""
        count = self.count
        keep = None if self.dead == 0 else self.live[:count]
        session = None if session_id is None else self.session_codes.get(session_id, _ABSENT)
        owner = None if owner_id is None else self.owner_codes.get(owner_id, _ABSENT)
        for column, code in ((self.sessions, session), (self.owners, owner)):
            if code is not None:
                matches = column[:count] == code
                keep = matches if keep is None else keep & matches
        if roles is not None:
            role_codes = [self.role_codes[r.value] for r in roles if r.value in self.role_codes]
            matches = np.isin(self.roles[:count], role_codes)
            keep = matches if keep is None else keep & matches
        return keep

    def shortlisted(
        self,
        vector: Sequence[float],
        metric: Metric,
        k: int,
        owner_id: str | None,
        session_id: str | None,
        roles: tuple[Role, ...] | None,
    ) -> Rowids:
        """The rowids, in rowid order, of the rows in scope the exact ranking must see
        for the top ``k`` (see the module)."""
        keep = self._in_scope(owner_id, session_id, roles)
        rows = None if keep is None else np.flatnonzero(keep)
        size = self.count if rows is None else rows.shape[0]
        if size <= shortlist(k):
            return np.sort(self.rowids[: self.count] if rows is None else self.rowids[rows])
        query = np.asarray(vector, dtype=np.float32)
        if size > SIGNS_FROM:
            rows = self._nearest_by_signs(query, rows, size, keep)
        elif rows is None:
            rows = np.arange(self.count)
        return np.sort(self.rowids[self._best_by_codes(query, metric, rows, shortlist(k))])

    def _nearest_by_signs(
        self,
        query: Matrix,
        rows: Positions | None,
        in_scope: int,
        keep: npt.NDArray[np.bool_] | None,
    ) -> Positions:
        """The rows (all when None; ``in_scope`` of them) nearest ``query`` by signs."""
        # Every row is scored when the scope holds half of them: cheaper than gathering.
        whole = rows is None or 2 * in_scope >= self.count
        query_words = sign_words(query[None, :])[0][:, None]
        size = self.count if whole else in_scope
        distances = np.empty(size, dtype=np.uint16)
        # In blocks that stay in the CPU's cache: three passes over each.
        words = self.signs.shape[0]
        xored = np.empty((words, _BLOCK), dtype=np.uint64)
        bits = np.empty((words, _BLOCK), dtype=np.uint8)
        for start in range(0, size, _BLOCK):
            end = min(size, start + _BLOCK)
            block = (
                self.signs[:, start:end]
                if rows is None or whole
                else self.signs[:, rows[start:end]]
            )
            width = end - start
            np.bitwise_xor(block, query_words, out=xored[:, :width])
            np.bitwise_count(xored[:, :width], out=bits[:, :width])
            bits[:, :width].sum(axis=0, dtype=np.uint16, out=distances[start:end])
        far = 64 * words + 1  # beyond any distance
        if whole and keep is not None:
            distances[~keep] = far
        wanted = max(SIGNS_KEEP, in_scope // _SIGNS_SHARE)
        # Distances are small integers: the threshold comes from their histogram, and
        # every row at it is kept.
        counts = np.cumsum(np.bincount(distances, minlength=far + 1)[:far])
        threshold = int(np.searchsorted(counts, wanted))
        chosen = np.flatnonzero(distances <= threshold)
        return chosen if rows is None or whole else rows[chosen]

    def _best_by_codes(
        self, query: Matrix, metric: Metric, rows: Positions, wanted: int
    ) -> Positions:
        # einsum, not a matrix product: on a busy machine BLAS's threads spin for longer
        # than this product takes on one core.
        dots = np.einsum("ij,j->i", self.codes[rows], query) * self.scales[rows]
        norms = self.norms[rows]
        query_norm = float(np.linalg.norm(query))
        if metric == "cosine":
            lengths = norms * query_norm
            approximate = dots / np.where(lengths == 0.0, 1.0, lengths)
        else:
            approximate = 2.0 * dots - norms * norms  # - |row - query|^2 + |query|^2
        if approximate.shape[0] <= wanted:
            return rows
        threshold = -np.partition(-approximate, wanted - 1)[wanted - 1]
        chosen: Positions = rows[approximate >= threshold]
        return chosen


class VectorCache:
    """The vectors one store searches (see the module): one table, of the key searched
    last, shared by the store's search threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: _VectorTable | None = None

    def shortlisted(
        self,
        connection: Connection,
        key: CacheKey,
        vector: Sequence[float],
        metric: Metric,
        k: int,
        owner_id: str | None,
        session_id: str | None,
        roles: tuple[Role, ...] | None,
    ) -> Rowids | None:
        """`_VectorTable.shortlisted` on the table brought to the read snapshot of
        ``connection``; None when that snapshot is older than the table (the caller
        then scans the database)."""
        generation, change, pruned = connection.execute(SNAPSHOT_POSITION).fetchone()
        # Held while rows are read: a search that waits needs those rows too.
        with self._lock:
            table = self._table
            if table is not None and table.key == key:
                if table.generation > generation or table.change > change:
                    return None
                if table.generation < generation or table.change < pruned:
                    table = None
            if table is None or table.key != key:
                # The old table goes before the new one is built, so both are not held.
                self._table = None
                table = self._table = _build(connection, key, generation, change)
            elif table.change < change:
                table.apply_changes(connection, change)
            return table.shortlisted(vector, metric, k, owner_id, session_id, roles)

    def clear(self) -> None:
        """Forget every vector (the store is closing)."""
        with self._lock:
            self._table = None


def _build(connection: Connection, key: CacheKey, generation: int, change: int) -> _VectorTable:
    """A table of ``key`` as the snapshot holds it (at ``change``)."""
    model, width = key
    parameters = {"width": 4 * width, "model": model}
    rows = int(connection.execute(COUNT_VECTORS[model is not None], parameters).fetchone()[0])
    # Room for an eighth more, so the appends that follow rarely copy the arrays.
    table = _VectorTable(key, generation, change, rows + rows // 8 + 64)
    table.load_all(connection)
    return table
