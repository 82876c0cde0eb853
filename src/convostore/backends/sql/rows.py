"""The row shapes every SQL backend shares, and how they read back as values.

Users, sessions, summaries and events come back from SQLite and PostgreSQL in the same
column orders (each backend's ``statements.USER_FIELDS``, ``SESSION_FIELDS`` and
``EVENT_FIELDS``); the backends differ only in how a time and a vector are stored,
which a `RowReader` is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, TypeVar

from convostore import _json
from convostore._codec import (
    assets_from_json,
    attachments_from_json,
    data_from_json,
    recipients_from_json,
    tool_calls_from_json,
)
from convostore.model import MESSAGE, Event, Message, Role, Session, SessionSummary, User

__all__ = ["EVENT_COLUMN_COUNT", "RowReader", "user_values"]

T = TypeVar("T")

USER_COLUMN_COUNT = 6
EVENT_COLUMN_COUNT = 23
# A summary row: the session's 12 columns, its message count, its owner's columns, then
# the columns of the author of its first message.
_SUMMARY_COUNT = 12
_SUMMARY_OWNER = 13
_SUMMARY_STARTER = _SUMMARY_OWNER + USER_COLUMN_COUNT


def user_values(user: User) -> tuple[Any, ...]:
    """A user's parameters, in ``USER_FIELDS`` order."""
    metadata = _json.dumps(dict(user.metadata), "user.metadata")
    return (user.id, user.display_name, user.username, user.email, user.kind, metadata)


@dataclass(frozen=True, slots=True)
class RowReader:
    """Reads rows back, given how the backend stores a time and a vector."""

    time_of: Callable[[Any], datetime]
    vector_of: Callable[[Any], tuple[float, ...] | None]

    def user(self, row: Sequence[Any], start: int = 0) -> User | None:
        """The user whose columns start at ``start``; None where a join found none."""
        user_id, display_name, username, email, kind, metadata = row[
            start : start + USER_COLUMN_COUNT
        ]
        if user_id is None:
            return None
        return User(user_id, display_name, username, email, kind, _json.loads(metadata))

    def session(self, row: Sequence[Any]) -> Session:
        return Session(
            id=row[0],
            owner_id=row[1],
            title=row[2],
            kind=row[3],
            part_of=row[4],
            held_with=row[5],
            created_at=self.time_of(row[6]),
            last_activity_at=self.time_of(row[7]),
            expires_at=None if row[8] is None else self.time_of(row[8]),
            metadata=_json.loads(row[9]),
            version=row[10],
            stamp=row[11],
        )

    def summary(self, row: Sequence[Any]) -> SessionSummary:
        return SessionSummary(
            session=self.session(row),
            owner=self.user(row, _SUMMARY_OWNER),
            message_count=row[_SUMMARY_COUNT],
            started_by=self.user(row, _SUMMARY_STARTER),
        )

    def event(self, row: Sequence[Any], start: int = 0) -> Event:
        """The event whose columns start at ``start``.

        The hottest code of every read: the common values (no metadata, no recipients,
        tool calls or attachments, no vector) are recognised without decoding, and a
        value is built through its slots rather than its checking constructor (see
        `_built`)."""
        (
            session_id, seq, event_id, event_type, created_at, branch, metadata, payload,
            synthetic, role, content, author_id, recipient_ids, in_reply_to, tool_calls,
            tool_call_id, attachments, data, assets, narration, embedding, embedding_model,
            stamp,
        ) = row[start : start + EVENT_COLUMN_COUNT]  # fmt: skip
        if event_type != MESSAGE:
            return _built(
                _EVENT_SLOTS,
                (
                    event_id, session_id, seq, event_type, self.time_of(created_at), branch,
                    {} if metadata == _NO_METADATA else _json.loads(metadata),
                    None if payload is None else _json.loads(payload), bool(synthetic),
                ),
            )  # fmt: skip
        return _built(
            _MESSAGE_SLOTS,
            (
                event_id, session_id, seq, MESSAGE, self.time_of(created_at), branch,
                {} if metadata == _NO_METADATA else _json.loads(metadata), None,
                bool(synthetic), _ROLES[role], content, author_id,
                () if recipient_ids == _NONE else recipients_from_json(recipient_ids),
                in_reply_to,
                () if tool_calls == _NONE else tool_calls_from_json(tool_calls),
                tool_call_id,
                () if attachments == _NONE else attachments_from_json(attachments),
                () if data == _NONE else data_from_json(data),
                () if assets == _NONE else assets_from_json(assets),
                narration, None if embedding is None else self.vector_of(embedding),
                embedding_model, stamp,
            ),
        )  # fmt: skip


# How an empty object and an empty list are stored (`_json.dumps`, `_codec`).
_NO_METADATA = "{}"
_NONE = "[]"
_ROLES = {role.value: role for role in Role}


def _slot_setters(cls: type, names: tuple[str, ...]) -> tuple[Any, ...]:
    """The slot descriptors' setters of ``cls``'s fields ``names``, in that order."""
    setters = []
    for name in names:
        owner = next(klass for klass in cls.__mro__ if name in vars(klass))
        setters.append(vars(owner)[name].__set__)
    return tuple(setters)


_EVENT_SLOTS = (Event, _slot_setters(Event, tuple(f.name for f in fields(Event))))
_MESSAGE_SLOTS = (Message, _slot_setters(Message, tuple(f.name for f in fields(Message))))


def _built(slots: tuple[type[T], tuple[Any, ...]], values: tuple[Any, ...]) -> T:
    """An instance of a frozen, slotted dataclass with every field set from ``values``
    (in field order) through its slots: what its constructor would make from values read
    back from the database, which were checked when they were written, at about a third
    of the cost (the constructor goes through the frozen class's guard per field)."""
    cls, setters = slots
    instance = object.__new__(cls)
    for set_slot, value in zip(setters, values, strict=True):
        set_slot(instance, value)
    return instance
