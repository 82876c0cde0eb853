"""The row shapes every SQL backend shares, and how they read back as values.

Users, sessions, summaries and events come back from SQLite and PostgreSQL in the same
column orders (each backend's ``statements.USER_FIELDS``, ``SESSION_FIELDS`` and
``EVENT_FIELDS``); the backends differ only in how a time and a vector are stored,
which a `RowReader` is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
        """The event whose columns start at ``start``."""
        (
            session_id, seq, event_id, event_type, created_at, branch, metadata, payload,
            synthetic, role, content, author_id, recipient_ids, in_reply_to, tool_calls,
            tool_call_id, attachments, data, assets, narration, embedding, embedding_model,
            stamp,
        ) = row[start : start + EVENT_COLUMN_COUNT]  # fmt: skip
        if event_type != MESSAGE:
            return Event(
                id=event_id,
                session_id=session_id,
                seq=seq,
                type=event_type,
                created_at=self.time_of(created_at),
                branch=branch,
                metadata=_json.loads(metadata),
                payload=None if payload is None else _json.loads(payload),
                synthetic=bool(synthetic),
            )
        return Message(
            id=event_id,
            session_id=session_id,
            seq=seq,
            created_at=self.time_of(created_at),
            branch=branch,
            metadata=_json.loads(metadata),
            synthetic=bool(synthetic),
            role=Role(role),
            content=content,
            author_id=author_id,
            recipient_ids=recipients_from_json(recipient_ids),
            in_reply_to=in_reply_to,
            tool_calls=tool_calls_from_json(tool_calls),
            tool_call_id=tool_call_id,
            attachments=attachments_from_json(attachments),
            data=data_from_json(data),
            assets=assets_from_json(assets),
            narration=narration,
            embedding=self.vector_of(embedding),
            embedding_model=embedding_model,
            stamp=stamp,
        )
