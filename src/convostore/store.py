"""The `Store` contract, written once, and what is built on it.

`Store` is the public async API. Its docstrings state what every backend guarantees.
Each public method validates and normalises its arguments here, then calls the
primitives of its `convostore.backends.interface.Backend`, each one transaction. A
backend never re-checks what this module checked.
"""

from __future__ import annotations

import logging
import re
import warnings
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from convostore import _json
from convostore._time import require_aware, to_micros, utc_now
from convostore.backends.interface import (
    Backend,
    Capabilities,
    Connected,
    DatabaseStats,
    SearchScope,
    SessionPage,
    TextQuery,
    VectorQuery,
)
from convostore.cursors import Keyset, encode_cursor
from convostore.embedding import (
    Embedder,
    EmbeddingFailed,
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
    Listing,
    PreparedAppend,
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

__all__ = ["MAX_SEARCH_HITS", "Capabilities", "Store", "check_indexed_keys", "filtering"]

MAX_SEARCH_HITS = 1000
SearchMode = Literal["vector", "text", "hybrid"]
# Reciprocal rank fusion: a hit's fused score is the sum of 1 / (RRF_K + rank).
RRF_K = 60

log = logging.getLogger("convostore")
_METADATA_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


class Store:
    """The conversation store: users, sessions, and one ordered log per session.

    Every backend guarantees what these docstrings say. Every write is one transaction:
    it applies whole or not at all. Every wrong call raises an error of
    `convostore.errors` and writes nothing. Times are timezone-aware UTC with
    microsecond precision.
    """

    def __init__(
        self, backend: Backend, connected: Connected, *, embedder: Embedder | None = None
    ) -> None:
        """A store over a connected ``backend``; `convostore.connect` makes one."""
        self.backend = backend
        self.indexed_metadata: frozenset[str] = connected.indexed_metadata
        self._closed = False
        self._before_close: list[Callable[[], Awaitable[None]]] = []
        self._embedding_failure_listeners: list[Callable[[EmbeddingFailed], None]] = []
        self.embedder: Embedder | None = None if embedder is None else filtering(embedder)
        self.vector_index: VectorIndexSpec | None = connected.vector_index
        self.vector_index_drift: str | None = connected.vector_index_drift
        # A store collected without close() releases what its backend holds, and warns.
        self._dropped = weakref.finalize(
            self, _dropped_unclosed, type(backend).__name__, backend.release_when_dropped()
        )

    @property
    def capabilities(self) -> Capabilities:
        """What the backend offers beyond the contract (see `Capabilities`)."""
        return self.backend.capabilities

    # ---------------------------------------------------------------- lifecycle

    url: str = ""
    """The URL the store was opened with, without its password."""

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<Store {type(self.backend).__name__} {self.url or '(no URL)'}{state}>"

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
            self._dropped.detach()
            await self.backend.close()

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

    async def stats(self) -> DatabaseStats:
        """What the whole database holds, every owner's sessions included: users,
        sessions, events, messages, messages with a vector, and its size on disk in
        bytes (None where nothing is on disk)."""
        return await self.backend.stats()

    # ---------------------------------------------------------------- users

    async def put_user(self, user: User) -> User:
        """Insert the user, or overwrite the stored one with the same id."""
        self._check_open()
        user = check_user(user)
        await self.backend.put_user(user)
        return user

    async def get_user(self, user_id: str) -> User | None:
        """The stored user, or None."""
        self._check_open()
        return await self.backend.get_user(check_id(user_id, "user_id"))

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
        created = await self.backend.insert_session(new, if_absent=False)
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
        return await self.backend.insert_session(new, if_absent=True) is not None

    async def get_session(self, session_id: str) -> Session | None:
        """The session, or None. Expired sessions are returned until deleted."""
        self._check_open()
        return await self.backend.get_session(check_id(session_id, "session_id"))

    async def update_session(self, session: Session) -> Session:
        """Write ``title``, ``metadata`` and ``expires_at`` of a session read from the
        store, only if its ``stamp`` still matches the stored one; otherwise
        `StaleObjectError` and nothing is written. Returns the session as stored."""
        self._check_open()
        changes = prepare_changes(self.indexed_metadata, session)
        return await self.backend.update_session(changes)

    async def set_title(self, session_id: str, title: str | None) -> Session:
        """Write the title alone. Never conflicts; changes the stamp.
        An unknown session raises `SessionNotFoundError`."""
        self._check_open()
        return await self.backend.set_title(
            check_id(session_id, "session_id"), check_title(title), new_stamp()
        )

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session, the sessions that are part of it, and all their events.
        Users are kept. False when there was no such session."""
        self._check_open()
        return await self.backend.delete_session(check_id(session_id, "session_id"))

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
        rows = await self.backend.list_sessions(_session_page(listing))
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
        rows = await self.backend.list_summaries(_session_page(listing))
        return _page(rows, listing, lambda s: s.session)

    async def count_sessions(self, owner_id: UserRef, filter: SessionFilter | None = None) -> int:
        """How many sessions `list_sessions` would list over all its pages (the owner a
        `User` or an id)."""
        self._check_open()
        return await self.backend.count_sessions(
            user_id_of(owner_id, "owner_id"), check_session_filter(filter)
        )

    async def find_part(self, part_of: str, held_with: UserRef) -> Session | None:
        """The earliest session that is part of ``part_of`` and held with that user."""
        self._check_open()
        return await self.backend.find_part(
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
        return await self.backend.find_or_insert_part(new)

    async def list_parts(self, part_of: str) -> list[SessionSummary]:
        """The sessions that are part of ``part_of``, oldest first, with their summaries."""
        self._check_open()
        return await self.backend.list_parts(check_id(part_of, "part_of"))

    async def participants(self, session_id: str) -> list[User]:
        """Everyone who wrote a message in the session, once each, in order of their
        first message. [] for an unknown session."""
        self._check_open()
        return await self.backend.participants(check_id(session_id, "session_id"))

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
        return await self.backend.find_sessions_by_metadata(name, wanted)

    async def drop_metadata_index(self, name: str) -> bool:
        """Stop indexing the session metadata key ``name`` in the database, for every
        store on it (the keys belong to the database: connecting only adds keys). False
        when it was not indexed. Stores already connected keep answering from what is
        left until they reconnect; searching by ``name`` here raises `NotIndexedError`."""
        self._check_open()
        key = check_indexed_keys([name])
        removed = await self.backend.remove_indexed_key(next(iter(key)))
        self.indexed_metadata = self.indexed_metadata - key
        return removed

    async def delete_expired(self, before: datetime | None = None) -> int:
        """Delete every session with ``expires_at < before`` (default: now), with its
        parts and events; atomically per session, so a session whose expiry was
        extended concurrently survives. Returns how many expired sessions were deleted
        (their parts are not counted)."""
        self._check_open()
        when = utc_now() if before is None else require_aware(before, "before")
        return await self.backend.delete_expired(when)

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
        outcome = await self.backend.append(prepared)
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
            return await self.backend.version(prepared.session_id) == expected_version
        prepared, failures = await self._embed(prepared)
        applied = (await self.backend.append(prepared)).applied
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
        return await self.backend.version(check_id(session_id, "session_id"))

    async def read(self, session_id: str, filter: EventFilter | None = None) -> list[Event]:
        """The session's events that pass ``filter``, oldest first (log order; in the
        active view, view order). [] for an unknown session."""
        self._check_open()
        event_filter = (filter or EventFilter()).validated()
        return await self.backend.read(check_id(session_id, "session_id"), event_filter)

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
        return await self.backend.set_narration(
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
        scope = SearchScope(
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

    async def _search_text(self, query: str | None, k: int, scope: SearchScope) -> list[SearchHit]:
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgumentError("text search needs a non-blank query")
        terms = tuple(dict.fromkeys(text_tokens(query)))
        if not terms:
            return []
        return await self.backend.text_search(TextQuery(terms, k, scope))

    async def _search_vector(
        self, vector: tuple[float, ...], k: int, scope: SearchScope
    ) -> list[SearchHit]:
        spec = self.vector_index
        return await self.backend.vector_search(
            VectorQuery(
                vector, spec.metric if spec else "cosine", spec.model if spec else None, k, scope
            )
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

    async def reembed(
        self,
        embedder: Embedder | None = None,
        *,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> ReembedReport:
        """Embed every message that has no vector or another model's, with ``embedder``
        (default: the store's, which it replaces), in pages. A failing batch is split
        down to single messages; a wrong number of vectors is a failed call; after a
        bounded run of failed calls the service is taken for dead. The vector index is
        always restored. Raises `ReembedIncompleteError` naming the messages that
        failed and how many were never tried; a rerun touches only what is pending.
        ``on_progress(done, total)`` is called after each page."""
        self._check_open()
        from convostore.embedding import reembed

        chosen = self.embedder if embedder is None else filtering(embedder)
        if chosen is None:
            raise InvalidArgumentError("reembed needs an embedder (the store has none)")
        # New messages are embedded with the new model from now on, so the run leaves
        # nothing pending behind it.
        self.embedder = chosen
        self.vector_index = VectorIndexSpec.of(chosen)
        self.vector_index_drift = None
        return await reembed(self, chosen, on_progress=on_progress)

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


# --------------------------------------------------------------------------------------
# Checks shared by the public methods.


def check_indexed_keys(keys: Iterable[str]) -> frozenset[str]:
    """Metadata key names to index: each 1-64 of ``A-Z a-z 0-9 _ . : -``."""
    if isinstance(keys, str):
        raise InvalidArgumentError("indexed_metadata takes a list of key names, not a string")
    checked = tuple(dict.fromkeys(keys))
    for key in checked:
        if not isinstance(key, str) or not _METADATA_KEY.fullmatch(key):
            raise InvalidArgumentError(f"invalid indexed metadata key {key!r}")
    return frozenset(checked)


def _discard(items: list[Any], item: Any) -> None:
    if item in items:
        items.remove(item)


def _dropped_unclosed(kind: str, release: Callable[[], None] | None) -> None:
    if release is not None:
        release()
    warnings.warn(
        f"a store on {kind} was collected without close(): close stores (or use async "
        "with) to release their connections when you are done",
        ResourceWarning,
        stacklevel=1,
    )


def _session_page(listing: Listing) -> SessionPage:
    return SessionPage(
        listing.owner_id, listing.order, listing.after, listing.size + 1, listing.filter
    )


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


def _as_message(event: Event) -> Message:
    assert isinstance(event, Message)
    return event


def filtering(embedder: Embedder) -> Embedder:
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
