"""The text index kept in batches (schema version 6).

An append writes no index entry: the messages above ``indexed_through`` wait, and
`write_catch_up` indexes all of them in one transaction, writing one FTS5 segment for
the batch where a trigger wrote one per append. It runs on the writer thread after a
group commit once `BATCH` messages are waiting (`TextIndexer`), and before every text
search, so a search never misses a message whose append was answered before it began.

A batch after a commit does not wait for an fsync of its own (``synchronous=NORMAL``
for its transaction), so it holds the write lock for its statements only: if a crash
loses it, its messages are above the mark again and the next batch indexes them; and
the WAL is written in order, so the next durable commit makes it durable too.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Final

from convostore.backends.sqlite.connection import TOKENS_FUNCTION, in_write_transaction

__all__ = ["BATCH", "TextIndexer", "write_catch_up"]

_log = logging.getLogger(__name__)

# Messages appended through a store before its writer indexes them: enough that a
# segment's fixed cost is shared by many messages, few enough that indexing them (a few
# milliseconds) and a search's own catching up stay short.
BATCH: Final = 128

INDEXED_THROUGH: Final = (
    "SELECT indexed_through, (SELECT coalesce(max(rowid), 0) FROM events)"
    " FROM text_index_state WHERE id = 1"
)
INDEX_WAITING: Final = (
    f"INSERT INTO events_fts (rowid, words) SELECT rowid, {TOKENS_FUNCTION}(content)"
    " FROM events WHERE rowid > ? AND type = 'MESSAGE'"
)
MARK_INDEXED: Final = "UPDATE text_index_state SET indexed_through = ? WHERE id = 1"
SYNCHRONOUS_LEVEL: Final = "PRAGMA synchronous"
WITHOUT_FSYNC: Final = "PRAGMA synchronous = NORMAL"
# The levels whose commits wait for an fsync, by the number PRAGMA synchronous reads.
_DURABLE: Final = {2: "PRAGMA synchronous = FULL", 3: "PRAGMA synchronous = EXTRA"}


def write_catch_up(connection: sqlite3.Connection) -> int:
    """Index every message above the mark (in the caller's write transaction); how many
    rows the mark moved over."""
    indexed_through, top = connection.execute(INDEXED_THROUGH).fetchone()
    if top <= indexed_through:
        return 0
    connection.execute(INDEX_WAITING, (indexed_through,))
    connection.execute(MARK_INDEXED, (top,))
    return int(top - indexed_through)


class TextIndexer:
    """Counts the messages a store appends and, on the writer thread after a group
    commit, indexes the waiting ones once `BATCH` have been counted.

    The count is a hint: it is raised on the event loop's thread and read on the
    writer's, and a lost increment only delays a batch. Whatever waits is indexed by
    the next batch or search, whichever process wrote it."""

    def __init__(self) -> None:
        self.waiting = 0

    def count(self, messages: int) -> None:
        self.waiting += messages

    def due(self) -> bool:
        return self.waiting >= BATCH

    def __call__(self, connection: sqlite3.Connection) -> None:
        """Index the waiting messages, after a commit on the writer's thread."""
        if not self.due():
            return
        self.waiting = 0
        try:
            (level,) = connection.execute(SYNCHRONOUS_LEVEL).fetchone()
            restore = _DURABLE.get(level)
            if restore is not None:
                connection.execute(WITHOUT_FSYNC)
            try:
                in_write_transaction(connection, write_catch_up, ())
            finally:
                if restore is not None:
                    connection.execute(restore)
        except sqlite3.Error as error:
            # Nothing is lost: the messages stay waiting for the next batch or search,
            # which reports the error if it lasts.
            _log.warning("indexing waiting messages failed: %s", error)
