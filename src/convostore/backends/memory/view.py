"""A session's log, or its active view, read by the memory backend without copying it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from convostore.backends.memory.indexes import SessionRecord
from convostore.filters import EventFilter, compaction_parts, is_turn_start
from convostore.model import Event

__all__ = ["LogView"]


@dataclass(frozen=True, slots=True)
class LogView:
    """A log or its active view, read without copying it: ``head`` (the newest boundary's
    summaries, then the events it keeps) then ``log[tail:]`` less ``skip`` (the
    summaries, already in the head).

    A window (``last``, or ``after_seq`` with ``limit``) walks it from the end or from
    the cursor's position and stops when the answer is complete, so it costs the events
    it returns and those the filter passes over, not the length of the log.
    """

    log: Sequence[Event]
    head: Sequence[Event] = ()
    tail: int = 0
    skip: frozenset[str] = frozenset()

    @classmethod
    def of(cls, record: SessionRecord) -> LogView:
        """The active view of a session's log (the whole log when it has no boundary)."""
        if not record.boundaries:
            return cls(record.log)
        at = record.boundaries[-1]
        kept_ids, summaries = compaction_parts(record.log[at], record.log[at + 1 :])
        kept = sorted(
            record.positions[i] for i in set(kept_ids) if record.positions.get(i, at) < at
        )
        return cls(
            record.log,
            head=[*summaries, *(record.log[i] for i in kept)],
            tail=at + 1,
            skip=frozenset(event.id for event in summaries),
        )

    def forward(self, after_seq: int | None) -> Iterator[Event]:
        for event in self.head:
            if after_seq is None or event.seq > after_seq:
                yield event
        # seq n sits at log[n - 1], so the events after a seq start at that index.
        start = self.tail if after_seq is None else max(self.tail, min(after_seq, len(self.log)))
        for index in range(start, len(self.log)):
            event = self.log[index]
            if event.id not in self.skip:
                yield event

    def backward(self) -> Iterator[Event]:
        for index in range(len(self.log) - 1, self.tail - 1, -1):
            event = self.log[index]
            if event.id not in self.skip:
                yield event
        yield from reversed(self.head)

    def answer(self, event_filter: EventFilter) -> list[Event]:
        """What `convostore.filters.apply_filter` answers over this view."""
        if event_filter.last is None:
            matches = (e for e in self.forward(event_filter.after_seq) if event_filter.matches(e))
            if event_filter.limit is None:
                return list(matches)
            return [event for _, event in zip(range(event_filter.limit), matches, strict=False)]
        last = event_filter.last
        newest: list[Event] = []
        if last == 0:
            return newest
        # Past the newest ``last`` matches, walk on to the turn start the window lands
        # in; where none precedes, the window is not extended.
        extend = event_filter.can_match_turn_start
        at_turn_start = False
        for event in self.backward():
            if not event_filter.matches(event):
                continue
            newest.append(event)
            if len(newest) >= last and (not extend or is_turn_start(event)):
                at_turn_start = True
                break
        if not at_turn_start:
            del newest[last:]
        newest.reverse()
        return newest
