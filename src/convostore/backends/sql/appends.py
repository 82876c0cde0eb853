"""The append written once as `Steps`: the checks in the order `Store._append` gives,
the session moved on, the events inserted at the positions that gives, a stored event
id answered as a retried append or a conflict (`decisions.replay_or_conflict`).

Two ways to serialise appends to one session, as the dialect can:

- where UPDATE has RETURNING (``lock_session`` None): one statement moves the session
  on, with the version check in its WHERE clause, and returns the new ``last_seq`` and
  how many required users are not stored; only when it moved nothing does a second
  statement tell a missing session from another version. The common case is two
  statements: the update, then the insert.
- else: the session's row is locked first (``lock_session``: version and last_seq, FOR
  UPDATE), the checks run under it, and the session is moved on after the insert.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from convostore._time import to_micros
from convostore.backends.sql import decisions
from convostore.backends.sql.steps import Query, RollbackAndReturn, Steps
from convostore.backends.sql.writes import SessionWrites, insert_users, require_users
from convostore.errors import StoreError
from convostore.prepare import AppendOutcome, PreparedAppend, PreparedEvent

__all__ = ["AppendStatements", "append"]


@dataclass(frozen=True, slots=True)
class AppendStatements:
    """A backend's statements of an append (named parameters: ``session_id``,
    ``count``, ``stamp``, ``activity_at``, ``message_count``, ``started_by``, and, where
    ``lock_session`` is None, ``expected_version`` and ``required_users``: the required
    ids not given as users, as one strings parameter or NULL):

    - ``lock_session``: the session's version and last_seq, under its row lock; None
      where ``advance`` checks and returns (see the module);
    - ``advance``: the session moved on by ``count`` events;
    - ``insert_events(n)``: the statement inserting n events, and whether it runs once
      per row (False: once, with every row's parameters in one flat sequence);
    - ``event_row``: an event's parameters at its seq;
    - ``events_with_ids``: the stored events whose id is among ``ids`` (strings).
    """

    lock_session: str | None
    advance: str
    insert_events: Callable[[int], tuple[str, bool]]
    event_row: Callable[[PreparedEvent, int], tuple[Any, ...]]
    events_with_ids: str


def _no_check(rows: Sequence[Any]) -> None:
    pass


def append(
    a: AppendStatements,
    w: SessionWrites,
    prepared: PreparedAppend,
    check: Callable[[Sequence[Any]], None] = _no_check,
) -> Steps[AppendOutcome]:
    """Append ``prepared`` in the caller's transaction. ``check`` sees the events' rows
    first (and may refuse them)."""
    events, session_id = prepared.events, prepared.session_id
    required = prepared.users_to_insert, prepared.required_user_ids
    strings = w.statements.dialect.strings
    parameters = {
        "session_id": session_id,
        "count": len(events),
        "stamp": prepared.new_stamp,
        "activity_at": None if prepared.activity_at is None else to_micros(prepared.activity_at),
        "message_count": prepared.new_message_count,
        "started_by": prepared.started_by,
    }
    if a.lock_session is None:
        unconfirmed = decisions.unconfirmed_users(*required)
        parameters["expected_version"] = prepared.expected_version
        parameters["required_users"] = strings(unconfirmed) if unconfirmed else None
        advanced = yield Query(a.advance, parameters)
        if advanced is None:
            (count,) = yield Query(w.statements.session_exists, {"id": session_id})
            if not count:
                raise decisions.missing_session(session_id)
            yield from require_users(w, *required)
            return AppendOutcome(applied=False)  # A batch for another version.
        last_seq, unknown_users = advanced
        if unknown_users:
            yield from require_users(w, *required)
        first_seq = last_seq - len(events) + 1
    else:
        locked = yield Query(a.lock_session, {"session_id": session_id})
        if locked is None:
            raise decisions.missing_session(session_id)
        version, last_seq = locked
        yield from require_users(w, *required)
        if prepared.expected_version is not None and version != prepared.expected_version:
            raise RollbackAndReturn(AppendOutcome(applied=False))
        first_seq = last_seq + 1
    yield from insert_users(w, prepared.users_to_insert)
    statement, per_row = a.insert_events(len(events))
    rows = [a.event_row(p, first_seq + i) for i, p in enumerate(events)]
    check(rows)
    values = rows if per_row else [value for row in rows for value in row]
    if not (yield Query(statement, values, "insert_many" if per_row else "insert")):
        ids = strings(p.event.id for p in events)
        stored = yield Query(a.events_with_ids, {"ids": ids}, "all")
        if not stored:
            raise StoreError(f"the append to session {session_id!r} broke a unique key")
        found = list(map(w.statements.dialect.rows.event, stored))
        raise RollbackAndReturn(decisions.replay_or_conflict(prepared, found))
    if a.lock_session is not None:
        yield Query(a.advance, parameters, "count")
    for offset, p in enumerate(events):
        # "event.seq is 0 until the backend assigns it" (PreparedEvent): the event was
        # made for this append and nothing else holds it, so it takes its seq in place
        # rather than as a copy of every field, on the hottest path there is.
        object.__setattr__(p.event, "seq", first_seq + offset)
    return AppendOutcome(applied=True, events=[p.event for p in events])
