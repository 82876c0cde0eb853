"""The vectors a store searches, held in memory in compact form, kept current from a
change feed: shared by the SQL backends that have no vector index of their own (SQLite,
MySQL / MariaDB; Redis and Valkey without vector sets). No I/O here: each backend
answers the cache's requests (`ReadPosition`, `CountVectors`, `VectorsAfter`,
`ChangesAfter`, `VectorsOf`, `SessionsOf`) from its own database, in one read snapshot,
through a `Feed` that `run` (a blocking driver) or `run_async` (an asyncio one) calls.

A `VectorTable` keeps, for the (model, width) searched, every vector's row id, its signs
as bits (width / 8 bytes), the vector quantised to int8 with its scale (width + 4
bytes), its exact norm, and codes for its session, owner and role: about 460 bytes for
384 dimensions, against 1,557 for a float32 copy.

**The change feed.** A backend numbers the changes to the vectors with positions that
grow in commit order, so a read snapshot holds every change up to its position and none
after (SQLite: writes are serialised; MySQL: see `convostore.backends.mysql.vector_feed`).
A change names a row whose vector appeared, changed or went, or a session that was
deleted with its parts and vectors. A table remembers the position it holds; each
search first applies the changes after it: every row named is forgotten and read again
if it is still a vector of the key; every session named is forgotten with its parts,
and its vectors in the snapshot read again (a session deleted and created anew under
its id). So inserts, deletes, expiry and re-embedding by any connection or process cost
what they change, not a rebuild. A table rebuilds when the feed was pruned past its
position or its generation moved (a session changed owner).

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

import abc
import asyncio
import threading
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import numpy as np
import numpy.typing as npt

from convostore._vectors import Matrix, Scores, from_blobs, row_norms
from convostore.backends import spi
from convostore.model import Role

__all__ = [
    "SIGNS_FROM",
    "SIGNS_KEEP",
    "CacheKey",
    "Changes",
    "ChangesAfter",
    "CountVectors",
    "Feed",
    "Position",
    "ReadPosition",
    "Request",
    "SessionsOf",
    "VectorCache",
    "VectorRow",
    "VectorTable",
    "VectorsAfter",
    "VectorsOf",
    "key_of",
    "key_parameters",
    "run",
    "run_async",
    "shortlist",
]

T = TypeVar("T")

CacheKey = tuple[str | None, int]
"""The model searched (None: every model) and the width of its vectors."""
VectorRow = tuple[int, bytes, str, str]
"""A vector of the key: its row id, its float32 blob, its session's id and its role."""
SessionRow = tuple[str, str | None, str | None]
"""A session: its id, its owner's id and the session it is a part of."""

Rowids = npt.NDArray[np.int64]
Positions = npt.NDArray[np.intp]

SIGNS_FROM: Final = 8_192
SIGNS_KEEP: Final = 2_048
_SIGNS_SHARE: Final = 256  # step 1 keeps the nearest 1/256 of the scope
_BLOCK: Final = 32_768  # rows per block of step 1
FETCH: Final = 4096  # rows read from the database per request
_NO_OWNER: Final = -1
_ABSENT: Final = -2  # what a scope names that no cached row has


# ---------------------------------------------------------------------------- the feed


@dataclass(frozen=True, slots=True)
class Position:
    """Where a read snapshot stands in the feed."""

    generation: int  # moves when every table must be rebuilt
    change: int  # the last change the snapshot holds
    pruned: int  # the feed holds the changes after this one only


@dataclass(frozen=True, slots=True)
class Changes:
    """The changes after a position: rows (ascending, distinct) and sessions deleted."""

    rowids: list[int]
    sessions: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReadPosition:
    """-> `Position`: where the snapshot stands."""


@dataclass(frozen=True, slots=True)
class CountVectors:
    """-> int: how many vectors of ``key`` the snapshot holds."""

    key: CacheKey


@dataclass(frozen=True, slots=True)
class VectorsAfter:
    """-> list[VectorRow]: the first ``limit`` vectors of ``key`` with row ids above
    ``after``, in row id order."""

    key: CacheKey
    after: int
    limit: int


@dataclass(frozen=True, slots=True)
class ChangesAfter:
    """-> `Changes`: the changes the snapshot holds after ``change``."""

    change: int


@dataclass(frozen=True, slots=True)
class VectorsOf:
    """-> list[VectorRow]: the vectors of ``key`` among the rows ``rowids`` and the
    events of the sessions ``sessions`` and of their parts, in row id order."""

    key: CacheKey
    rowids: list[int]
    sessions: list[str]


@dataclass(frozen=True, slots=True)
class SessionsOf:
    """-> list[SessionRow]: those of the sessions ``ids`` the snapshot holds."""

    ids: list[str]


Request = ReadPosition | CountVectors | VectorsAfter | ChangesAfter | VectorsOf | SessionsOf
Steps = Generator[Request, Any, T]


class Feed(abc.ABC):
    """A backend's answers to the cache's requests, one method a request, each read in
    the snapshot the feed stands for. A feed is the ``answer`` of `run` (its methods
    return their answers) or of `run_async` (its methods are coroutines)."""

    def __call__(self, request: Request) -> Any:
        if isinstance(request, ReadPosition):
            return self.position()
        if isinstance(request, ChangesAfter):
            return self.changes_after(request.change)
        if isinstance(request, SessionsOf):
            return self.sessions_of(request.ids)
        model, width = request.key
        if isinstance(request, CountVectors):
            return self.count_vectors(model, width)
        if isinstance(request, VectorsAfter):
            return self.vectors_after(model, width, request.after, request.limit)
        return self.vectors_of(model, width, request.rowids, request.sessions)

    @abc.abstractmethod
    def position(self) -> Any:
        """The answer to `ReadPosition`."""

    @abc.abstractmethod
    def changes_after(self, change: int) -> Any:
        """The answer to `ChangesAfter`."""

    @abc.abstractmethod
    def sessions_of(self, ids: list[str]) -> Any:
        """The answer to `SessionsOf`."""

    @abc.abstractmethod
    def count_vectors(self, model: str | None, width: int) -> Any:
        """The answer to `CountVectors` of the key (``model``, ``width``)."""

    @abc.abstractmethod
    def vectors_after(self, model: str | None, width: int, after: int, limit: int) -> Any:
        """The answer to `VectorsAfter`."""

    @abc.abstractmethod
    def vectors_of(
        self, model: str | None, width: int, rowids: list[int], sessions: list[str]
    ) -> Any:
        """The answer to `VectorsOf`."""


def key_parameters(model: str | None, width: int) -> dict[str, Any]:
    """The bound parameters of a key for a SQL feed: ``model`` and the blob's length in
    bytes (``width``)."""
    return {"width": 4 * width, "model": model}


def run(steps: Steps[T], answer: Callable[[Request], Any]) -> T:
    """Drive ``steps`` with a blocking ``answer`` to each request; what they return."""
    try:
        request = next(steps)
        while True:
            request = steps.send(answer(request))
    except StopIteration as done:
        result: T = done.value
        return result


async def run_async(steps: Steps[T], answer: Callable[[Request], Awaitable[Any]]) -> T:
    """`run` with an asyncio ``answer``."""
    try:
        request = next(steps)
        while True:
            request = steps.send(await answer(request))
    except StopIteration as done:
        result: T = done.value
        return result


def key_of(search: spi.VectorQuery) -> CacheKey:
    """The key of the vectors ``search`` ranks: its model and its vector's width."""
    return (search.model, len(search.vector))


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


# ---------------------------------------------------------------------------- the table


class VectorTable:
    """The vectors of one key as of one position, in slots.

    Slots below ``ordered`` are in row id order; the rest (rows appended out of order)
    are found by a linear search, and both are merged when that tail grows. A forgotten
    row's slot is dead until it is reused by its row id or the table is compacted.
    """

    _ARRAYS = ("rowids", "live", "codes", "scales", "norms", "sessions", "owners", "roles")

    def __init__(self, key: CacheKey, generation: int, change: int, capacity: int) -> None:
        self.key = key
        self.generation = generation
        self.change = change  # the last change applied
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
        self.parents: dict[str, str] = {}  # part -> the session it is a part of
        self.owner_codes: dict[str, int] = {}
        self.role_codes: dict[str, int] = {}

    # ------------------------------------------------------------ following the feed

    def load_all(self) -> Steps[None]:
        """Read every vector of the key, page by page."""
        after = -1
        while rows := (yield VectorsAfter(self.key, after, FETCH)):
            yield from self._learn_sessions(rows)
            self._append(rows)
            after = rows[-1][0]

    def apply(self, upto: int) -> Steps[None]:
        """Bring the table from its change to ``upto`` (see the module)."""
        changes: Changes = yield ChangesAfter(self.change)
        if changes.sessions:
            self._forget_sessions(changes.sessions)
        rowids = changes.rowids
        for start in range(0, max(len(rowids), 1 if changes.sessions else 0), FETCH):
            chunk = np.array(rowids[start : start + FETCH], dtype=np.int64)
            slots = self._slots_of(chunk)
            self.dead += int(np.count_nonzero(self.live[slots]))
            self.live[slots] = False
            sessions = changes.sessions if start == 0 else []
            rows = yield VectorsOf(self.key, chunk.tolist(), sessions)
            if sessions and rows:
                # Rows read for a session may be held under other slots: those go too.
                held = self._slots_of(np.array([row[0] for row in rows], dtype=np.int64))
                self.dead += int(np.count_nonzero(self.live[held]))
                self.live[held] = False
                slots = np.union1d(slots, held)
            if rows:
                yield from self._learn_sessions(rows)
                self._put(rows, slots)
        self.change = upto
        if 4 * self.dead > self.count or self.count - self.ordered > max(1024, self.count // 16):
            self._compact()

    def _forget_sessions(self, session_ids: list[str]) -> None:
        """Forget the vectors of these sessions and of their parts, and the sessions
        (coded afresh if they are met again)."""
        gone = set(session_ids)
        gone |= {part for part, parent in self.parents.items() if parent in gone}
        codes = [self.session_codes.pop(s) for s in gone if s in self.session_codes]
        for session_id in gone:
            self.parents.pop(session_id, None)
        if not codes:
            return
        slots = np.flatnonzero(
            np.isin(self.sessions[: self.count], codes) & self.live[: self.count]
        )
        self.dead += len(slots)
        self.live[slots] = False

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

    def _put(self, rows: list[VectorRow], slots: Positions) -> None:
        """Write ``rows`` (in row id order) to their old slots, or append them."""
        slot_of = dict(zip(self.rowids[slots].tolist(), slots.tolist(), strict=True))
        reused = [(index, slot_of[row[0]]) for index, row in enumerate(rows) if row[0] in slot_of]
        new = [row for row in rows if row[0] not in slot_of]
        if reused:
            self.dead -= len(reused)
            indexes = [index for index, _ in reused]
            self._write([rows[index] for index in indexes], np.array([s for _, s in reused]))
        if new:
            self._append(new)

    def _append(self, rows: list[VectorRow]) -> None:
        start, end = self.count, self.count + len(rows)
        self._reserve(end)
        in_order = self.ordered == self.count and (
            start == 0 or rows[0][0] > self.rowids[start - 1]
        )
        self._write(rows, np.arange(start, end))
        self.count = end
        if in_order:
            self.ordered = end

    def _write(self, rows: list[VectorRow], slots: Positions) -> None:
        matrix = from_blobs([row[1] for row in rows], self.key[1])
        self.rowids[slots] = [row[0] for row in rows]
        self.live[slots] = True
        self.signs[:, slots] = sign_words(matrix).T
        self.codes[slots], self.scales[slots] = quantised(matrix)
        self.norms[slots] = row_norms(matrix)
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
        """Drop the dead slots and put the rest in row id order."""
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

    def _learn_sessions(self, rows: list[VectorRow]) -> Steps[None]:
        """Code the sessions of ``rows`` not seen yet, with their owners (a change of
        owner moves the generation, which rebuilds the table)."""
        new = list({row[2] for row in rows if row[2] not in self.session_codes})
        if not new:
            return
        found: list[SessionRow] = yield SessionsOf(new)
        known = {row[0]: row for row in found}
        for session_id in new:
            _, owner, parent = known.get(session_id, (session_id, None, None))
            code = _NO_OWNER
            if owner is not None:
                code = self.owner_codes.setdefault(owner, len(self.owner_codes))
            if parent is not None:
                self.parents[session_id] = parent
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

    def shortlisted(self, search: spi.VectorQuery) -> Rowids:
        """The rowids, in rowid order, of the rows in the scope of ``search`` the exact
        ranking must see for its top k (see the module)."""
        scope, k = search.scope, search.k
        keep = self._in_scope(scope.owner_id, scope.session_id, scope.roles)
        rows = None if keep is None else np.flatnonzero(keep)
        size = self.count if rows is None else rows.shape[0]
        if size <= shortlist(k):
            return np.sort(self.rowids[: self.count] if rows is None else self.rowids[rows])
        query = np.asarray(search.vector, dtype=np.float32)
        if size > SIGNS_FROM:
            rows = self._nearest_by_signs(query, rows, size, keep)
        elif rows is None:
            rows = np.arange(self.count)
        chosen = self._best_by_codes(query, search.metric, rows, shortlist(k))
        return np.sort(self.rowids[chosen])

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
        self, query: Matrix, metric: spi.Metric, rows: Positions, wanted: int
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
    last, shared by the store's searches, which take turns on it (`shortlisted` on
    threads, `shortlisted_async` on one event loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._async_lock: asyncio.Lock | None = None
        self._table: VectorTable | None = None

    @property
    def table(self) -> VectorTable | None:
        """The table held (for tests and benchmarks)."""
        return self._table

    def shortlisted(
        self, answer: Callable[[Request], Any], search: spi.VectorQuery
    ) -> Rowids | None:
        """`VectorTable.shortlisted` on the table of the search's key brought to the
        snapshot ``answer`` reads; None when that snapshot is older than the table (the
        caller then scans the database)."""
        # Held while rows are read: a search that waits needs those rows too.
        with self._lock:
            table = run(self._brought_to(key_of(search)), answer)
            return None if table is None else table.shortlisted(search)

    def turn(self) -> asyncio.Lock:
        """The lock an asyncio search holds while it brings the table to its snapshot
        and shortlists (taken before the snapshot begins, the snapshot is never older
        than the table)."""
        if self._async_lock is None:
            self._async_lock = asyncio.Lock()
        return self._async_lock

    async def shortlisted_async(
        self, answer: Callable[[Request], Awaitable[Any]], search: spi.VectorQuery
    ) -> Rowids | None:
        """`shortlisted` with an asyncio ``answer``; the caller holds `turn`."""
        table = await run_async(self._brought_to(key_of(search)), answer)
        return None if table is None else table.shortlisted(search)

    def _brought_to(self, key: CacheKey) -> Steps[VectorTable | None]:
        position: Position = yield ReadPosition()
        table = self._table
        if table is not None and table.key == key:
            if table.generation > position.generation or table.change > position.change:
                return None
            if table.generation < position.generation or table.change < position.pruned:
                table = None
        if table is None or table.key != key:
            # The old table goes before the new one is built, so both are not held.
            self._table = None
            table = yield from build(key, position)
            self._table = table
        elif table.change < position.change:
            yield from table.apply(position.change)
        return table

    def clear(self) -> None:
        """Forget every vector (the store is closing)."""
        self._table = None


def build(key: CacheKey, position: Position) -> Steps[VectorTable]:
    """A table of ``key`` as the snapshot at ``position`` holds it."""
    rows: int = yield CountVectors(key)
    # Room for an eighth more, so the appends that follow rarely copy the arrays.
    table = VectorTable(key, position.generation, position.change, rows + rows // 8 + 64)
    yield from table.load_all()
    return table
