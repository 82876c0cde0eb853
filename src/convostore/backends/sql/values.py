"""Values to parameters and rows back to values for a schema that stores times as integer
microseconds since the epoch, JSON as text and a vector as a blob of little-endian float32
values: SQLite's and MySQL's. Parameters are in ``SESSION_FIELDS`` and ``EVENT_FIELDS``
order (`convostore.backends.sql.statements`)."""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Iterable
from typing import Any, Final

from convostore._time import from_micros, to_micros
from convostore.backends import spi
from convostore.backends.sql.rows import RowReader
from convostore.model import Message

__all__ = [
    "MICROS_READER",
    "event_values",
    "json_list",
    "session_values",
    "vector_blob",
    "vector_from_blob",
]

_BIG_ENDIAN: Final = sys.byteorder == "big"
# What fills the columns only a message has, for any other event.
_NOT_A_MESSAGE: Final = (None,) * 14


# Lists of ids, types, roles and branches are bound as one JSON text parameter. They
# hold only strings, so one encoder made once serves them all.
_encode_strings = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def json_list(values: Iterable[str]) -> str:
    """Strings bound as one JSON text parameter."""
    return _encode_strings(list(values))


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


def session_values(new: spi.NewSession) -> tuple[Any, ...]:
    session = new.session
    return (*spi.session_values(new, to_micros), session.version, session.stamp)


def event_values(prepared: spi.PreparedEvent, seq: int) -> tuple[Any, ...]:
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
        *spi.message_values(event, parts),
        event.narration,
        vector_blob(event.embedding),
        event.embedding_model,
        event.stamp,
    )


MICROS_READER: Final = RowReader(time_of=from_micros, vector_of=vector_from_blob)
