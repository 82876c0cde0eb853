"""What every backend decides from what it found, and the contract's errors, written
once: which users must be stored, why a session insert, an update or an append was
refused, whether a stored event id is a retried append or a conflict, who owns a part.

Memory, SQLite, PostgreSQL, MySQL and the Cypher backends call these; nothing here does
I/O. The append's checks come in the order `convostore.backends.interface.Backend.append`
gives: missing session, unknown users, the batch's version, then stored ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from convostore.backends import spi
from convostore.errors import (
    EventIdConflictError,
    InvalidArgumentError,
    SessionExistsError,
    SessionNotFoundError,
    StaleObjectError,
    StoreError,
    UnknownUserError,
)
from convostore.model import Event, Session, User

__all__ = [
    "check_parent",
    "missing_session",
    "owned_by_parent",
    "refuse_existing",
    "replay_or_conflict",
    "stale_or_missing",
    "unconfirmed_users",
    "unknown_users",
]


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


def replay_or_conflict(append: spi.PreparedAppend, stored: Sequence[Event]) -> spi.AppendOutcome:
    """An append found event ids of it stored already (``stored``: those events). A single
    append retried in its own log answers the stored event and writes nothing; any other
    clash is `EventIdConflictError`."""
    by_id = {event.id: event for event in stored}
    clash = next(by_id[p.event.id] for p in append.events if p.event.id in by_id)
    if append.expected_version is None and clash.session_id == append.session_id:
        return spi.AppendOutcome(applied=False, events=[clash])
    where = "" if clash.session_id == append.session_id else " by another session"
    raise EventIdConflictError(f"event id {clash.id!r} is already used{where}")


def owned_by_parent(
    new: spi.NewSession, parent: tuple[str | None, str | None] | None
) -> spi.NewSession:
    """``new``, a part, owned by its parent, given the parent's (owner_id, part_of) as
    read in the transaction that inserts it; None when there is no parent."""
    part_of = new.session.part_of
    if parent is None:
        raise SessionNotFoundError(f"no session {part_of!r} to hold a part")
    owner_id, parent_part_of = parent
    if parent_part_of is not None:
        raise InvalidArgumentError("part_of must name a top-level session")
    return replace(new, session=replace(new.session, owner_id=owner_id))
