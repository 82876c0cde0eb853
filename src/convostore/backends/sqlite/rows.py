"""Values to statement parameters and rows back to values, in the column orders of
`convostore.backends.sqlite.statements`."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from typing import Any

from convostore import _json
from convostore._codec import (
    assets_from_json,
    attachments_from_json,
    data_from_json,
    recipients_from_json,
    tool_calls_from_json,
)
from convostore._time import from_micros, to_micros
from convostore.model import MESSAGE, Event, Message, Role, Session, SessionSummary, User
from convostore.prepare import NewSession, PreparedEvent

__all__ = [
    "event_from_row",
    "event_values",
    "session_from_row",
    "session_values",
    "summary_from_row",
    "user_from_row",
    "user_values",
    "vector_blob",
    "vector_from_blob",
]

_BIG_ENDIAN = sys.byteorder == "big"
# What fills the columns only a message has, for any other event.
_NOT_A_MESSAGE = (None,) * 14
_SUMMARY_OWNER = 13  # where the owner's columns start in a summary row
_SUMMARY_STARTER = 19  # where the first author's columns start


def vector_blob(vector: tuple[float, ...] | None) -> bytes | None:
    """float32 values, little-endian on every machine, so a database file moves freely."""
    if vector is None:
        return None
    values = array("f", vector)
    if _BIG_ENDIAN:
        values.byteswap()
    return values.tobytes()


def vector_from_blob(blob: bytes | None) -> tuple[float, ...] | None:
    if blob is None:
        return None
    values = array("f")
    values.frombytes(blob)
    if _BIG_ENDIAN:
        values.byteswap()
    return tuple(values.tolist())


def user_values(user: User) -> tuple[Any, ...]:
    metadata = _json.dumps(dict(user.metadata), "user.metadata")
    return (user.id, user.display_name, user.username, user.email, user.kind, metadata)


def user_from_row(row: Sequence[Any], start: int = 0) -> User | None:
    """The user whose columns start at ``start``; None where a join found none."""
    user_id, display_name, username, email, kind, metadata = row[start : start + 6]
    if user_id is None:
        return None
    return User(user_id, display_name, username, email, kind, _json.loads(metadata))


def session_values(new: NewSession) -> tuple[Any, ...]:
    session = new.session
    return (
        session.id,
        session.owner_id,
        session.title,
        session.kind,
        session.part_of,
        session.held_with,
        to_micros(session.created_at),
        to_micros(session.last_activity_at),
        None if session.expires_at is None else to_micros(session.expires_at),
        new.metadata_json,
        session.version,
        session.stamp,
    )


def session_from_row(row: Sequence[Any]) -> Session:
    return Session(
        id=row[0],
        owner_id=row[1],
        title=row[2],
        kind=row[3],
        part_of=row[4],
        held_with=row[5],
        created_at=from_micros(row[6]),
        last_activity_at=from_micros(row[7]),
        expires_at=None if row[8] is None else from_micros(row[8]),
        metadata=_json.loads(row[9]),
        version=row[10],
        stamp=row[11],
    )


def summary_from_row(row: Sequence[Any]) -> SessionSummary:
    return SessionSummary(
        session=session_from_row(row),
        owner=user_from_row(row, _SUMMARY_OWNER),
        message_count=row[12],
        started_by=user_from_row(row, _SUMMARY_STARTER),
    )


def event_values(prepared: PreparedEvent, seq: int) -> tuple[Any, ...]:
    event = prepared.event
    common = (
        event.session_id,
        seq,
        event.id,
        event.type,
        to_micros(event.created_at),
        event.branch,
        prepared.metadata_json,
        prepared.payload_json,
        1 if event.synthetic else 0,
    )
    parts = prepared.message_json
    if not isinstance(event, Message) or parts is None:
        return common + _NOT_A_MESSAGE
    return (
        *common,
        event.role.value,
        event.content,
        event.author_id,
        parts.recipient_ids,
        event.in_reply_to,
        parts.tool_calls,
        event.tool_call_id,
        parts.attachments,
        parts.data,
        parts.assets,
        event.narration,
        vector_blob(event.embedding),
        event.embedding_model,
        event.stamp,
    )


def event_from_row(row: Sequence[Any]) -> Event:
    if row[3] != MESSAGE:
        return Event(
            id=row[2],
            session_id=row[0],
            seq=row[1],
            type=row[3],
            created_at=from_micros(row[4]),
            branch=row[5],
            metadata=_json.loads(row[6]),
            payload=None if row[7] is None else _json.loads(row[7]),
            synthetic=bool(row[8]),
        )
    return Message(
        id=row[2],
        session_id=row[0],
        seq=row[1],
        created_at=from_micros(row[4]),
        branch=row[5],
        metadata=_json.loads(row[6]),
        synthetic=bool(row[8]),
        role=Role(row[9]),
        content=row[10],
        author_id=row[11],
        recipient_ids=recipients_from_json(row[12]),
        in_reply_to=row[13],
        tool_calls=tool_calls_from_json(row[14]),
        tool_call_id=row[15],
        attachments=attachments_from_json(row[16]),
        data=data_from_json(row[17]),
        assets=assets_from_json(row[18]),
        narration=row[19],
        embedding=vector_from_blob(row[20]),
        embedding_model=row[21],
        stamp=row[22],
    )
