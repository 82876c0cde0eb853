"""Values to statement parameters and rows back to values, in the column orders of
`convostore.backends.sqlite.statements`: SQLite stores times, JSON and vectors as
`convostore.backends.sql.values` has it."""

from __future__ import annotations

from typing import Any

from convostore.backends import spi
from convostore.backends.sql import values
from convostore.backends.sql.rows import user_values
from convostore.backends.sql.values import (
    MICROS_READER,
    session_values,
    vector_blob,
    vector_from_blob,
)

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


def event_values(prepared: spi.PreparedEvent, seq: int) -> tuple[Any, ...]:
    """`values.event_values`, with the row's stamp for an event that is not a message
    too (`PreparedEvent.stamp`): `event_cache` tells rows apart by their stamps."""
    row = values.event_values(prepared, seq)
    if row[-1] is None:
        return (*row[:-1], prepared.stamp)
    return row


READER = MICROS_READER
user_from_row = READER.user
session_from_row = READER.session
summary_from_row = READER.summary
event_from_row = READER.event
