"""What the memory backend holds per session, and the indexes over its sessions that make
listings, pages and counts cost what they return."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from convostore._time import to_micros
from convostore.cursors import Keyset
from convostore.model import Event, Session, SessionFilter, SessionOrder

__all__ = ["SessionIndexes", "SessionRecord"]

# An owner's sessions by last activity: (last_activity_at in microseconds, id).
_ActivityKey = tuple[int, str]


@dataclass(slots=True)
class SessionRecord:
    """A session, its log, and what is kept beside the log to answer without a scan."""

    session: Session
    # seq n is log[n - 1]: the log is dense from 1 and never loses an event.
    log: list[Event] = field(default_factory=list)
    # Event id -> its index in the log, for replays and narration.
    positions: dict[str, int] = field(default_factory=dict)
    # The indexes of the log's COMPACTION boundaries, oldest first.
    boundaries: list[int] = field(default_factory=list)
    message_count: int = 0
    started_by: str | None = None
    # Authors in order of their first message; a dict keeps insertion order.
    participants: dict[str, None] = field(default_factory=dict)


class SessionIndexes:
    """Each owner's session ids in id order (UUIDv7 = creation order) and in activity
    order, how many of each (kind, is a part) the owner has, and each session's parts in
    id order. The caller holds the backend's lock."""

    def __init__(self) -> None:
        self._created: dict[str | None, list[str]] = {}
        self._active: dict[str | None, list[_ActivityKey]] = {}
        self._counts: dict[str | None, Counter[tuple[str, bool]]] = {}
        self._parts: dict[str, list[str]] = {}

    def add(self, session: Session) -> None:
        owner = session.owner_id
        bisect.insort(self._created.setdefault(owner, []), session.id)
        bisect.insort(self._active.setdefault(owner, []), _activity_key(session))
        self._counts.setdefault(owner, Counter())[_count_key(session)] += 1
        if session.part_of is not None:
            bisect.insort(self._parts.setdefault(session.part_of, []), session.id)

    def remove(self, session: Session) -> list[str]:
        """Forget ``session``; returns the ids of its parts, which the caller removes."""
        owner = session.owner_id
        _remove(self._created[owner], session.id)
        _remove(self._active[owner], _activity_key(session))
        self._counts[owner][_count_key(session)] -= 1
        if session.part_of is not None and session.part_of in self._parts:
            _remove(self._parts[session.part_of], session.id)
        return self._parts.pop(session.id, [])

    def moved(self, before: Session, after: Session) -> None:
        """The session's last activity moved from ``before``'s to ``after``'s."""
        if before.last_activity_at == after.last_activity_at:
            return
        by_activity = self._active[before.owner_id]
        _remove(by_activity, _activity_key(before))
        bisect.insort(by_activity, _activity_key(after))

    def newest_first(
        self, owner_id: str, order: SessionOrder, after: Keyset | None
    ) -> Iterator[str]:
        """The owner's session ids in ``order``, newest first, strictly after ``after``."""
        if order is SessionOrder.LAST_ACTIVITY:
            by_activity = self._active.get(owner_id, [])
            end = len(by_activity)
            if after is not None:
                end = bisect.bisect_left(
                    by_activity, (after.last_activity_us or 0, after.session_id)
                )
            return (by_activity[i][1] for i in range(end - 1, -1, -1))
        created = self._created.get(owner_id, [])
        end = len(created) if after is None else bisect.bisect_left(created, after.session_id)
        return (created[i] for i in range(end - 1, -1, -1))

    def count(self, owner_id: str, filter: SessionFilter) -> int:
        return sum(
            count
            for (kind, is_part), count in self._counts.get(owner_id, Counter()).items()
            if (filter.include_parts or not is_part)
            and (filter.kind is None or kind == filter.kind)
        )

    def parts(self, part_of: str) -> Sequence[str]:
        """The ids of the parts of ``part_of``, oldest first."""
        return self._parts.get(part_of, ())


def listed(session: Session, owner_id: str, filter: SessionFilter) -> bool:
    """Whether the owner's listing under ``filter`` shows ``session``."""
    return (
        session.owner_id == owner_id
        and (filter.include_parts or session.part_of is None)
        and (filter.kind is None or session.kind == filter.kind)
    )


def _activity_key(session: Session) -> _ActivityKey:
    return (to_micros(session.last_activity_at), session.id)


def _count_key(session: Session) -> tuple[str, bool]:
    return (session.kind, session.part_of is not None)


def _remove(ordered: list[Any], item: Any) -> None:
    """Remove ``item`` from the sorted list ``ordered``, found by bisection."""
    index = bisect.bisect_left(ordered, item)
    if index < len(ordered) and ordered[index] == item:
        del ordered[index]
