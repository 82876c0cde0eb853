"""The append written once as `Steps`, for a dialect whose UPDATE has no RETURNING
(MySQL): the session's row is locked first, the checks run under it in the order
`Backend.append` gives, the events are inserted at the positions after its ``last_seq``,
a stored event id is answered as a retried append or a conflict
(`decisions.replay_or_conflict`), and the session is moved on. (SQLite moves the
session on first, by UPDATE ... RETURNING with the version check in its WHERE clause:
its own append, on its hottest path, where these steps would cost 3-5% of the CPU of
an append; PostgreSQL's is one statement.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from convostore._time import to_micros
from convostore.backends import spi
from convostore.backends.sql import decisions
from convostore.backends.sql.dialect import Dialect
from convostore.backends.sql.statements import EVENT_FIELDS, columns
from convostore.backends.sql.steps import Query, RollbackAndReturn, Steps
from convostore.backends.sql.writes import SessionWrites, insert_users, require_users
from convostore.errors import StoreError

__all__ = ["AppendStatements", "append", "append_statements"]


@dataclass(frozen=True, slots=True)
class AppendStatements:
    """A backend's statements of an append:

    - ``lock_session``: the session's version and last_seq, under its row lock (its id);
    - ``advance``: the session moved on (count, stamp, activity_at, message_count,
      started_by, session id);
    - ``insert_events(n)``: the statement inserting n events (every row's parameters
      in one flat sequence);
    - ``event_row``: an event's parameters at its seq;
    - ``events_with_ids``: the stored events whose id is among ``ids`` (strings).
    """

    lock_session: str
    advance: str
    insert_events: Callable[[int], str]
    event_row: Callable[[spi.PreparedEvent, int], tuple[Any, ...]]
    events_with_ids: str


def append_statements(
    dialect: Dialect,
    insert_fields: tuple[str, ...],
    event_row: Callable[[spi.PreparedEvent, int], tuple[Any, ...]],
    insert_values: Mapping[str, str] | None = None,
) -> AppendStatements:
    """The statements of an append in ``dialect``, whose events are inserted as
    ``insert_fields`` (`EVENT_FIELDS` and the backend's own), each row made by
    ``event_row`` (``insert_values``: a field's value expression, see
    `Dialect.insert`). The session's activity moves on by GREATEST (MySQL, MariaDB,
    PostgreSQL)."""
    m = dialect.marker
    advance = (
        f"UPDATE sessions SET version = version + 1, last_seq = last_seq + {m}, stamp = {m}, "
        f"last_activity_at = GREATEST(last_activity_at, coalesce({m}, last_activity_at)), "
        f"message_count = message_count + {m}, started_by = coalesce(started_by, {m}) "
        f"WHERE id = {m}"
    )
    return AppendStatements(
        lock_session=f"SELECT version, last_seq FROM sessions WHERE id = {m}{dialect.for_update}",
        advance=advance,
        # n events at once: a bounded set of statements, each rendered once.
        insert_events=functools.lru_cache(64)(
            lambda rows: dialect.insert("events", insert_fields, rows, insert_values)
        ),
        event_row=event_row,
        events_with_ids=(
            f"SELECT {columns(EVENT_FIELDS, 'e.')} FROM "
            + dialect.strings_table(dialect.p("ids"), "wanted")
            + " JOIN events e ON e.id = wanted.value"
        ),
    )


def _no_check(rows: Sequence[Any]) -> None:
    pass


def append(
    a: AppendStatements,
    w: SessionWrites,
    prepared: spi.PreparedAppend,
    check: Callable[[Sequence[Any]], None] = _no_check,
) -> Steps[spi.AppendOutcome]:
    """Append ``prepared`` in the caller's transaction. ``check`` sees the events' rows
    first (and may refuse them)."""
    events, session_id = prepared.events, prepared.session_id
    required = prepared.users_to_insert, prepared.required_user_ids
    strings = w.statements.dialect.strings
    locked = yield Query(a.lock_session, (session_id,))
    if locked is None:
        raise decisions.missing_session(session_id)
    version, last_seq = locked
    yield from require_users(w, *required)
    if prepared.expected_version is not None and version != prepared.expected_version:
        raise RollbackAndReturn(spi.AppendOutcome(applied=False))
    first_seq = last_seq + 1
    if prepared.users_to_insert:
        yield from insert_users(w, prepared.users_to_insert)
    rows = [a.event_row(p, first_seq + i) for i, p in enumerate(events)]
    check(rows)
    values = [value for row in rows for value in row]
    if not (yield Query(a.insert_events(len(events)), values, "insert")):
        ids = strings(p.event.id for p in events)
        stored = yield Query(a.events_with_ids, {"ids": ids}, "all")
        if not stored:
            raise StoreError(f"the append to session {session_id!r} broke a unique key")
        found = list(map(w.statements.dialect.rows.event, stored))
        raise RollbackAndReturn(decisions.replay_or_conflict(prepared, found))
    activity_at = None if prepared.activity_at is None else to_micros(prepared.activity_at)
    advance = (len(events), prepared.new_stamp, activity_at, prepared.new_message_count)
    yield Query(a.advance, (*advance, prepared.started_by, session_id), "count")
    for offset, p in enumerate(events):
        # "event.seq is 0 until the backend assigns it" (PreparedEvent): the event was
        # made for this append and nothing else holds it, so it takes its seq in place
        # rather than as a copy of every field, on the hottest path there is.
        object.__setattr__(p.event, "seq", first_seq + offset)
    return spi.AppendOutcome(applied=True, events=[p.event for p in events])
