"""The `Store` contract, written once, and what is built on it.

`Store` is the public async API. Its docstrings state what every backend guarantees.
Each public method validates and normalises its arguments here, then calls a small set
of primitives (the abstract ``_`` methods) that a backend implements, each as one
transaction. A backend never re-checks what this module checked.
"""

from __future__ import annotations

import abc
import logging
import re
import warnings
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from convostore import _json
from convostore._time import require_aware, to_micros, utc_now
from convostore.cursors import Keyset, encode_cursor
from convostore.embedding import (
    Embedder,
    EmbeddingFailed,
    Metric,
    PendingEmbedding,
    ReembedReport,
    RoleFilteringEmbedder,
    VectorIndexSpec,
    check_vectors,
    should_embed,
    text_tokens,
)
from convostore.errors import (
    InvalidArgumentError,
    NotIndexedError,
    StoreClosedError,
)
from convostore.filters import (
    EventFilter,
    parse_role,
)
from convostore.model import (
    MESSAGE,
    Event,
    EventWrite,
    Message,
    MessageWrite,
    Page,
    PageRequest,
    Role,
    SearchHit,
    Session,
    SessionFilter,
    SessionOrder,
    SessionSummary,
    User,
    UserRef,
)
from convostore.prepare import (
    AppendOutcome,
    Listing,
    NewSession,
    PreparedAppend,
    SessionChanges,
    check_id,
    check_index_width,
    check_session_filter,
    check_title,
    check_user,
    check_vector,
    new_stamp,
    prepare_append,
    prepare_changes,
    prepare_listing,
    prepare_session,
    user_id_of,
)

if TYPE_CHECKING:
    from convostore.compaction import (
        CompactionOutcome,
        CompactionResult,
        CompactionStrategy,
        CompactionTrigger,
        Summarize,
    )

__all__ = ["MAX_SEARCH_HITS", "Capabilities", "Store"]

MAX_SEARCH_HITS = 1000
SearchMode = Literal["vector", "text", "hybrid"]
# Reciprocal rank fusion: a hit's fused score is the sum of 1 / (RRF_K + rank).
RRF_K = 60

log = logging.getLogger("convostore")
_METADATA_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


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


class Store(abc.ABC):
    """The conversation store: users, sessions, and one ordered log per session.

    Every backend guarantees what these docstrings say. Every write is one transaction:
    it applies whole or not at all. Every wrong call raises an error of
    `convostore.errors` and writes nothing. Times are timezone-aware UTC with
    microsecond precision.
    """

    capabilities: Capabilities

    def __init__(
        self, *, indexed_metadata: Iterable[str] = (), embedder: Embedder | None = None
    ) -> None:
        keys = tuple(dict.fromkeys(indexed_metadata))
        for key in keys:
            if not isinstance(key, str) or not _METADATA_KEY.fullmatch(key):
                raise InvalidArgumentError(f"invalid indexed metadata key {key!r}")
        self.indexed_metadata: frozenset[str] = frozenset(keys)
        self._closed = False
        self._before_close: list[Callable[[], Awaitable[None]]] = []
        self._embedding_failure_listeners: list[Callable[[EmbeddingFailed], None]] = []
        self.embedder: Embedder | None = None if embedder is None else _filtering(embedder)
        self.vector_index: VectorIndexSpec | None = (
            None if embedder is None else VectorIndexSpec.of(embedder)
        )
        self.vector_index_drift: str | None = None
        self._dropped: weakref.finalize[..., Any] | None = None

    # ---------------------------------------------------------------- lifecycle

    url: str = ""
    """The URL the store was opened with, without its password."""

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<{type(self).__name__} {self.url or '(no URL)'}{state}>"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self!r} is closed: open a new store to do more work")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Run the before-close callbacks (conversations flush what is pending), then
        release the backend's connections. Closing twice is harmless; any other call
        after close raises `StoreClosedError`."""
        if self._closed:
            return
        try:
            for callback in list(self._before_close):
                await callback()
        finally:
            self._closed = True
            if self._dropped is not None:
                self._dropped.detach()
            await self._close()

    def before_close(self, callback: Callable[[], Awaitable[None]]) -> Callable[[], None]:
        """Have `close` await ``callback`` before releasing the backend; returns a
        function that removes it."""
        self._before_close.append(callback)
        return lambda: _discard(self._before_close, callback)

    def on_embedding_failed(
        self, listener: Callable[[EmbeddingFailed], None]
    ) -> Callable[[], None]:
        """Call ``listener`` whenever a message is stored without the vector its
        embedder should have given it; returns a function that removes it."""
        self._embedding_failure_listeners.append(listener)
        return lambda: _discard(self._embedding_failure_listeners, listener)

    def _release_when_dropped(self) -> Callable[[], None] | None:
        """What releases the backend's threads and connections if the store is collected
        without `close` (it must not refer to the store); None when there is nothing."""
        return None

    async def _after_connect(self) -> None:
        """Ensure the vector index the embedder declares (idempotent). A stored index
        of another width is reported as drift in ``vector_index_drift``, never dropped;
        `reembed` rebuilds it. From here on, a store collected without `close` releases
        what it holds, with a `ResourceWarning`."""
        self._dropped = weakref.finalize(
            self, _dropped_unclosed, type(self).__name__, self._release_when_dropped()
        )
        stored = await self._vector_index_spec()
        spec = self.vector_index
        if spec is None:
            self.vector_index = stored
            return
        if stored is not None and stored.dimensions != spec.dimensions:
            self.vector_index_drift = (
                f"the vector index holds {stored.dimensions}-wide vectors of "
                f"{stored.model!r} but the embedder {spec.model!r} gives {spec.dimensions}: "
                "run reembed() to rebuild it"
            )
            log.warning("vector index drift: %s", self.vector_index_drift)
            return
        await self._declare_vector_index(spec, replace=stored is not None and stored != spec)

    # ---------------------------------------------------------------- users

    async def put_user(self, user: User) -> User:
        """Insert the user, or overwrite the stored one with the same id."""
        self._check_open()
        user = check_user(user)
        await self._put_user(user)
        return user

    async def get_user(self, user_id: str) -> User | None:
        """The stored user, or None."""
        self._check_open()
        return await self._get_user(check_id(user_id, "user_id"))

    # ---------------------------------------------------------------- sessions

    async def create_session(
        self,
        owner: UserRef | None,
        *,
        session_id: str | None = None,
        title: str | None = None,
        kind: str = "chat",
        part_of: str | None = None,
        held_with: UserRef | None = None,
        metadata: Mapping[str, Any] | None = None,
        expires_at: datetime | None = None,
    ) -> Session:
        """Create a session. ``owner`` and ``held_with`` are `User` values (inserted if
        absent) or ids of stored users (`UnknownUserError` otherwise).

        An existing id raises `SessionExistsError` and leaves that session untouched.
        ``part_of`` must name an existing top-level session (`SessionNotFoundError`
        otherwise) with the same owner (`InvalidArgumentError` otherwise).
        """
        self._check_open()
        new = prepare_session(
            self.indexed_metadata,
            owner,
            session_id,
            title,
            kind,
            part_of,
            held_with,
            metadata,
            expires_at,
        )
        created = await self._insert_session(new, if_absent=False)
        assert created is not None
        return created

    async def create_session_if_absent(
        self,
        owner: UserRef | None,
        *,
        session_id: str,
        title: str | None = None,
        kind: str = "chat",
        part_of: str | None = None,
        held_with: UserRef | None = None,
        metadata: Mapping[str, Any] | None = None,
        expires_at: datetime | None = None,
    ) -> bool:
        """Create the session unless one with this id exists. Atomic: of many
        concurrent calls for one id exactly one returns True."""
        self._check_open()
        new = prepare_session(
            self.indexed_metadata,
            owner,
            session_id,
            title,
            kind,
            part_of,
            held_with,
            metadata,
            expires_at,
        )
        return await self._insert_session(new, if_absent=True) is not None

    async def get_session(self, session_id: str) -> Session | None:
        """The session, or None. Expired sessions are returned until deleted."""
        self._check_open()
        return await self._get_session(check_id(session_id, "session_id"))

    async def update_session(self, session: Session) -> Session:
        """Write ``title``, ``metadata`` and ``expires_at`` of a session read from the
        store, only if its ``stamp`` still matches the stored one; otherwise
        `StaleObjectError` and nothing is written. Returns the session as stored."""
        self._check_open()
        changes = prepare_changes(self.indexed_metadata, session)
        return await self._update_session(changes)

    async def set_title(self, session_id: str, title: str | None) -> Session:
        """Write the title alone. Never conflicts; changes the stamp.
        An unknown session raises `SessionNotFoundError`."""
        self._check_open()
        return await self._set_title(
            check_id(session_id, "session_id"), check_title(title), new_stamp()
        )

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session, the sessions that are part of it, and all their events.
        Users are kept. False when there was no such session."""
        self._check_open()
        return await self._delete_session(check_id(session_id, "session_id"))

    async def list_sessions(
        self,
        owner_id: UserRef,
        page: PageRequest | None = None,
        filter: SessionFilter | None = None,
    ) -> Page[Session]:
        """One page of the owner's (a `User` or an id) sessions, newest first, by keyset
        (page n costs what page 1 costs). Top-level sessions only unless
        ``filter.include_parts``. A page that names no order follows its cursor's."""
        self._check_open()
        listing = prepare_listing(owner_id, page, filter)
        rows = await self._list_sessions(
            listing.owner_id, listing.order, listing.after, listing.size + 1, listing.filter
        )
        return _page(rows, listing, lambda s: s)

    async def list_summaries(
        self,
        owner_id: UserRef,
        page: PageRequest | None = None,
        filter: SessionFilter | None = None,
    ) -> Page[SessionSummary]:
        """`list_sessions`, each session with its owner, message count and first author,
        all computed by the backend's query without loading message bodies."""
        self._check_open()
        listing = prepare_listing(owner_id, page, filter)
        rows = await self._list_summaries(
            listing.owner_id, listing.order, listing.after, listing.size + 1, listing.filter
        )
        return _page(rows, listing, lambda s: s.session)

    async def count_sessions(self, owner_id: UserRef, filter: SessionFilter | None = None) -> int:
        """How many sessions `list_sessions` would list over all its pages (the owner a
        `User` or an id)."""
        self._check_open()
        return await self._count_sessions(
            user_id_of(owner_id, "owner_id"), check_session_filter(filter)
        )

    async def find_part(self, part_of: str, held_with: UserRef) -> Session | None:
        """The earliest session that is part of ``part_of`` and held with that user."""
        self._check_open()
        return await self._find_part(
            check_id(part_of, "part_of"), user_id_of(held_with, "held_with")
        )

    async def find_or_create_part(
        self,
        part_of: str,
        held_with: UserRef,
        *,
        title: str | None = None,
        kind: str = "chat",
    ) -> Session:
        """`find_part`, or a new part owned by the parent's owner. Under a race every
        caller settles on the same, earliest, session. An unknown parent raises
        `SessionNotFoundError`, a parent that is itself a part `InvalidArgumentError`."""
        self._check_open()
        # The owner is the parent's, which the backend reads in the same transaction.
        new = prepare_session(
            self.indexed_metadata, None, None, title, kind, part_of, held_with, None, None
        )
        return await self._find_or_insert_part(new)

    async def list_parts(self, part_of: str) -> list[SessionSummary]:
        """The sessions that are part of ``part_of``, oldest first, with their summaries."""
        self._check_open()
        return await self._list_parts(check_id(part_of, "part_of"))

    async def participants(self, session_id: str) -> list[User]:
        """Everyone who wrote a message in the session, once each, in order of their
        first message. [] for an unknown session."""
        self._check_open()
        return await self._participants(check_id(session_id, "session_id"))

    async def find_sessions_by_metadata(self, name: str, value: Any) -> list[Session]:
        """Sessions whose metadata ``name`` equals ``value``, compared as strings in full
        (a non-string as its compact JSON), oldest first. Only keys named in the store's
        ``indexed_metadata`` can be searched; others raise `NotIndexedError`."""
        self._check_open()
        if name not in self.indexed_metadata:
            raise NotIndexedError(
                f"metadata key {name!r} is not indexed; pass it in connect(..., "
                "indexed_metadata=[...]) to search by it"
            )
        wanted = _json.check_text(_json.index_value(value), "metadata value")
        return await self._find_sessions_by_metadata(name, wanted)

    async def delete_expired(self, before: datetime | None = None) -> int:
        """Delete every session with ``expires_at < before`` (default: now), with its
        parts and events; atomically per session, so a session whose expiry was
        extended concurrently survives. Returns how many expired sessions were deleted
        (their parts are not counted)."""
        self._check_open()
        when = utc_now() if before is None else require_aware(before, "before")
        return await self._delete_expired(when)

    # ---------------------------------------------------------------- the log

    async def add_message(self, session_id: str, message: MessageWrite) -> Message:
        """Append a message (see `append_event`)."""
        if not isinstance(message, MessageWrite):
            raise InvalidArgumentError("add_message takes a MessageWrite")
        event = await self.append_event(session_id, message)
        assert isinstance(event, Message)
        return event

    async def append_event(self, session_id: str, write: MessageWrite | EventWrite) -> Event:
        """Append one event at the end of the log; the store assigns ``seq``, and
        ``created_at`` where the write gives none.

        Idempotent by id: an id already in this log is a retried append, which returns
        the stored event, writes nothing and keeps the version. An id used by another
        session raises `EventIdConflictError`. An unknown session raises
        `SessionNotFoundError` and creates nothing.
        """
        self._check_open()
        prepared = self._prepared_append(session_id, [write], None)
        prepared, failures = await self._embed(prepared)
        outcome = await self._append(prepared)
        if outcome.applied:
            self._publish(failures)
        return outcome.events[0]

    async def append_events(
        self,
        session_id: str,
        writes: Sequence[MessageWrite | EventWrite],
        expected_version: int,
    ) -> bool:
        """Append all the writes, or none: only if the log's version equals
        ``expected_version``; False and nothing written otherwise. A successful batch
        adds 1 to the version whatever its size. An id already stored (in any log) or
        given twice raises `EventIdConflictError`."""
        self._check_open()
        if (
            not isinstance(expected_version, int)
            or isinstance(expected_version, bool)
            or expected_version < 0
        ):
            raise InvalidArgumentError("expected_version must be a non-negative integer")
        if not isinstance(writes, Iterable) or isinstance(writes, (str, bytes, Mapping)):
            raise InvalidArgumentError(
                "append_events takes a sequence of MessageWrite and EventWrite values"
            )
        writes = list(writes)
        prepared = self._prepared_append(session_id, writes, expected_version)
        if not writes:
            return await self._version(prepared.session_id) == expected_version
        prepared, failures = await self._embed(prepared)
        applied = (await self._append(prepared)).applied
        if applied:
            self._publish(failures)
        return applied

    def _prepared_append(
        self,
        session_id: str,
        writes: Sequence[MessageWrite | EventWrite],
        expected_version: int | None,
    ) -> PreparedAppend:
        prepared = prepare_append(session_id, writes, expected_version)
        spec = self.vector_index
        if spec is not None:
            check_index_width(prepared, spec.model, spec.dimensions)
        return prepared

    async def version(self, session_id: str) -> int:
        """The log's version: 0 for an unknown or empty session; +1 for every append
        that adds an event and for every successful batch."""
        self._check_open()
        return await self._version(check_id(session_id, "session_id"))

    async def read(self, session_id: str, filter: EventFilter | None = None) -> list[Event]:
        """The session's events that pass ``filter``, oldest first (log order; in the
        active view, view order). [] for an unknown session."""
        self._check_open()
        event_filter = (filter or EventFilter()).validated()
        return await self._read(check_id(session_id, "session_id"), event_filter)

    async def messages(self, session_id: str, last: int | None = None) -> list[Message]:
        """The session's MESSAGE events; ``last=n`` as in `EventFilter`."""
        events = await self.read(session_id, EventFilter(types=(MESSAGE,), last=last))
        return [event for event in events if isinstance(event, Message)]

    async def set_narration(self, session_id: str, message_id: str, text: str | None) -> bool:
        """Set (or clear) a message's narration; changes the message's stamp, not the
        session's activity. False, and nothing written, for a message not in that
        session."""
        self._check_open()
        if text is not None and not isinstance(text, str):
            raise InvalidArgumentError("narration must be a string or None")
        if text is not None:
            _json.check_text(text, "narration")
        return await self._set_narration(
            check_id(session_id, "session_id"),
            check_id(message_id, "message_id"),
            text,
            new_stamp(),
        )

    # ---------------------------------------------------------------- search

    async def search(
        self,
        query: str | None = None,
        *,
        vector: Sequence[float] | None = None,
        mode: SearchMode | None = None,
        owner_id: UserRef | None = None,
        session_id: str | None = None,
        k: int = 10,
        roles: Sequence[Role | str] | None = None,
    ) -> list[SearchHit]:
        """Messages that match, best first, at most ``k`` (1..1000).

        ``"vector"`` embeds ``query`` with the store's embedder (or takes ``vector``) and
        ranks the messages that carry a vector of the index's model by similarity;
        ``"text"`` finds messages holding every word of ``query`` (case and accents
        ignored); ``"hybrid"`` fuses both ranks. The default is ``"vector"`` when an
        embedder or a vector is at hand, else ``"text"``. ``owner_id`` keeps to that
        owner's sessions, so no other owner's message can appear; ``session_id`` and
        ``roles`` narrow further. A vector of the wrong width is a `ValueError`.
        """
        self._check_open()
        if mode is None:
            mode = "vector" if vector is not None or (self.embedder and query) else "text"
        if mode not in ("vector", "text", "hybrid"):
            raise InvalidArgumentError(f"unknown search mode {mode!r}")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SEARCH_HITS:
            raise InvalidArgumentError(f"k must be between 1 and {MAX_SEARCH_HITS}")
        scope = _SearchScope(
            owner_id=None if owner_id is None else user_id_of(owner_id, "owner_id"),
            session_id=None if session_id is None else check_id(session_id, "session_id"),
            roles=None if roles is None else tuple(parse_role(r) for r in roles),
        )
        if mode == "text":
            return await self._search_text(query, k, scope)
        query_vector = await self._query_vector(query, vector)
        if mode == "vector":
            return await self._search_vector(query_vector, k, scope)
        depth = max(k * 4, 40)
        by_vector = await self._search_vector(query_vector, depth, scope)
        by_text = await self._search_text(query, depth, scope)
        return _fuse([by_vector, by_text], k)

    async def _search_text(self, query: str | None, k: int, scope: _SearchScope) -> list[SearchHit]:
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgumentError("text search needs a non-blank query")
        terms = tuple(dict.fromkeys(text_tokens(query)))
        if not terms:
            return []
        return await self._text_search(terms, k, scope.owner_id, scope.session_id, scope.roles)

    async def _search_vector(
        self, vector: tuple[float, ...], k: int, scope: _SearchScope
    ) -> list[SearchHit]:
        spec = self.vector_index
        return await self._vector_search(
            vector,
            spec.metric if spec else "cosine",
            spec.model if spec else None,
            k,
            scope.owner_id,
            scope.session_id,
            scope.roles,
        )

    async def _query_vector(
        self, query: str | None, vector: Sequence[float] | None
    ) -> tuple[float, ...]:
        width = None if self.vector_index is None else self.vector_index.dimensions
        if vector is not None:
            checked = check_vector(vector)
            if width is not None and len(checked) != width:
                raise InvalidArgumentError(
                    f"the query vector has width {len(checked)}, the vector index {width}"
                )
            return checked
        if self.embedder is None:
            raise InvalidArgumentError("vector search needs a vector, or a store with an embedder")
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgumentError("vector search needs a non-blank query or a vector")
        embedded = await self.embedder.embed([query])
        return check_vectors(embedded, 1, self.embedder.dimensions)[0]

    async def reembed(self, embedder: Embedder | None = None) -> ReembedReport:
        """Embed every message that has no vector or another model's, with ``embedder``
        (default: the store's, which it replaces), in pages. A failing batch is split
        down to single messages; a wrong number of vectors is a failed call; after a
        bounded run of failed calls the service is taken for dead. The vector index is
        always restored. Raises `ReembedIncompleteError` naming the messages that
        failed and how many were never tried; a rerun touches only what is pending."""
        self._check_open()
        from convostore.embedding import reembed

        chosen = self.embedder if embedder is None else _filtering(embedder)
        if chosen is None:
            raise InvalidArgumentError("reembed needs an embedder (the store has none)")
        # New messages are embedded with the new model from now on, so the run leaves
        # nothing pending behind it.
        self.embedder = chosen
        self.vector_index = VectorIndexSpec.of(chosen)
        self.vector_index_drift = None
        return await reembed(self, chosen)

    async def _begin_reembed(self, spec: VectorIndexSpec) -> bool:
        """Point the vector index at ``spec``; True when that recreated it."""
        if await self._vector_index_spec() == spec:
            return False
        await self._declare_vector_index(spec, replace=True)
        return True

    async def _end_reembed(self, spec: VectorIndexSpec) -> None:
        await self._declare_vector_index(spec, replace=False)

    async def _embed(
        self, prepared: PreparedAppend
    ) -> tuple[PreparedAppend, list[EmbeddingFailed]]:
        """Give each message that wants one a vector, in one embed call. A failed call
        leaves them without vectors, to be stored all the same and reported."""
        embedder = self.embedder
        if embedder is None:
            return prepared, []
        wanted = [
            index
            for index, item in enumerate(prepared.events)
            if isinstance(item.event, Message)
            and item.event.embedding is None
            and should_embed(embedder, item.event.role, item.event.content)
        ]
        if not wanted:
            return prepared, []
        messages = [_as_message(prepared.events[index].event) for index in wanted]
        try:
            vectors = check_vectors(
                await embedder.embed([m.content for m in messages]),
                len(messages),
                embedder.dimensions,
            )
        except Exception as error:
            log.warning("could not embed %d message(s): %s", len(messages), error)
            return prepared, [
                EmbeddingFailed(prepared.session_id, m.id, m.role, error) for m in messages
            ]
        events = list(prepared.events)
        for index, message, vector in zip(wanted, messages, vectors, strict=True):
            embedded = replace(
                message, embedding=check_vector(vector), embedding_model=embedder.name
            )
            events[index] = replace(events[index], event=embedded)
        return replace(prepared, events=tuple(events)), []

    def _publish(self, failures: list[EmbeddingFailed]) -> None:
        for failure in failures:
            for listener in list(self._embedding_failure_listeners):
                try:
                    listener(failure)
                except Exception:
                    log.exception("an embedding-failure listener raised")

    async def compact(
        self,
        session_id: str,
        strategy: CompactionStrategy,
        summarize: Summarize,
        trigger: CompactionTrigger | None = None,
    ) -> CompactionResult | None:
        """Compact the active view: read it and its version, cut where ``strategy``
        says (snapped forward to a turn start; the newest turn is always kept), call
        ``summarize(events)`` (sync or async, returning a string or a list of them) on
        what leaves the view, and write the boundary and the summaries in one
        `append_events` with that version. None, and nothing written, when the trigger
        does not fire, nothing leaves the view, or another writer moved the version
        first (`compact_outcome` says which). An unknown session raises
        `SessionNotFoundError`."""
        return (await self.compact_outcome(session_id, strategy, summarize, trigger)).result

    async def compact_outcome(
        self,
        session_id: str,
        strategy: CompactionStrategy,
        summarize: Summarize,
        trigger: CompactionTrigger | None = None,
    ) -> CompactionOutcome:
        """`compact`, returning what it did: ``result``, or ``skipped`` with the reason
        it wrote nothing (`CompactionSkipped`: the trigger did not fire, nothing leaves
        the view, or another writer moved the version first, when compacting again
        works on the new view)."""
        self._check_open()
        from convostore.compaction import compact_outcome

        return await compact_outcome(self, session_id, strategy, summarize, trigger)

    # ---------------------------------------------------------------- primitives
    # Each is one transaction (or one consistent read) in the backend.

    @abc.abstractmethod
    async def _close(self) -> None: ...

    @abc.abstractmethod
    async def _put_user(self, user: User) -> None: ...

    @abc.abstractmethod
    async def _get_user(self, user_id: str) -> User | None: ...

    @abc.abstractmethod
    async def _insert_session(self, new: NewSession, *, if_absent: bool) -> Session | None:
        """Insert the users (if absent) and the session. Check that every required user
        id is stored (`UnknownUserError`) and that ``part_of`` is an existing top-level
        session with the same owner (`SessionNotFoundError` / `InvalidArgumentError`).
        An existing session id: None when ``if_absent``, else `SessionExistsError`."""

    @abc.abstractmethod
    async def _find_or_insert_part(self, new: NewSession) -> Session:
        """The earliest part of ``new.session.part_of`` held with ``new.session.held_with``,
        or ``new`` inserted as in `_insert_session` with the parent's owner as its owner
        (``new.session.owner_id`` is ignored), atomically. A missing parent is
        `SessionNotFoundError`, a parent that is itself a part `InvalidArgumentError`."""

    @abc.abstractmethod
    async def _get_session(self, session_id: str) -> Session | None: ...

    @abc.abstractmethod
    async def _update_session(self, changes: SessionChanges) -> Session:
        """`SessionNotFoundError` if gone; `StaleObjectError` if the stamp differs."""

    @abc.abstractmethod
    async def _set_title(self, session_id: str, title: str | None, stamp: str) -> Session: ...

    @abc.abstractmethod
    async def _delete_session(self, session_id: str) -> bool: ...

    @abc.abstractmethod
    async def _list_sessions(
        self,
        owner_id: str,
        order: SessionOrder,
        after: Keyset | None,
        limit: int,
        filter: SessionFilter,
    ) -> list[Session]:
        """Up to ``limit`` sessions strictly after ``after`` in ``order``."""

    @abc.abstractmethod
    async def _list_summaries(
        self,
        owner_id: str,
        order: SessionOrder,
        after: Keyset | None,
        limit: int,
        filter: SessionFilter,
    ) -> list[SessionSummary]: ...

    @abc.abstractmethod
    async def _count_sessions(self, owner_id: str, filter: SessionFilter) -> int: ...

    @abc.abstractmethod
    async def _find_part(self, part_of: str, held_with: str) -> Session | None: ...

    @abc.abstractmethod
    async def _list_parts(self, part_of: str) -> list[SessionSummary]: ...

    @abc.abstractmethod
    async def _participants(self, session_id: str) -> list[User]: ...

    @abc.abstractmethod
    async def _find_sessions_by_metadata(self, name: str, value: str) -> list[Session]: ...

    @abc.abstractmethod
    async def _delete_expired(self, before: datetime) -> int: ...

    @abc.abstractmethod
    async def _append(self, append: PreparedAppend) -> AppendOutcome:
        """Apply the append in one transaction, in this order of checks:
        unknown session -> `SessionNotFoundError`; unknown required user ->
        `UnknownUserError`; for a batch, a version other than ``expected_version`` ->
        ``AppendOutcome(False)``; a single event whose caller-given id is already in
        this log -> ``AppendOutcome(False, [stored event])``; an id in another log (or,
        in a batch, already in this one) -> `EventIdConflictError`. Then insert the
        users (if absent), assign consecutive ``seq`` values, add 1 to the version, set
        the stamp, advance ``last_activity_at`` to max(stored, ``activity_at``), add
        ``new_message_count`` and set ``started_by`` if unset."""

    @abc.abstractmethod
    async def _version(self, session_id: str) -> int: ...

    @abc.abstractmethod
    async def _read(self, session_id: str, event_filter: EventFilter) -> list[Event]:
        """The answer `convostore.filters.apply_filter` gives over the log (or its
        active view), computed without loading more of the log than the answer needs."""

    @abc.abstractmethod
    async def _set_narration(
        self, session_id: str, message_id: str, text: str | None, stamp: str
    ) -> bool: ...

    @abc.abstractmethod
    async def _vector_index_spec(self) -> VectorIndexSpec | None:
        """The vector index recorded in the database, or None."""

    @abc.abstractmethod
    async def _declare_vector_index(self, spec: VectorIndexSpec, *, replace: bool) -> None:
        """Record ``spec`` (and build a native index for it) if none is recorded; with
        ``replace``, drop what is recorded first. Stored vectors are never dropped."""

    @abc.abstractmethod
    async def _pending_embeddings(
        self, model: str, roles: Sequence[Role], after: str | None, limit: int
    ) -> list[PendingEmbedding]:
        """Up to ``limit`` messages of ``roles`` with non-blank content and no vector of
        ``model``, by message id ascending, ids greater than ``after``."""

    @abc.abstractmethod
    async def _count_pending_embeddings(self, model: str, roles: Sequence[Role]) -> int: ...

    @abc.abstractmethod
    async def _set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]]
    ) -> None:
        """Store each message's vector and model in one transaction, changing its stamp."""

    @abc.abstractmethod
    async def _vector_search(
        self,
        vector: tuple[float, ...],
        metric: Metric,
        model: str | None,
        k: int,
        owner_id: str | None,
        session_id: str | None,
        roles: tuple[Role, ...] | None,
    ) -> list[SearchHit]:
        """The ``k`` messages nearest ``vector`` among those with a vector of ``model``
        (any model when None) and the same width, best first (scores as `top_k`)."""

    @abc.abstractmethod
    async def _text_search(
        self,
        terms: tuple[str, ...],
        k: int,
        owner_id: str | None,
        session_id: str | None,
        roles: tuple[Role, ...] | None,
    ) -> list[SearchHit]:
        """Messages whose content holds every term (`text_tokens` of it), best first."""


# --------------------------------------------------------------------------------------
# Checks shared by the public methods.


def _dropped_unclosed(kind: str, release: Callable[[], None] | None) -> None:
    if release is not None:
        release()
    warnings.warn(
        f"a {kind} was collected without close(): close stores (or use async with) "
        "to release their connections when you are done",
        ResourceWarning,
        stacklevel=1,
    )


def _discard(items: list[Any], item: Any) -> None:
    if item in items:
        items.remove(item)


def _page(rows: list[Any], listing: Listing, session_of: Any) -> Page[Any]:
    if len(rows) <= listing.size:
        return Page(items=rows, next_cursor=None)
    items = rows[: listing.size]
    last: Session = session_of(items[-1])
    keyset = Keyset(
        order=listing.order,
        session_id=last.id,
        last_activity_us=(
            to_micros(last.last_activity_at)
            if listing.order is SessionOrder.LAST_ACTIVITY
            else None
        ),
    )
    return Page(items=items, next_cursor=encode_cursor(keyset))


@dataclass(frozen=True, slots=True)
class _SearchScope:
    owner_id: str | None
    session_id: str | None
    roles: tuple[Role, ...] | None


def _as_message(event: Event) -> Message:
    assert isinstance(event, Message)
    return event


def _filtering(embedder: Embedder) -> Embedder:
    """The embedder as the store uses it: with a message filter (the default one
    unless the embedder brings its own ``should_embed``)."""
    if not isinstance(embedder, Embedder):
        raise InvalidArgumentError("an embedder needs name, dimensions and async embed(texts)")
    if callable(getattr(embedder, "should_embed", None)):
        return embedder
    return RoleFilteringEmbedder(embedder)


def _fuse(rankings: Sequence[list[SearchHit]], k: int) -> list[SearchHit]:
    """Reciprocal rank fusion of several rankings of messages."""
    scores: dict[str, float] = {}
    messages: dict[str, Message] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.message.id] = scores.get(hit.message.id, 0.0) + 1.0 / (RRF_K + rank)
            messages.setdefault(hit.message.id, hit.message)
    best = sorted(scores, key=lambda message_id: -scores[message_id])[:k]
    return [SearchHit(messages[message_id], scores[message_id]) for message_id in best]
