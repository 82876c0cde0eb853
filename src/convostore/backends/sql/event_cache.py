"""Events read back, kept by their row's key, so a read decodes only the rows it has not
seen.

Reading a window of the log costs more in turning each row's 23 columns into an `Event`
than the database spends finding them. A backend whose rows carry a key that is never
given to another row (MySQL's ``row_id``, an AUTO_INCREMENT kept across restarts; SQLite's
rowid with a stamp on every row, see `convostore.backends.sqlite.event_cache`) reads
that key with the event's columns; an event kept for the same key and the same
``stamp`` is the same value, and is handed out again instead of being decoded. Why the
stamp is enough: a row is changed only by writes that give it a new stamp (narration and
embeddings, on messages only); any other event is never changed once written. Events
are immutable values, so the same one may be handed to several callers.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final, cast

from convostore.backends.sql.rows import EVENT_COLUMN_COUNT, RowReader
from convostore.model import Event

__all__ = ["CAPACITY", "EventCache"]

# Events kept per store: the windows of a few hundred busy sessions, at most some tens
# of megabytes with 384-dimension vectors.
CAPACITY: Final = 4096
# A row of `EventCache.event`: its key, then the event's columns, the stamp last of them.
_STAMP: Final = EVENT_COLUMN_COUNT


class EventCache:
    """Up to ``capacity`` events by key, each with the stamp it was read with, the least
    recently read dropped first; safe to share between threads."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._events: OrderedDict[Any, tuple[Any, Event]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._events)

    def event(self, row: Sequence[Any], reader: RowReader) -> Event:
        """The event of one row (`events`)."""
        return self.events((row,), reader)[0]

    def events(self, rows: Sequence[Sequence[Any]], reader: RowReader) -> list[Event]:
        """The events of ``rows`` (each its key, then the event's columns), in order: the
        one kept for a row's key and stamp, else the row read by ``reader``, and kept."""
        found, missing = self.take([(row[0], row[_STAMP]) for row in rows])
        if missing:
            read = [(rows[i][0], rows[i][_STAMP], reader.event(rows[i], 1)) for i in missing]
            self.keep(read)
            for position, (_, _, event) in zip(missing, read, strict=True):
                found[position] = event
        return cast(list[Event], found)  # every None is replaced

    def take(self, keys: Sequence[tuple[Any, Any]]) -> tuple[list[Event | None], list[int]]:
        """For (key, stamp) pairs: the kept event where its stamp matches, else None;
        and the positions of the Nones."""
        found: list[Event | None] = []
        missing: list[int] = []
        events = self._events
        with self._lock:
            for position, (key, stamp) in enumerate(keys):
                kept = events.get(key)
                if kept is not None and kept[0] == stamp:
                    events.move_to_end(key)
                    found.append(kept[1])
                else:
                    found.append(None)
                    missing.append(position)
        return found, missing

    def keep(self, entries: Sequence[tuple[Any, Any, Event]]) -> None:
        """Keep each (key, stamp, event)."""
        events = self._events
        with self._lock:
            for key, stamp, event in entries:
                events[key] = (stamp, event)
                events.move_to_end(key)
            while len(events) > self._capacity:
                events.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._events.clear()
