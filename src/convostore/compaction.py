"""Compaction: strategies that choose what stays in a session's active view, triggers
that say when to compact, and `compact`, which writes the boundary and its summaries.

A compaction never rewrites the log. It appends, in one version-checked batch, a
synthetic COMPACTION event naming the events it keeps and the synthetic summaries of
what left the view. A cut always lands on a turn start (a root, non-synthetic user
message), so a turn is never split; the newest turn is always kept.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from convostore import _json
from convostore.errors import InvalidArgumentError
from convostore.filters import is_turn_start
from convostore.model import Event, Message

if TYPE_CHECKING:
    from convostore.store import Store

__all__ = [
    "AnyOf",
    "CompactionOutcome",
    "CompactionResult",
    "CompactionSkipped",
    "CompactionStrategy",
    "CompactionTrigger",
    "SlidingWindow",
    "Summarize",
    "TokenBudget",
    "TokenCount",
    "TokenCounter",
    "TurnCount",
    "TurnWindow",
    "approximate_tokens",
    "compact",
    "compact_outcome",
    "event_text",
    "snap_to_turn_start",
]

log = logging.getLogger("convostore.compaction")

TokenCounter = Callable[[str], int]
Summarize = Callable[[list[Event]], "str | list[str] | Awaitable[str | list[str]]"]


def approximate_tokens(text: str) -> int:
    """About four characters a token, at least one: a counter with no dependencies.
    Pass a real tokenizer's count where budgets must be exact."""
    return max(1, math.ceil(len(text) / 4))


def event_text(event: Event) -> str:
    """The text an event puts into a model's context: a message's content and tool
    calls, or another event's payload as JSON."""
    if isinstance(event, Message):
        calls = "".join(
            f"\n{call.name}({_json.dumps(call.arguments, 'arguments')})"
            for call in event.tool_calls
        )
        return event.content + calls
    return "" if event.payload is None else _json.dumps(event.payload, "payload")


def _event_tokens(events: Sequence[Event], count_tokens: TokenCounter) -> list[int]:
    return [count_tokens(event_text(event)) for event in events]


@runtime_checkable
class CompactionStrategy(Protocol):
    """Chooses where the kept part of an active view starts, before snapping."""

    def cut(self, view: Sequence[Event]) -> int:
        """The index in ``view`` of the first event to keep (0 keeps everything)."""
        ...


@dataclass(frozen=True, slots=True)
class SlidingWindow:
    """Keep at most the last ``keep_last`` events, starting at a turn start."""

    keep_last: int

    def __post_init__(self) -> None:
        _require_positive(self.keep_last, "keep_last")

    def cut(self, view: Sequence[Event]) -> int:
        return max(0, len(view) - self.keep_last)


@dataclass(frozen=True, slots=True)
class TurnWindow:
    """Keep the last ``keep_turns`` turns."""

    keep_turns: int

    def __post_init__(self) -> None:
        _require_positive(self.keep_turns, "keep_turns")

    def cut(self, view: Sequence[Event]) -> int:
        starts = [i for i, event in enumerate(view) if is_turn_start(event)]
        if len(starts) <= self.keep_turns:
            return 0
        return starts[-self.keep_turns]


@dataclass(frozen=True, slots=True)
class TokenBudget:
    """Keep the newest events that fit in ``max_tokens`` (the newest turn is kept even
    when it alone is over budget)."""

    max_tokens: int
    count_tokens: TokenCounter = field(default=approximate_tokens)

    def __post_init__(self) -> None:
        _require_positive(self.max_tokens, "max_tokens")

    def cut(self, view: Sequence[Event]) -> int:
        total = 0
        tokens = _event_tokens(view, self.count_tokens)
        for index in range(len(view) - 1, -1, -1):
            total += tokens[index]
            if total > self.max_tokens:
                return index + 1
        return 0


@runtime_checkable
class CompactionTrigger(Protocol):
    """Says whether an active view is due for compaction."""

    def should_compact(self, view: Sequence[Event]) -> bool: ...


@dataclass(frozen=True, slots=True)
class TurnCount:
    """Fires when the active view holds more than ``max_turns`` turns."""

    max_turns: int

    def __post_init__(self) -> None:
        _require_positive(self.max_turns, "max_turns")

    def should_compact(self, view: Sequence[Event]) -> bool:
        return sum(1 for event in view if is_turn_start(event)) > self.max_turns


@dataclass(frozen=True, slots=True)
class TokenCount:
    """Fires when the active view holds more than ``max_tokens`` tokens."""

    max_tokens: int
    count_tokens: TokenCounter = field(default=approximate_tokens)

    def __post_init__(self) -> None:
        _require_positive(self.max_tokens, "max_tokens")

    def should_compact(self, view: Sequence[Event]) -> bool:
        return sum(_event_tokens(view, self.count_tokens)) > self.max_tokens


class AnyOf:
    """Fires when any of its triggers fires."""

    __slots__ = ("triggers",)

    def __init__(self, *triggers: CompactionTrigger) -> None:
        if not triggers:
            raise InvalidArgumentError("AnyOf needs at least one trigger")
        self.triggers = triggers

    def should_compact(self, view: Sequence[Event]) -> bool:
        return any(trigger.should_compact(view) for trigger in self.triggers)


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What a compaction wrote: the boundary, the summaries, what it kept and what
    left the view, and the log's version after it."""

    boundary_id: str
    summary_ids: tuple[str, ...]
    kept_event_ids: tuple[str, ...]
    compacted_event_ids: tuple[str, ...]
    version: int


class CompactionSkipped(StrEnum):
    """Why a compaction wrote nothing."""

    TRIGGER_NOT_FIRED = "trigger_not_fired"
    """The trigger said the active view does not need compacting yet."""
    NOTHING_TO_COMPACT = "nothing_to_compact"
    """The strategy's cut, snapped to a turn start, leaves nothing to take out of the view."""
    VERSION_MOVED = "version_moved"
    """Another writer appended (or compacted) after the view was read: the batch was
    refused by its version check. Compacting again works on the new view."""


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    """What `Store.compact_outcome` did: ``result`` when it wrote a compaction, else
    ``skipped`` says why not (exactly one of the two is set)."""

    result: CompactionResult | None
    skipped: CompactionSkipped | None


def snap_to_turn_start(view: Sequence[Event], cut: int) -> int:
    """Move ``cut`` forward to the next turn start; where none follows, back to the
    newest turn start, so the newest turn is kept. A view with no turn start cannot be
    cut without splitting a turn: 0."""
    starts = [i for i, event in enumerate(view) if is_turn_start(event)]
    if not starts:
        return 0
    return next((start for start in starts if start >= cut), starts[-1])


async def compact(
    store: Store,
    session_id: str,
    strategy: CompactionStrategy,
    summarize: Summarize,
    trigger: CompactionTrigger | None = None,
) -> CompactionResult | None:
    """Compact the session's active view (`Store.compact`)."""
    return await store.compact(session_id, strategy, summarize, trigger)


async def compact_outcome(
    store: Store,
    session_id: str,
    strategy: CompactionStrategy,
    summarize: Summarize,
    trigger: CompactionTrigger | None = None,
) -> CompactionOutcome:
    """`compact`, saying why nothing was written (`Store.compact_outcome`)."""
    return await store.compact_outcome(session_id, strategy, summarize, trigger)


def _require_positive(value: int, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
