"""SQLite's change feed for the shared vector cache (`convostore.backends.sql.vector_cache`).

Schema version 5 logs every change a cache must follow in ``vector_changes``, filled by
triggers: the rowid of each event whose vector is inserted, changed (its vector, model,
role, type or session) or deleted, by the cascade of a deleted session too. Writes are
serialised, so the log's ids (AUTOINCREMENT: never reused) grow in commit order and a
read snapshot holds a prefix of the log: its position is the last id it holds. The log
keeps the last changes only (`schema.VECTOR_CHANGES_KEPT`); the generation of schema 3
moves when a session changes owner. `SQLiteFeed` answers the cache's requests on one
connection, in its read snapshot.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Final

from convostore.backends.sql.vector_cache import (
    Changes,
    Feed,
    Position,
    SessionRow,
    VectorRow,
    key_parameters,
)

__all__ = ["SQLiteFeed"]

# Where a read snapshot stands: the generation, the last change logged (AUTOINCREMENT's
# record, kept when the log is pruned), and the change the log has been pruned through.
SNAPSHOT_POSITION: Final = (
    "SELECT (SELECT generation FROM vector_generation WHERE id = 1),"
    " coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'vector_changes'), 0),"
    " (SELECT through FROM vector_changes_pruned WHERE id = 1)"
)
CHANGED_ROWIDS: Final = (
    "SELECT DISTINCT event_rowid FROM vector_changes WHERE id > :after ORDER BY event_rowid"
)
_QUALIFIES = " e.type = 'MESSAGE' AND e.embedding IS NOT NULL AND length(e.embedding) = :width"
_BY_MODEL = " AND e.embedding_model = :model"
_COLUMNS = "SELECT e.rowid, e.embedding, e.session_id, e.role FROM events e WHERE"
_AFTER = " AND e.rowid > :after ORDER BY e.rowid LIMIT :limit"
VECTORS_AFTER: Final = {
    False: _COLUMNS + _QUALIFIES + _AFTER,
    True: _COLUMNS + _QUALIFIES + _BY_MODEL + _AFTER,
}
COUNT_VECTORS: Final = {
    False: "SELECT count(*) FROM events e WHERE" + _QUALIFIES,
    True: "SELECT count(*) FROM events e WHERE" + _QUALIFIES + _BY_MODEL,
}
_OF_ROWIDS = " AND e.rowid IN (SELECT value FROM json_each(:rowids)) ORDER BY e.rowid"
VECTORS_OF_ROWIDS: Final = {
    False: _COLUMNS + _QUALIFIES + _OF_ROWIDS,
    True: _COLUMNS + _QUALIFIES + _BY_MODEL + _OF_ROWIDS,
}
SESSIONS: Final = (
    "SELECT id, owner_id, part_of FROM sessions WHERE id IN (SELECT value FROM json_each(:ids))"
)


class SQLiteFeed(Feed):
    """The answers to the cache's requests, read on ``connection`` (in its snapshot)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def position(self) -> Position:
        return Position(*self.connection.execute(SNAPSHOT_POSITION).fetchone())

    def changes_after(self, change: int) -> Changes:
        rows = self.connection.execute(CHANGED_ROWIDS, {"after": change})
        # Deleted sessions are logged row by row by the cascade's trigger.
        return Changes([row[0] for row in rows])

    def sessions_of(self, ids: list[str]) -> list[SessionRow]:
        return self.connection.execute(SESSIONS, {"ids": json.dumps(ids)}).fetchall()

    def count_vectors(self, model: str | None, width: int) -> int:
        statement = COUNT_VECTORS[model is not None]
        return int(self.connection.execute(statement, key_parameters(model, width)).fetchone()[0])

    def vectors_after(
        self, model: str | None, width: int, after: int, limit: int
    ) -> list[VectorRow]:
        parameters = key_parameters(model, width) | {"after": after, "limit": limit}
        return self.connection.execute(VECTORS_AFTER[model is not None], parameters).fetchall()

    def vectors_of(
        self, model: str | None, width: int, rowids: list[int], sessions: list[str]
    ) -> list[VectorRow]:
        # Deleted sessions are logged row by row: ``sessions`` is always empty here.
        parameters = key_parameters(model, width) | {"rowids": json.dumps(rowids)}
        return self.connection.execute(VECTORS_OF_ROWIDS[model is not None], parameters).fetchall()
