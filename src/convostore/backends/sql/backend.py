"""`SQLBackend`: the primitives every SQL backend runs alike, over three I/O hooks."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from convostore._time import from_micros
from convostore.backends import interface, spi
from convostore.backends.sql import decisions
from convostore.backends.sql.rows import RowReader
from convostore.backends.sql.statements import Statements

__all__ = ["SQLBackend"]

Parameters = Mapping[str, Any]


class SQLBackend(interface.Backend):
    """A `Backend` on a SQL database. A subclass sets ``statements`` (the shared
    statements in its dialect) and gives the I/O: `_fetch_all`, `_changed` and
    `_returning`. What it still implements itself (mostly by running the shared steps
    of `convostore.backends.sql`: writes, reads, appends, embeddings, search) are the
    writes, reads of the log, search, and `open` / `close`."""

    statements: Statements

    @property
    def rows(self) -> RowReader:
        return self.statements.dialect.rows

    # ---------------------------------------------------------------- I/O

    @abc.abstractmethod
    async def _fetch_all(self, statement: str, parameters: Parameters) -> list[Sequence[Any]]:
        """The rows of one read-only statement."""

    async def _fetch_one(self, statement: str, parameters: Parameters) -> Sequence[Any] | None:
        rows = await self._fetch_all(statement, parameters)
        return rows[0] if rows else None

    async def _fetch_by_key(self, statement: str, parameters: Parameters) -> Sequence[Any] | None:
        """`_fetch_one` for a statement that reads one row by its primary key: the
        cheapest read there is, which a backend may run where it costs least."""
        return await self._fetch_one(statement, parameters)

    @abc.abstractmethod
    async def _changed(self, statement: str, parameters: Parameters) -> int:
        """Run one writing statement as its own transaction; how many rows it changed
        itself (not those its cascades changed)."""

    @abc.abstractmethod
    async def _returning(self, statement: str, parameters: Parameters) -> Sequence[Any] | None:
        """Run one writing statement with RETURNING as its own transaction; its row. The
        statement writes one session, named by its ``id`` parameter: where the dialect has
        no RETURNING (`Dialect.returning`), run it, then read that session back with
        ``statements.select_session`` in the same transaction (None if it changed
        nothing)."""

    async def stats(self) -> interface.DatabaseStats:
        row = await self._fetch_one(self.statements.database_stats, {})
        assert row is not None
        users, sessions, events, messages, vectors = map(int, row[:5])
        size = None if row[5] is None else int(row[5])
        return interface.DatabaseStats(users, sessions, events, messages, vectors, size)

    # ---------------------------------------------------------------- users and sessions

    async def get_user(self, user_id: str) -> spi.User | None:
        row = await self._fetch_by_key(self.statements.select_user, {"id": user_id})
        return None if row is None else self.rows.user(row)

    async def get_session(self, session_id: str) -> spi.Session | None:
        row = await self._fetch_by_key(self.statements.select_session, {"id": session_id})
        return None if row is None else self.rows.session(row)

    async def set_title(self, session_id: str, title: str | None, stamp: str) -> spi.Session:
        parameters = {"title": title, "stamp": stamp, "id": session_id}
        row = await self._returning(self.statements.set_title, parameters)
        if row is None:
            raise decisions.missing_session(session_id)
        return self.rows.session(row)

    async def delete_session(self, session_id: str) -> bool:
        return await self._changed(self.statements.delete_session, {"id": session_id}) > 0

    async def delete_expired(self, before: datetime) -> int:
        parameters = {"before": self.statements.dialect.time_param(before)}
        return await self._changed(self.statements.delete_expired, parameters)

    async def list_sessions(self, page: interface.SessionPage) -> list[spi.Session]:
        rows = await self._fetch_all(*self._listing(False, page))
        return [self.rows.session(row) for row in rows]

    async def list_summaries(self, page: interface.SessionPage) -> list[spi.SessionSummary]:
        rows = await self._fetch_all(*self._listing(True, page))
        return [self.rows.summary(row) for row in rows]

    def _listing(self, summaries: bool, page: interface.SessionPage) -> tuple[str, Parameters]:
        after, filter = page.after, page.filter
        statement = self.statements.listing(
            summaries, page.order, filter.include_parts, filter.kind is not None, after is not None
        )
        after_at = None
        if after is not None and after.last_activity_us is not None:
            after_at = self.statements.dialect.time_param(from_micros(after.last_activity_us))
        parameters = {
            "owner_id": page.owner_id,
            "kind": filter.kind,
            "after_id": None if after is None else after.session_id,
            "after_at": after_at,
            "limit": page.limit,
        }
        return statement, parameters

    async def count_sessions(self, owner_id: str, filter: spi.SessionFilter) -> int:
        statement = self.statements.count(filter.include_parts, filter.kind is not None)
        row = await self._fetch_one(statement, {"owner_id": owner_id, "kind": filter.kind})
        assert row is not None
        return int(row[0])

    async def find_part(self, part_of: str, held_with: str) -> spi.Session | None:
        parameters = {"part_of": part_of, "held_with": held_with}
        row = await self._fetch_one(self.statements.find_part, parameters)
        return None if row is None else self.rows.session(row)

    async def list_parts(self, part_of: str) -> list[spi.SessionSummary]:
        rows = await self._fetch_all(self.statements.list_parts, {"part_of": part_of})
        return [self.rows.summary(row) for row in rows]

    async def participants(self, session_id: str) -> list[spi.User]:
        rows = await self._fetch_all(self.statements.participants, {"session_id": session_id})
        return [user for row in rows if (user := self.rows.user(row)) is not None]

    async def find_sessions_by_metadata(self, name: str, value: str) -> list[spi.Session]:
        parameters = {"name": name, "value": value}
        rows = await self._fetch_all(self.statements.sessions_by_metadata, parameters)
        return [self.rows.session(row) for row in rows]

    async def indexed_keys(self) -> frozenset[str]:
        rows = await self._fetch_all(self.statements.select_indexed_keys, {})
        return frozenset(str(row[0]) for row in rows)

    # ---------------------------------------------------------------- the log

    async def version(self, session_id: str) -> int:
        row = await self._fetch_by_key(self.statements.session_version, {"id": session_id})
        return 0 if row is None else int(row[0])

    async def set_narration(
        self, session_id: str, message_id: str, text: str | None, stamp: str
    ) -> bool:
        parameters = {"text": text, "stamp": stamp, "id": message_id, "session_id": session_id}
        return await self._changed(self.statements.set_narration, parameters) > 0
