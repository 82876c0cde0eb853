"""The exception tree: every error convostore raises derives from `StoreError`.

Lookups that find nothing also derive from `LookupError`, bad arguments from
`ValueError`, so callers can catch either the convostore class or the builtin one.
Driver exceptions never leak raw: backends translate them with ``raise ... from``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from convostore.model import ReembedReport

__all__ = [
    "BackendUnavailableError",
    "ConflictError",
    "EventIdConflictError",
    "InvalidArgumentError",
    "InvalidCursorError",
    "NotFoundError",
    "NotIndexedError",
    "ReembedIncompleteError",
    "SchemaVersionError",
    "SessionExistsError",
    "SessionNotFoundError",
    "StaleObjectError",
    "StoreClosedError",
    "StoreError",
    "UnknownUserError",
]


class StoreError(Exception):
    """The root of every error convostore raises."""


class NotFoundError(StoreError, LookupError):
    """Something the call names does not exist."""


class SessionNotFoundError(NotFoundError):
    """The session does not exist (or no longer does)."""


class UnknownUserError(NotFoundError, ValueError):
    """A user id was given where a stored user is required, and no such user is stored."""


class InvalidArgumentError(StoreError, ValueError):
    """An argument is malformed or out of range; nothing was written."""


class InvalidCursorError(InvalidArgumentError):
    """A page cursor is blank, malformed, of an unknown version, or of the other order.

    The message is always "invalid session cursor"; ``__cause__`` says why.
    """

    def __init__(self) -> None:
        super().__init__("invalid session cursor")


class NotIndexedError(InvalidArgumentError):
    """A metadata lookup named a key the store was not configured to index."""


class ConflictError(StoreError):
    """The write conflicts with what is stored; nothing was written."""


class SessionExistsError(ConflictError):
    """A session with this id already exists; it was left untouched."""


class StaleObjectError(ConflictError):
    """The object's stamp no longer matches the stored one: someone wrote it since it was read."""


class EventIdConflictError(ConflictError):
    """The event id is already used elsewhere: in another session's log, or (in a batch)
    by an event already in this log or twice in the batch itself."""


class SchemaVersionError(StoreError):
    """The database schema was written by a newer convostore than this one."""


class BackendUnavailableError(StoreError):
    """The backend cannot be reached or used: a missing driver (the message names the
    extra to install), a lost connection, a locked or unreadable database."""


class StoreClosedError(StoreError):
    """The store was closed: it takes no more work (closing it again is harmless)."""


class ReembedIncompleteError(StoreError):
    """`Store.reembed` could not embed every pending message.

    ``failed_message_ids`` were attempted and failed; ``not_attempted`` were never tried
    (the run gave up on a dead service); ``report`` counts what did succeed.
    """

    def __init__(
        self,
        failed_message_ids: Sequence[str],
        not_attempted: int,
        report: ReembedReport,
    ) -> None:
        self.failed_message_ids: tuple[str, ...] = tuple(failed_message_ids)
        self.not_attempted = not_attempted
        self.report = report
        shown = ", ".join(self.failed_message_ids[:10])
        more = len(self.failed_message_ids) - 10
        if more > 0:
            shown += f" (+{more} more)"
        super().__init__(
            f"re-embedding incomplete: {len(self.failed_message_ids)} message(s) failed"
            f"{': ' + shown if shown else ''}; {not_attempted} not attempted"
        )
