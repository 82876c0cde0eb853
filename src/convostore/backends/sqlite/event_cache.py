"""Events read back, kept by rowid, so a read decodes only the rows it has not seen.

Reading a window costs more in turning 23 columns of each row into Python values and
an `Event` than in finding the rows. A read first asks the database for the rowid and
``stamp`` of each event it answers with (two columns), takes the events whose row still
has the stamp they were read with from here, and reads whole only the other rows.

Why a stamp is enough: an events row is never changed without a new stamp (set_narration
and set_embeddings write one; nothing else updates events), and every row is inserted
with a new random stamp, messages and other events alike (schema version 6 on), so a
rowid given out again after a delete never matches what was kept for it. A row with no
stamp (another event written before schema version 6) is never kept. Events are
immutable values, so the same one may be handed to several callers, as the memory
backend does.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Final, cast

from convostore.backends.sql.event_cache import CAPACITY, EventCache
from convostore.backends.sql.statements import EVENT_FIELDS
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.rows import event_from_row
from convostore.model import Event

__all__ = ["CAPACITY", "EventCache", "read_through"]

_STAMP = 1 + EVENT_FIELDS.index("stamp")  # in a row of EVENTS_BY_ROWIDS
EVENTS_BY_ROWIDS: Final = (
    f"SELECT rowid, {sql.EVENT_COLUMNS} FROM events WHERE rowid IN (SELECT value FROM json_each(?))"
)


def read_through(
    connection: sqlite3.Connection,
    cache: EventCache,
    keys_statement: str,
    rows_statement: str,
    parameters: Any,
) -> list[Event]:
    """The events ``rows_statement`` would read, in its order: ``keys_statement`` is the
    same read selecting ``rowid, stamp`` only. Kept events are taken from ``cache``, the
    rest read by rowid; if any of those changed or went in between (another snapshot),
    ``rows_statement`` answers alone, in one snapshot."""
    keys = connection.execute(keys_statement, parameters).fetchall()
    found, missing = cache.take(keys)
    if not missing:
        return cast(list[Event], found)
    rowids = json.dumps([keys[position][0] for position in missing])
    rows = {row[0]: row for row in connection.execute(EVENTS_BY_ROWIDS, (rowids,))}
    kept: list[tuple[int, str, Event]] = []
    for position in missing:
        rowid, stamp = keys[position]
        row = rows.get(rowid)
        if row is None or row[_STAMP] != stamp:
            return [event_from_row(row) for row in connection.execute(rows_statement, parameters)]
        event = event_from_row(row, 1)
        found[position] = event
        if stamp is not None:
            kept.append((rowid, stamp, event))
    cache.keep(kept)
    return cast(list[Event], found)  # every None is replaced
