"""The log: appends (one event, or a batch checked against the log's version), with
the vectors an embedder gives messages on the way in; reads, narration, compaction."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from convostore import _json
from convostore.embedding import EmbeddingFailed, check_vectors, should_embed
from convostore.errors import InvalidArgumentError
from convostore.filters import EventFilter
from convostore.model import MESSAGE, Appended, Event, EventWrite, Message, MessageWrite
from convostore.prepare import (
    PreparedAppend,
    check_id,
    check_index_width,
    check_vector,
    new_stamp,
    prepare_append,
)
from convostore.store.base import StoreBase
from convostore.store.compacting import run_compaction

if TYPE_CHECKING:
    from convostore.compaction import (
        CompactionOutcome,
        CompactionResult,
        CompactionStrategy,
        CompactionTrigger,
        Summarize,
    )
    from convostore.store import Store

__all__ = ["LogOperations"]

log = logging.getLogger("convostore")


class LogOperations(StoreBase):
    """The store's log operations (see `convostore.store.Store`)."""

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
        return (await self.append(session_id, write)).event

    async def append(self, session_id: str, write: MessageWrite | EventWrite) -> Appended:
        """Append one event, as `append_event` does, and say whether this call wrote it:
        ``Appended(event, applied=True)``, or ``applied=False`` when an earlier call
        with the same id had stored it (a replay: nothing written, the version kept)."""
        self._check_open()
        prepared = self._prepared_append(session_id, [write], None)
        prepared, failures = await self._embed(prepared)
        outcome = await self.backend.append(prepared)
        if outcome.applied:
            self._publish(failures)
        return Appended(outcome.events[0], outcome.applied)

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
        return await run_compaction(cast("Store", self), session_id, strategy, summarize, trigger)


def _as_message(event: Event) -> Message:
    assert isinstance(event, Message)
    return event
