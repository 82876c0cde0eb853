"""Values to statement parameters and rows back to values, in the column orders of
`convostore.backends.sqlite.statements`."""

from __future__ import annotations

import sys
from array import array
from typing import Any

from convostore._time import from_micros, to_micros
from convostore.backends.sql.rows import RowReader, user_values
from convostore.model import Message
from convostore.prepare import NewSession, PreparedEvent, new_stamp

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
# What fills the columns only a message has, for any other event, but its stamp.
_NOT_A_MESSAGE = (None,) * 13


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
        # Every row gets a stamp of its own, which `event_cache` tells rows apart by.
        return (*common, *_NOT_A_MESSAGE, new_stamp())
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


READER = RowReader(time_of=from_micros, vector_of=vector_from_blob)
user_from_row = READER.user
session_from_row = READER.session
summary_from_row = READER.summary
event_from_row = READER.event
