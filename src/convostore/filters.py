"""`EventFilter` and its reference implementation: matching, turn windows, the active view.

Backends that can push a filter down to their database do so; these functions define
what the answer must be, and are what the memory backend runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from convostore import _json
from convostore._time import require_aware
from convostore.errors import InvalidArgumentError
from convostore.fields import is_event_type, parse_role, validate_branch
from convostore.model import COMPACTION, MESSAGE, Event, Message, Role

__all__ = [
    "EventFilter",
    "active_view",
    "apply_filter",
    "branch_lineage",
    "compaction_parts",
    "extend_to_turn_start",
    "is_turn_start",
    "validate_branch",
]


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events of a log `Store.read` returns, oldest first.

    - ``active_view``: only the newest COMPACTION's view: its summaries, the events it
      keeps (log order), then every later event.
    - ``types`` / ``roles``: event types; message roles (other events never match roles).
    - ``exclude_synthetic``: leave out events the system made (compaction, summaries).
    - ``branch="a.b"``: root events, the branch's ancestors ("a") and itself.
    - ``since`` / ``until``: inclusive bounds on ``created_at`` (timezone-aware).
    - ``text``: case-insensitive substring of a message's content, matched literally.
    - ``after_seq`` + ``limit``: the first ``limit`` matches after that position.
    - ``last=n``: the newest n matches, extended back to the nearest preceding turn start
      among the matches, so a window never splits a turn. Not combinable with ``limit``.
    """

    active_view: bool = False
    types: Sequence[str] | None = None
    roles: Sequence[Role | str] | None = None
    exclude_synthetic: bool = False
    branch: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    text: str | None = None
    after_seq: int | None = None
    limit: int | None = None
    last: int | None = None

    def validated(self) -> EventFilter:
        """This filter with roles as `Role`, times in UTC; bad values raise
        `InvalidArgumentError`."""
        roles = None if self.roles is None else tuple(parse_role(r) for r in _seq(self.roles))
        types = None if self.types is None else tuple(_seq(self.types))
        for event_type in types or ():
            if not is_event_type(event_type):
                raise InvalidArgumentError(f"invalid event type {event_type!r}")
        if self.branch is not None:
            validate_branch(self.branch)
        for name in ("after_seq", "limit", "last"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise InvalidArgumentError(f"{name} must be a non-negative integer")
        if self.limit is not None and self.last is not None:
            raise InvalidArgumentError("use either limit (oldest first) or last, not both")
        if self.text is not None and not isinstance(self.text, str):
            raise InvalidArgumentError("text must be a string")
        if self.text is not None:
            _json.check_text(self.text, "text")
        if roles is None and types is None and self.since is None and self.until is None:
            return self  # nothing to normalise: the common read skips a copy
        return replace(
            self,
            roles=roles,
            types=types,
            since=None if self.since is None else require_aware(self.since, "since"),
            until=None if self.until is None else require_aware(self.until, "until"),
        )

    def matches(self, event: Event) -> bool:
        """Whether one event passes every condition except the window (limit/last)."""
        if self.types is not None and event.type not in self.types:
            return False
        if self.roles is not None and (
            not isinstance(event, Message) or event.role not in self.roles
        ):
            return False
        if self.exclude_synthetic and event.synthetic:
            return False
        if self.branch is not None and not (
            event.branch is None or event.branch in branch_lineage(self.branch)
        ):
            return False
        if self.since is not None and event.created_at < self.since:
            return False
        if self.until is not None and event.created_at > self.until:
            return False
        if self.after_seq is not None and event.seq <= self.after_seq:
            return False
        return self.text is None or (
            isinstance(event, Message) and self.text.lower() in event.content.lower()
        )

    @property
    def can_match_turn_start(self) -> bool:
        """False when no turn start can pass the filter, so a window needs no extension.
        (Turn starts are root events, and every branch filter admits the root.)"""
        return (self.types is None or MESSAGE in self.types) and (
            self.roles is None or Role.USER in self.roles
        )


def _seq(values: Sequence[Any]) -> list[Any]:
    if isinstance(values, str):
        return [values]
    return list(values)


def branch_lineage(branch: str) -> tuple[str, ...]:
    """The branch and its ancestors: "a.b.c" -> ("a", "a.b", "a.b.c")."""
    names = branch.split(".")
    return tuple(".".join(names[: i + 1]) for i in range(len(names)))


def is_turn_start(event: Event) -> bool:
    """A turn starts at a root, non-synthetic user message."""
    return (
        isinstance(event, Message)
        and event.role is Role.USER
        and event.branch is None
        and not event.synthetic
    )


def extend_to_turn_start(matches: Sequence[Event], last: int) -> list[Event]:
    """The newest ``last`` of ``matches``, extended back to the nearest preceding turn
    start among them; not extended when none precedes."""
    if last == 0:
        return []
    start = max(0, len(matches) - last)
    if start < len(matches) and not is_turn_start(matches[start]):
        for index in range(start - 1, -1, -1):
            if is_turn_start(matches[index]):
                start = index
                break
    return list(matches[start:])


def apply_filter(events: Iterable[Event], event_filter: EventFilter) -> list[Event]:
    """The reference answer of a (validated) filter over events in view order."""
    matches = [event for event in events if event_filter.matches(event)]
    if event_filter.last is not None:
        return extend_to_turn_start(matches, event_filter.last)
    if event_filter.limit is not None:
        return matches[: event_filter.limit]
    return matches


def compaction_parts(boundary: Event, after: Sequence[Event]) -> tuple[list[str], list[Event]]:
    """A boundary's kept event ids and its summaries among the events ``after`` it.

    The summaries are the events named by the payload's ``summary_event_ids`` when it
    has them, else the run of synthetic events that directly follows the boundary.
    """
    payload = boundary.payload if isinstance(boundary.payload, dict) else {}
    kept = [str(i) for i in payload.get("kept_event_ids", ())]
    named = payload.get("summary_event_ids")
    if isinstance(named, list):
        wanted = set(named)
        return kept, [event for event in after if event.id in wanted]
    summaries: list[Event] = []
    for event in after:
        if not event.synthetic or event.type == COMPACTION:
            break
        summaries.append(event)
    return kept, summaries


def active_view(log: Sequence[Event]) -> list[Event]:
    """The active view of a whole log in seq order: the newest boundary's summaries, the
    events it keeps (log order), then every later event. No boundary: the whole log."""
    boundary_index = next(
        (i for i in range(len(log) - 1, -1, -1) if log[i].type == COMPACTION), None
    )
    if boundary_index is None:
        return list(log)
    boundary = log[boundary_index]
    after = log[boundary_index + 1 :]
    kept_ids, summaries = compaction_parts(boundary, after)
    kept_set = set(kept_ids)
    kept = [event for event in log[:boundary_index] if event.id in kept_set]
    return compose_view(kept, summaries, after)


def compose_view(
    kept: Sequence[Event], summaries: Sequence[Event], after: Sequence[Event]
) -> list[Event]:
    """Summaries, then kept events (log order), then the later events that are not
    summaries."""
    summary_ids = {event.id for event in summaries}
    later = [event for event in after if event.id not in summary_ids]
    return [*summaries, *sorted(kept, key=lambda e: e.seq), *later]
