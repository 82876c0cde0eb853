"""What a backend implements: `Backend`, every primitive documented.

`convostore.store.Store` is the public API and everything built once on top of it; it
validates and normalises every argument (`convostore.prepare`) and then calls the
primitives below. A backend never re-checks what the store checked, and never repeats
what the store builds (paging cursors, search modes and fusion, embedding, compaction).

Rules every primitive keeps:

- Every write primitive is one transaction: it applies whole or not at all, and a
  primitive that raises has written nothing. Every read sees one consistent state.
- Errors are those of `convostore.errors`; a driver's exception is translated where it
  is caught (``raise StoreError(...) from error``). Only a database that cannot be
  reached or used right now (connection refused or lost, busy past the timeout, disk
  full, I/O error, cannot open) is `BackendUnavailableError`: a bug (a syntax error, a
  missing column) is a plain `StoreError`, so a test net can never mistake it for a
  missing server.
- Times are aware UTC datetimes, microsecond exact, whatever the process's zone.
- **The stamp.** ``Session.stamp`` changes on every write to the session: `append`
  (whatever it adds), `update_session`, `set_title`. Writes to one message
  (`set_narration`, `set_embeddings`) change that message's ``stamp`` and leave the
  session's stamp, version and ``last_activity_at`` alone. The new stamp is given by the
  store (``new_stamp`` fields and arguments); a backend stores it as given.
- **Text tokens.** Text search matches `convostore.embedding.text_tokens`: case folded
  (``"STRASSE"`` is ``"strasse"``), compatibility-decomposed (``"ﬁ"`` is ``"fi"``),
  diacritics dropped, split into runs of word characters. A backend indexes the tokens
  of each message's content the same way (or keeps a scan that does), so every backend
  finds the same messages for the same terms.
- **Read no more than the answer needs.** `read` with ``last``, ``after_seq``/``limit``,
  ``since``/``until`` or ``types`` is answered from the database's indexes: its cost
  grows with the answer, not with the length of the log (``last=n`` on a log of a
  million events reads about n events plus the turn it extends into).
- **Metadata index.** The keys indexed for `find_sessions_by_metadata` belong to the
  database, not to a store: `add_indexed_keys` (run at every connect) adds and
  backfills keys, only `remove_indexed_key` (an explicit call) drops one; every store
  sees the keys another store added or dropped (`indexed_keys`). A write's
  ``indexed_metadata`` (of `NewSession` / `SessionChanges`) holds candidate entries,
  one per indexable top-level key of the metadata, whatever the store believes is
  indexed; the write keeps those whose key the database indexes when it commits, read
  in the write's own transaction (or query), and replaces the session's old entries.
  A key add or drop and a session write must never interleave so as to leave a session
  out of the index or an entry of a dropped key in it: either the write commits before
  the key change reads the sessions, or it reads the keys after the change committed
  (`convostore.backends.sql.statements` says how the SQL backends lock for it).
  Values are compared as strings in full.
- **Expiry.** A session is expired at ``t`` iff ``expires_at < t``. Deleting a session
  (by `delete_session` or `delete_expired`) deletes its parts and all their events,
  whatever the parts' own expiry; a part that expires alone is deleted alone.

A backend registers its URL schemes in `convostore.backends.registry` (or, outside
this package, through the entry-point group ``convostore.backends``) and passes the
contract suite, `convostore.testing`.
"""

from __future__ import annotations

import abc
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, Self, TypeVar

from convostore.backends import spi
from convostore.backends.spi import SearchScope, TextQuery, VectorQuery
from convostore.cursors import Keyset
from convostore.filters import EventFilter

__all__ = [
    "Backend",
    "Capabilities",
    "Connected",
    "DatabaseStats",
    "SearchScope",
    "SessionPage",
    "TextQuery",
    "VectorQuery",
    "closed_on_failure",
    "closing",
]

log = logging.getLogger("convostore")


class _Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


@contextlib.asynccontextmanager
async def closing(resource: C) -> AsyncIterator[C]:
    """``resource`` (a backend, a connection, a pool), closed when the block ends, however
    it ends: what `Backend.pending_migrations` opens to read."""
    try:
        yield resource
    finally:
        await resource.close()


@contextlib.asynccontextmanager
async def closed_on_failure(resource: C) -> AsyncIterator[C]:
    """``resource``, closed if the block raises (cancelled too), kept open otherwise: how
    `Backend.open` releases what it opened before a failure."""
    try:
        yield resource
    except BaseException:
        await resource.close()
        raise


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend offers beyond the contract every backend meets.

    - ``persistent``: data survives closing the store and connecting again.
    - ``native_vector_index``: vector search runs on an index rather than a scan.
    - ``full_text_index``: text search runs on a full-text index rather than a scan.
    - ``cross_process``: several processes may open the same database at once.
    """

    persistent: bool
    native_vector_index: bool = False
    full_text_index: bool = False
    cross_process: bool = False


@dataclass(frozen=True, slots=True)
class Connected:
    """What `Backend.after_connect` found: the metadata keys the database indexes, the
    vector index in force, and why the embedder's index could not be used (or None)."""

    indexed_metadata: frozenset[str]
    vector_index: spi.VectorIndexSpec | None
    vector_index_drift: str | None


@dataclass(frozen=True, slots=True)
class DatabaseStats:
    """What a whole database holds: users, sessions (parts included), events, the
    MESSAGE events among them and those that carry a vector, and the bytes the database
    takes (tables and indexes; None where nothing is on disk or the database does not
    say)."""

    users: int
    sessions: int
    events: int
    messages: int
    vectors: int
    size_bytes: int | None


@dataclass(frozen=True, slots=True)
class SessionPage:
    """A page `Backend.list_sessions` reads: up to ``limit`` of the owner's sessions
    strictly after ``after`` (None: from the start) in ``order``, as ``filter`` says."""

    owner_id: str
    order: spi.SessionOrder
    after: Keyset | None
    limit: int
    filter: spi.SessionFilter


class Backend(abc.ABC):
    """One database behind a `convostore.Store`. See the module for the rules every
    primitive keeps; each primitive's docstring says what it must do."""

    capabilities: Capabilities

    # ---------------------------------------------------------------- lifecycle

    @classmethod
    @abc.abstractmethod
    async def open(cls, url: str, **options: Any) -> Self:
        """Connect to the database ``url`` names, creating what is missing, and migrate
        its schema (versioned migrations recorded in the database; a schema newer than
        this code knows raises `SchemaVersionError` and writes nothing). ``options`` are
        the backend's own (an unknown one is `InvalidArgumentError`). A failure releases
        whatever was opened before raising."""

    @classmethod
    @abc.abstractmethod
    async def pending_migrations(cls, url: str, **options: Any) -> list[str]:
        """The schema migrations `open` would apply to the database ``url`` names,
        oldest first, one line each (`convostore.backends.migrations.describe`); [] when
        its schema is current. Reads only: creates and migrates nothing, not even a
        missing database or schema (which has every migration pending). A schema newer
        than this code knows raises `SchemaVersionError`."""

    async def after_connect(
        self, indexed_metadata: Iterable[str], vector_index: spi.VectorIndexSpec | None
    ) -> Connected:
        """What every backend runs once connected: index the metadata keys named (added
        to those the database already indexes, and backfilled), then ensure the vector
        index ``vector_index`` declares (idempotent). A stored index of another width is
        reported as drift, never dropped; `Store.reembed` rebuilds it. Without an
        embedder the index in force is the stored one."""
        keys = await self.add_indexed_keys(frozenset(indexed_metadata))
        stored = await self.vector_index_spec()
        if vector_index is None:
            return Connected(keys, stored, None)
        if stored is not None and stored.dimensions != vector_index.dimensions:
            drift = (
                f"the vector index holds {stored.dimensions}-wide vectors of "
                f"{stored.model!r} but the embedder {vector_index.model!r} gives "
                f"{vector_index.dimensions}: run reembed() to rebuild it"
            )
            log.warning("vector index drift: %s", drift)
            return Connected(keys, vector_index, drift)
        await self.declare_vector_index(
            vector_index, replace=stored is not None and stored != vector_index
        )
        return Connected(keys, vector_index, None)

    @abc.abstractmethod
    async def close(self) -> None:
        """Release every connection and thread. Called once, by the store."""

    @abc.abstractmethod
    async def stats(self) -> DatabaseStats:
        """Counts over the whole database, every owner's sessions included, in one
        consistent read (see `DatabaseStats`)."""

    def release_when_dropped(self) -> Callable[[], None] | None:
        """What releases this backend's threads and connections, without an event loop,
        if its store is collected without `close` (the store then warns with a
        `ResourceWarning`); it must not refer to the store. None when nothing would
        outlive the store."""
        return None

    # ---------------------------------------------------------------- users

    @abc.abstractmethod
    async def put_user(self, user: spi.User) -> None:
        """Insert the user, or overwrite every field of the stored one with that id."""

    @abc.abstractmethod
    async def get_user(self, user_id: str) -> spi.User | None:
        """The stored user, or None."""

    # ---------------------------------------------------------------- sessions

    @abc.abstractmethod
    async def insert_session(self, new: spi.NewSession, *, if_absent: bool) -> spi.Session | None:
        """Insert the users (if absent; a stored user is not overwritten) and the
        session with its metadata index entries (the candidates whose key the database
        indexes at the write: see the module). In this order of checks: an existing
        session id gives None when ``if_absent``, else `SessionExistsError`; a required
        user id neither stored nor given is `UnknownUserError`; ``part_of`` must name an
        existing session (`SessionNotFoundError`) that is top-level and has the same
        owner (`InvalidArgumentError`). Returns the session as stored."""

    @abc.abstractmethod
    async def find_or_insert_part(self, new: spi.NewSession) -> spi.Session:
        """The earliest (smallest id) part of ``new.session.part_of`` held with
        ``new.session.held_with``, or ``new`` inserted as `insert_session` does with the
        parent's owner as its owner (``new.session.owner_id`` is ignored: use
        `convostore.prepare.owned_by_parent`), in one transaction, so concurrent callers
        all settle on the earliest. A missing parent is `SessionNotFoundError`, a parent
        that is itself a part `InvalidArgumentError`."""

    @abc.abstractmethod
    async def get_session(self, session_id: str) -> spi.Session | None:
        """The session, expired or not, or None."""

    @abc.abstractmethod
    async def update_session(self, changes: spi.SessionChanges) -> spi.Session:
        """Write title, metadata (and its index entries, replacing the old ones, for the
        keys the database indexes at the write: see the module) and
        expires_at, and set the stamp to ``changes.new_stamp``, only if the stored stamp
        is ``changes.expected_stamp``, checked in the write itself. A missing session is
        `SessionNotFoundError`, another stamp `StaleObjectError`. Returns it as stored."""

    @abc.abstractmethod
    async def set_title(self, session_id: str, title: str | None, stamp: str) -> spi.Session:
        """Write the title and ``stamp``, whatever the stored stamp; nothing else
        changes. A missing session is `SessionNotFoundError`. Returns it as stored."""

    @abc.abstractmethod
    async def delete_session(self, session_id: str) -> bool:
        """Delete the session, its parts, their events, messages, attachments, data,
        assets, vectors and metadata index entries; never users. False if absent."""

    @abc.abstractmethod
    async def list_sessions(self, page: SessionPage) -> list[spi.Session]:
        """Up to ``page.limit`` of the owner's sessions strictly after ``page.after`` in
        ``page.order``, by keyset on an index (the cost of a page does not grow with its
        position). `SessionOrder.CREATED`: id descending. `SessionOrder.LAST_ACTIVITY`:
        (``last_activity_at``, id) descending. Top-level sessions only unless
        ``filter.include_parts``; ``filter.kind`` keeps that kind."""

    @abc.abstractmethod
    async def list_summaries(self, page: SessionPage) -> list[spi.SessionSummary]:
        """`list_sessions`, each with its owner (None for an ownerless session), message
        count and ``started_by`` (the author of the earliest authored message), all in
        the same query, without reading message bodies."""

    @abc.abstractmethod
    async def count_sessions(self, owner_id: str, filter: spi.SessionFilter) -> int:
        """How many sessions `list_sessions` lists over all its pages."""

    @abc.abstractmethod
    async def find_part(self, part_of: str, held_with: str) -> spi.Session | None:
        """The earliest (smallest id) part of ``part_of`` held with ``held_with``."""

    @abc.abstractmethod
    async def list_parts(self, part_of: str) -> list[spi.SessionSummary]:
        """The parts of ``part_of`` with their summaries, oldest (smallest id) first."""

    @abc.abstractmethod
    async def participants(self, session_id: str) -> list[spi.User]:
        """The stored authors of the session's messages, once each, in the order of
        their first message in the log (``seq``), not by time or id. [] for an unknown
        session."""

    @abc.abstractmethod
    async def find_sessions_by_metadata(self, name: str, value: str) -> list[spi.Session]:
        """Sessions whose index entry for the indexed key ``name`` equals ``value`` in
        full (values of any length; two sharing a long prefix are told apart), oldest
        (smallest id) first."""

    @abc.abstractmethod
    async def delete_expired(self, before: datetime) -> int:
        """Delete every session with ``expires_at < before`` as `delete_session` does,
        each atomically with a check of its expiry in the delete itself, so a session
        whose expiry was extended meanwhile survives. Returns how many expired sessions
        were deleted; parts deleted with their parent are not counted."""

    # ---------------------------------------------------------------- indexed metadata

    @abc.abstractmethod
    async def add_indexed_keys(self, keys: frozenset[str]) -> frozenset[str]:
        """Index ``keys`` too: each key not yet indexed is recorded and backfilled from
        the stored sessions' metadata (values rendered by
        `convostore._json.index_value`, as writes render them; a value no lookup could
        name gets no entry), in one transaction, so that every session write either is
        backfilled or indexes the key itself (see the module). Keys already indexed
        stay. Returns every key the database now indexes."""

    @abc.abstractmethod
    async def remove_indexed_key(self, key: str) -> bool:
        """Stop indexing ``key`` and delete its entries, those of session writes in
        flight included (see the module). False if it was not indexed."""

    async def indexed_keys(self) -> frozenset[str]:
        """Every key the database indexes now, whichever store added it. The store reads
        it again when a lookup names a key it did not know of, or finds nothing (another
        store may have added or dropped that key). By default `add_indexed_keys` with
        no key to add; a backend may read it more cheaply."""
        return await self.add_indexed_keys(frozenset())

    # ---------------------------------------------------------------- the log

    @abc.abstractmethod
    async def append(self, append: spi.PreparedAppend) -> spi.AppendOutcome:
        """Apply the append in one transaction, in this order of checks:
        unknown session -> `SessionNotFoundError`; unknown required user ->
        `UnknownUserError`; for a batch, a version other than ``expected_version`` ->
        ``AppendOutcome(False)``; a single event whose caller-given id is already in
        this log -> ``AppendOutcome(False, [stored event])`` (a retried append: nothing
        written, version kept); an id in another log (or, in a batch, already in this
        one) -> `EventIdConflictError`. Then insert the users (if absent), assign
        consecutive ``seq`` values after the last, add 1 to the version (whatever the
        batch's size), set the stamp to ``new_stamp``, advance ``last_activity_at`` to
        max(stored, ``activity_at``) (never backwards), add ``new_message_count``, set
        ``started_by`` if unset, and return the events as stored."""

    @abc.abstractmethod
    async def version(self, session_id: str) -> int:
        """The log's version; 0 for an unknown session."""

    @abc.abstractmethod
    async def read(self, session_id: str, event_filter: EventFilter) -> list[spi.Event]:
        """Exactly what `convostore.filters.apply_filter` gives over the log (over
        `convostore.filters.active_view` of it when ``event_filter.active_view``), from
        one consistent snapshot, reading no more of the log than the answer needs (see
        the module). [] for an unknown session."""

    @abc.abstractmethod
    async def set_narration(
        self, session_id: str, message_id: str, text: str | None, stamp: str
    ) -> bool:
        """Set (or clear) the narration of a message of that session and its stamp to
        ``stamp``. False, and nothing written, for a message not in that session."""

    # ---------------------------------------------------------------- vectors and text

    @abc.abstractmethod
    async def vector_index_spec(self) -> spi.VectorIndexSpec | None:
        """The vector index recorded in the database, or None."""

    @abc.abstractmethod
    async def declare_vector_index(self, spec: spi.VectorIndexSpec, *, replace: bool) -> None:
        """Record ``spec`` (and build a native index for it) if none is recorded; with
        ``replace``, drop what is recorded first. Stored vectors are never dropped."""

    async def begin_reembed(self, spec: spi.VectorIndexSpec) -> bool:
        """Point the vector index at ``spec`` before a `Store.reembed` run; True when
        that recreated it. A backend whose native index is cheaper to build once over
        every vector may defer building it to `end_reembed`."""
        if await self.vector_index_spec() == spec:
            return False
        await self.declare_vector_index(spec, replace=True)
        return True

    async def end_reembed(self, spec: spi.VectorIndexSpec) -> None:
        """After a `Store.reembed` run, however it ended: the index of ``spec`` stands."""
        await self.declare_vector_index(spec, replace=False)

    @abc.abstractmethod
    async def pending_embeddings(
        self, model: str, roles: Sequence[spi.Role], after: str | None, limit: int
    ) -> list[spi.PendingEmbedding]:
        """Up to ``limit`` messages of ``roles`` with non-blank content and no vector of
        ``model``, by message id ascending, ids greater than ``after``."""

    @abc.abstractmethod
    async def count_pending_embeddings(self, model: str, roles: Sequence[spi.Role]) -> int:
        """How many messages `pending_embeddings` would give over all its pages."""

    @abc.abstractmethod
    async def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]], stamp: str
    ) -> None:
        """Store each message's vector and model (replacing any), its stamp becoming
        ``stamp`` (the store's: no backend makes stamps), in one transaction. Ids of
        messages deleted meanwhile are skipped."""

    @abc.abstractmethod
    async def vector_search(self, query: spi.VectorQuery) -> list[spi.SearchHit]:
        """The ``query.k`` messages nearest ``query.vector`` among those with a vector of
        ``query.model`` (any model when None) and the same width, in the scope (applied
        before ranking, so a narrow scope still gives k hits), best first, scored as
        `convostore._vectors.top_k` scores."""

    @abc.abstractmethod
    async def text_search(self, query: spi.TextQuery) -> list[spi.SearchHit]:
        """Up to ``query.k`` messages in the scope whose content's text tokens (see the
        module) hold every one of ``query.terms`` (already tokens), best first."""
