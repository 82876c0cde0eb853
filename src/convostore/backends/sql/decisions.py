"""What a SQL backend decides from what its statements found, and the errors it raises,
written once: which users must be stored, why a session insert or an append was refused,
whether a stored event id is a retried append or a conflict, stale or missing.

Nothing here does I/O: a backend runs its statements, then hands their answers here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from convostore import _json
from convostore.backends.sql.dialect import Dialect
from convostore.errors import (
    EventIdConflictError,
    InvalidArgumentError,
    SessionExistsError,
    SessionNotFoundError,
    StaleObjectError,
    StoreError,
    UnknownUserError,
)
from convostore.filters import EventFilter, branch_lineage
from convostore.model import Event, Session, User
from convostore.prepare import AppendOutcome, PreparedAppend

__all__ = [
    "MAX_INTEGER",
    "backfill",
    "bounded",
    "check_parent",
    "event_conditions",
    "kept_entries",
    "missing_session",
    "read_parameters",
    "refuse_existing",
    "replay_or_conflict",
    "stale_or_missing",
    "unconfirmed_users",
    "unknown_users",
]

# SQL integers are signed 64-bit; a window bound beyond that bounds nothing.
MAX_INTEGER: Final = 2**63 - 1


def bounded(value: int | None) -> int | None:
    return None if value is None else min(value, MAX_INTEGER)


def unconfirmed_users(users: tuple[User, ...], required: tuple[str, ...]) -> list[str]:
    """The required ids not given as a `User` in the same call: those must be stored."""
    if not required:
        return []
    given = {user.id for user in users}
    return [user_id for user_id in required if user_id not in given]


def unknown_users(missing: Sequence[str]) -> UnknownUserError:
    """The error for required user ids that name no stored user, in the order given."""
    return UnknownUserError(f"unknown user id(s): {', '.join(map(repr, missing))}")


def missing_session(session_id: str) -> SessionNotFoundError:
    return SessionNotFoundError(f"no session {session_id!r}")


def refuse_existing(session: Session, if_absent: bool) -> None:
    """An insert found the session id taken: None for ``if_absent``, else the error."""
    if not if_absent:
        raise SessionExistsError(f"session {session.id!r} already exists")


def check_parent(session: Session, parent: Sequence[Any] | None) -> None:
    """``part_of`` must name an existing (``parent``: its owner_id and part_of, or None)
    top-level session with the same owner."""
    if session.part_of is None:
        return
    if parent is None:
        raise SessionNotFoundError(f"part_of names no session: {session.part_of!r}")
    parent_owner, parent_part_of = parent
    if parent_part_of is not None:
        raise InvalidArgumentError("part_of must name a top-level session")
    if parent_owner != session.owner_id:
        raise InvalidArgumentError("part_of must name a session with the same owner")


def stale_or_missing(session_id: str, exists: bool) -> StoreError:
    """Why a write guarded by the session's stamp changed nothing."""
    if not exists:
        return missing_session(session_id)
    return StaleObjectError(f"session {session_id!r} was written since it was read")


def replay_or_conflict(append: PreparedAppend, stored: Sequence[Event]) -> AppendOutcome:
    """An append found event ids of it stored already (``stored``: those events). A single
    append retried in its own log answers the stored event and writes nothing; any other
    clash is `EventIdConflictError`."""
    by_id = {event.id: event for event in stored}
    clash = next(by_id[p.event.id] for p in append.events if p.event.id in by_id)
    if append.expected_version is None and clash.session_id == append.session_id:
        return AppendOutcome(applied=False, events=[clash])
    where = "" if clash.session_id == append.session_id else " by another session"
    raise EventIdConflictError(f"event id {clash.id!r} is already used{where}")


def backfill(name: str, rows: Sequence[Sequence[Any]]) -> list[tuple[str, str]]:
    """The (value, session_id) entries of the newly indexed key ``name`` for the sessions
    ``rows`` (id, metadata JSON) that have it, each value rendered as every write renders
    it (`convostore._json.index_value`), so it compares as a written one does. A value
    no lookup could name (a string holding a NUL) gets no entry, as in a write."""
    entries = []
    for session_id, metadata in rows:
        values = _json.loads(metadata)
        if name not in values:
            continue  # The rows may be found by a looser test than a top-level key.
        value = _json.indexable(values[name])
        if value is not None:
            entries.append((value, session_id))
    return entries


def kept_entries(
    candidates: tuple[tuple[str, str], ...], indexed: Iterable[str]
) -> list[tuple[str, str]]:
    """The candidate (key, value) entries of a write (`convostore.prepare.indexed_pairs`)
    whose key is among ``indexed``, the keys the database indexes as read in the write's
    own transaction."""
    keys = frozenset(indexed)
    return [(name, value) for name, value in candidates if name in keys]


def event_conditions(names: Sequence[str], event_filter: EventFilter) -> tuple[bool, ...]:
    """Which of the conditions ``names`` (attributes of `EventFilter`) the filter sets."""
    return tuple(
        event_filter.exclude_synthetic
        if name == "exclude_synthetic"
        else getattr(event_filter, name) is not None
        for name in names
    )


def read_parameters(dialect: Dialect, session_id: str, f: EventFilter) -> dict[str, Any]:
    """The parameters of a read of the log through ``f``, as ``dialect`` binds them:
    session_id, types, roles, lineage (the branches a branch filter admits), since,
    until, text, after_seq, limit and last; None for what the filter does not set."""
    strings, time = dialect.strings, dialect.time_param
    return {
        "session_id": session_id,
        "types": None if f.types is None else strings(f.types),
        "roles": None if f.roles is None else strings(str(role) for role in f.roles),
        "lineage": None if f.branch is None else strings(branch_lineage(f.branch)),
        "since": None if f.since is None else time(f.since),
        "until": None if f.until is None else time(f.until),
        "text": f.text,
        "after_seq": bounded(f.after_seq),
        "limit": dialect.no_limit if f.limit is None else bounded(f.limit),
        "last": bounded(f.last),
    }
