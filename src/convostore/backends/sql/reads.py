"""Reads of the log written once: the events an `EventFilter` matches, and the active
view of the newest compaction, as `Steps` over statements rendered in a dialect.

The filter's conditions are fixed fragments joined per combination (`event_conditions`),
so the set of statements stays bounded. `LogReads.read_events` reads a window of the
last n matches in up to three index probes: the newest n, the nearest matching turn
start before them, and the matches from there to the window. A backend may read its
windows in one statement of its own (SQLite, PostgreSQL) and still share the
conditions and the active view.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

from convostore.backends.sql.decisions import event_conditions as flagged
from convostore.backends.sql.decisions import read_parameters
from convostore.backends.sql.dialect import Dialect
from convostore.backends.sql.statements import EVENT_FIELDS, columns
from convostore.backends.sql.steps import Query, Steps
from convostore.filters import (
    EventFilter,
    apply_filter,
    compaction_parts,
    compose_view,
    is_turn_start,
)
from convostore.model import Event

__all__ = ["EVENT_CONDITION_NAMES", "IS_TURN_START", "LogReads", "event_conditions"]

# Rows read back as events, in order (a backend's decoder, or its event cache's).
Decode = Callable[[Sequence[Sequence[Any]]], list[Event]]
Shape = Literal["forward", "newest", "turn_start", "between"]

EVENT_CONDITION_NAMES: Final = (
    "types",
    "roles",
    "exclude_synthetic",
    "branch",
    "since",
    "until",
    "text",
    "after_seq",
)
# Written out as the partial index ``events_turn_starts`` has it, so a planner uses it.
IS_TURN_START: Final = (
    " AND {a}type = 'MESSAGE' AND {a}role = 'user' AND {a}branch IS NULL AND NOT {a}synthetic"
)


def event_conditions(dialect: Dialect, text: str, alias: str = "") -> tuple[tuple[str, str], ...]:
    """The `EventFilter` conditions, in the order their fragments are joined: (the
    filter's attribute, its fragment) over a table of ``alias``. ``text`` is the
    dialect's literal, case-insensitive match of the parameter ``text`` in the content
    (Python's ``needle.lower() in content.lower()``). Parameters: as
    `decisions.read_parameters` names them."""
    a, p, within = alias, dialect.p, dialect.within
    return tuple(
        zip(
            EVENT_CONDITION_NAMES,
            (
                f" AND {within(a + 'type', p('types', 'text[]'))}",
                f" AND {within(a + 'role', p('roles', 'text[]'))}",
                f" AND NOT {a}synthetic",
                f" AND ({a}branch IS NULL OR {within(a + 'branch', p('lineage', 'text[]'))})",
                f" AND {a}created_at >= {p('since', 'timestamptz')}",
                f" AND {a}created_at <= {p('until', 'timestamptz')}",
                text,
                f" AND {a}seq > {p('after_seq', 'bigint')}",
            ),
            strict=True,
        )
    )


class LogReads:
    """The reads of the log in one dialect. ``key``: a column selected first in every
    row, the key of the backend's event cache (or none); ``turn_start``: the condition
    that a row starts a turn, as the backend's index has it; ``fold_text``: whether the
    text parameter is bound lowered (where ``text`` searches content folded by the
    writer); ``kept_join``: how the active view's kept ids join the log (the id list
    must be the outer loop)."""

    def __init__(
        self,
        dialect: Dialect,
        text: str,
        *,
        key: str = "",
        turn_start: str = IS_TURN_START.format(a=""),
        fold_text: bool = False,
        kept_join: str = "JOIN",
    ) -> None:
        self.dialect = dialect
        self.conditions = event_conditions(dialect, text)
        self.fold_text = fold_text
        self._statements: dict[tuple[Shape, tuple[bool, ...]], str] = {}
        p = dialect.p

        def select(alias: str) -> str:
            return f"SELECT {alias + key + ', ' if key else ''}{columns(EVENT_FIELDS, alias)}"

        rows = f"{select('')} FROM events WHERE session_id = {p('session_id')}"
        self.newest_compaction = f"{rows} AND type = 'COMPACTION' ORDER BY seq DESC LIMIT 1"
        # session_id, seq
        self.events_after = f"{rows} AND seq > {p('seq')} ORDER BY seq"
        # ids (a strings parameter), session_id, seq: each kept event is one lookup by id.
        self.kept_events = (
            f"{select('e.')} FROM {dialect.strings_table(p('ids', 'text[]'), 'kept')}"
            f" {kept_join} events e ON e.id = kept.value"
            f" WHERE e.session_id = {p('session_id')} AND e.seq < {p('seq')}"
        )
        self._shapes: dict[Shape, tuple[str, str]] = {
            # The first matches in log order.
            "forward": (rows, f" ORDER BY seq LIMIT {p('limit')}"),
            # The newest matches, newest first.
            "newest": (rows, f" ORDER BY seq DESC LIMIT {p('last')}"),
            # The position of the nearest matching turn start before another position.
            "turn_start": (
                f"SELECT seq FROM events WHERE session_id = {p('session_id')}{turn_start}"
                f" AND seq < {p('before')}",
                " ORDER BY seq DESC LIMIT 1",
            ),
            # The matches from one position up to another.
            "between": (
                f"{rows} AND seq >= {p('from_seq')} AND seq < {p('before')}",
                " ORDER BY seq",
            ),
        }

    def events(self, shape: Shape, conditions: tuple[bool, ...]) -> str:
        """The read of one shape with the conditions flagged in ``conditions``."""
        statement = self._statements.get((shape, conditions))
        if statement is None:
            head, tail = self._shapes[shape]
            statement = self._statements[shape, conditions] = head + self.where(conditions) + tail
        return statement

    def where(self, conditions: tuple[bool, ...]) -> str:
        """The fragments of the conditions flagged (one flag per `event_conditions`)."""
        return "".join(
            fragment for (_, fragment), on in zip(self.conditions, conditions, strict=True) if on
        )

    def flags(self, event_filter: EventFilter) -> tuple[bool, ...]:
        """Which of the conditions ``event_filter`` sets."""
        return flagged(EVENT_CONDITION_NAMES, event_filter)

    def parameters(self, session_id: str, event_filter: EventFilter) -> dict[str, Any]:
        parameters = read_parameters(self.dialect, session_id, event_filter)
        if self.fold_text and event_filter.text is not None:
            parameters["text"] = event_filter.text.lower()
        return parameters

    def read_events(
        self, session_id: str, event_filter: EventFilter, decode: Decode
    ) -> Steps[list[Event]]:
        """What `filters.apply_filter` answers over the log; over the active view when
        the filter asks for it and the log has a compaction (read in one snapshot)."""
        if event_filter.active_view:
            boundary = yield Query(self.newest_compaction, {"session_id": session_id})
            if boundary is not None:
                return (yield from self.active_view(decode([boundary])[0], event_filter, decode))
        conditions = self.flags(event_filter)
        parameters = self.parameters(session_id, event_filter)
        if event_filter.last is None:
            return decode((yield Query(self.events("forward", conditions), parameters, "all")))
        newest = yield Query(self.events("newest", conditions), parameters, "all")
        window = decode(newest[::-1])
        if (
            not window
            or len(window) < event_filter.last  # The window holds every match already.
            or is_turn_start(window[0])
            or not event_filter.can_match_turn_start
        ):
            return window
        # No snapshot needed: these read only positions before the window, which
        # appends (at the end of the log) never change.
        parameters["before"] = window[0].seq
        start = yield Query(self.events("turn_start", conditions), parameters)
        if start is None:
            return window
        parameters["from_seq"] = start[0]
        rows = yield Query(self.events("between", conditions), parameters, "all")
        return [*decode(rows), *window]

    def active_view(
        self, boundary: Event, event_filter: EventFilter, decode: Decode
    ) -> Steps[list[Event]]:
        """The newest compaction's view, composed and filtered as `filters.active_view`
        has it, from the events it kept and every event after it: what compaction keeps
        small, not the whole log."""
        where = {"session_id": boundary.session_id, "seq": boundary.seq}
        after = decode((yield Query(self.events_after, where, "all")))
        kept_ids, summaries = compaction_parts(boundary, after)
        kept: list[Event] = []
        if kept_ids:
            ids = self.dialect.strings(dict.fromkeys(kept_ids))  # each once, however named
            kept = decode((yield Query(self.kept_events, {"ids": ids, **where}, "all")))
        return apply_filter(compose_view(kept, summaries, after), event_filter)
