"""The compaction run: read the active view and its version, cut where the strategy
says, summarize what leaves the view, and write the boundary and the summaries in one
batch at that version (see `Store.compact_outcome`). The strategies and triggers are
`convostore.compaction`'s."""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING

from convostore.compaction import (
    CompactionOutcome,
    CompactionResult,
    CompactionSkipped,
    CompactionStrategy,
    CompactionTrigger,
    Summarize,
    snap_to_turn_start,
)
from convostore.errors import InvalidArgumentError, SessionNotFoundError
from convostore.filters import EventFilter
from convostore.ids import new_id
from convostore.model import COMPACTION, Event, EventWrite, MessageWrite, Role

if TYPE_CHECKING:
    from convostore.store import Store

__all__ = ["run_compaction"]

log = logging.getLogger("convostore.compaction")


async def run_compaction(
    store: Store,
    session_id: str,
    strategy: CompactionStrategy,
    summarize: Summarize,
    trigger: CompactionTrigger | None = None,
) -> CompactionOutcome:
    """The compaction run of `Store.compact_outcome`."""
    if not isinstance(strategy, CompactionStrategy):
        raise InvalidArgumentError("strategy must have a cut(view) method")
    # The version is read before the view: if anything is appended in between, the
    # batch below is refused rather than dropping an event this run never saw.
    version = await store.version(session_id)
    if version == 0 and await store.get_session(session_id) is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    view = await store.read(session_id, EventFilter(active_view=True))
    if trigger is not None and not trigger.should_compact(view):
        return _skipped(session_id, CompactionSkipped.TRIGGER_NOT_FIRED)
    wanted = strategy.cut(view)
    cut = 0 if wanted <= 0 else snap_to_turn_start(view, wanted)
    if cut == 0:
        return _skipped(session_id, CompactionSkipped.NOTHING_TO_COMPACT)
    leaving, kept = list(view[:cut]), list(view[cut:])
    summaries = await _summaries(summarize, leaving)
    boundary_id = new_id()
    summary_ids = tuple(new_id() for _ in summaries)
    kept_ids = tuple(event.id for event in kept)
    writes: list[EventWrite | MessageWrite] = [
        EventWrite(
            COMPACTION,
            {"kept_event_ids": list(kept_ids), "summary_event_ids": list(summary_ids)},
            id=boundary_id,
            synthetic=True,
        ),
        *(
            MessageWrite(Role.SYSTEM, text, id=summary_id, synthetic=True)
            for summary_id, text in zip(summary_ids, summaries, strict=True)
        ),
    ]
    if not await store.append_events(session_id, writes, expected_version=version):
        return _skipped(session_id, CompactionSkipped.VERSION_MOVED)
    result = CompactionResult(
        boundary_id=boundary_id,
        summary_ids=summary_ids,
        kept_event_ids=kept_ids,
        compacted_event_ids=tuple(event.id for event in leaving),
        version=version + 1,
    )
    return CompactionOutcome(result, None)


def _skipped(session_id: str, why: CompactionSkipped) -> CompactionOutcome:
    log.debug("compaction of session %s wrote nothing: %s", session_id, why.value)
    return CompactionOutcome(None, why)


async def _summaries(summarize: Summarize, events: list[Event]) -> list[str]:
    result = summarize(events)
    if inspect.isawaitable(result):
        result = await result
    texts: list[object] = (
        [result]
        if isinstance(result, str)
        else list(result)
        if isinstance(result, list)
        else [result]
    )
    if not all(isinstance(text, str) for text in texts):
        raise InvalidArgumentError("summarize must return a string or a list of strings")
    return [str(text) for text in texts]
