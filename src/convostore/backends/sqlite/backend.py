"""`SQLiteBackend`: the `Backend` primitives, each one function run on one thread."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final, Self, TypeVar, TypeVarTuple

from convostore._time import to_micros
from convostore.backends.interface import (
    Backend,
    Capabilities,
    SessionPage,
    TextQuery,
    VectorQuery,
)
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.connection import (
    in_read_snapshot,
    open_connection,
)
from convostore.backends.sqlite.operations import (
    read_all,
    read_events,
    read_one,
    write_append,
    write_delete,
    write_find_or_insert_part,
    write_insert_session,
    write_put_user,
    write_set_narration,
    write_set_title,
    write_update_session,
)
from convostore.backends.sqlite.rows import session_from_row, summary_from_row, user_from_row
from convostore.backends.sqlite.schema import (
    prepare_database,
    write_indexed_keys,
    write_unindexed_key,
)
from convostore.backends.sqlite.search import (
    VectorCache,
    read_count_pending,
    read_pending,
    read_text_search,
    read_vector_index,
    read_vector_search,
    write_embeddings,
    write_vector_index,
)
from convostore.backends.sqlite.url import SQLiteTarget, parse_sqlite_url
from convostore.backends.sqlite.worker import ConnectionWorker
from convostore.embedding import PendingEmbedding, VectorIndexSpec
from convostore.errors import BackendUnavailableError, InvalidArgumentError
from convostore.filters import EventFilter
from convostore.model import (
    Event,
    Role,
    SearchHit,
    Session,
    SessionFilter,
    SessionSummary,
    User,
)
from convostore.prepare import AppendOutcome, NewSession, PreparedAppend, SessionChanges

__all__ = ["READER_THREADS", "SEARCH_THREADS", "SQLiteBackend"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

READER_THREADS: Final = 2
SEARCH_THREADS: Final = 1


class SQLiteBackend(Backend):
    """One SQLite database: a file, or ``:memory:`` (gone at close).

    One writer thread owns the only connection that writes; `READER_THREADS` reader
    threads each own one that reads, which WAL lets run while the writer writes, and
    `SEARCH_THREADS` more run searches, so that no search waits in front of a read. Open
    it with `open`, which migrates the schema.

    Vector search keeps the vectors it searches in memory, about 156 MB for 100,000 of
    384 dimensions, until close (see `convostore.backends.sqlite.search`).
    """

    def __init__(self, target: SQLiteTarget) -> None:
        self.target = target
        self.capabilities = Capabilities(
            persistent=not target.in_memory,
            # Text search runs on the FTS5 index of message content (see `search`).
            full_text_index=True,
            # A :memory: database lives and dies in this store's one connection.
            cross_process=not target.in_memory,
        )
        where = f"SQLite database {target.path!r}"
        self._writer = ConnectionWorker(
            "convostore-sqlite-writer",
            where,
            functools.partial(open_connection, target, reader=False),
            threads=1,
        )
        self._vector_cache = VectorCache()
        # No other connection can see a :memory: database, so it reads where it writes.
        self._readers = (
            self._writer
            if target.in_memory
            else ConnectionWorker(
                "convostore-sqlite-reader",
                where,
                functools.partial(open_connection, target, reader=True),
                threads=READER_THREADS,
            )
        )
        # Searches run on a thread of their own, so a slow one (a cold vector cache, a
        # large scan) never holds up the readers that every other read waits for.
        self._searchers = (
            self._writer
            if target.in_memory
            else ConnectionWorker(
                "convostore-sqlite-search",
                where,
                functools.partial(open_connection, target, reader=True),
                threads=SEARCH_THREADS,
            )
        )

    @classmethod
    async def open(cls, url: str, **options: Any) -> Self:
        """Open the database ``url`` names (see `parse_sqlite_url`), creating it if need
        be, and migrate it to this version's schema."""
        if options:
            raise InvalidArgumentError(f"unknown SQLite store options: {sorted(options)}")
        target = parse_sqlite_url(url)
        if not target.in_memory:
            _require_directory(target.path)
        backend = cls(target)
        await backend._writer.start()
        try:
            await backend._writer.run(prepare_database, target)
            if backend._readers is not backend._writer:
                await backend._readers.start()
                await backend._searchers.start()
        except BaseException:
            await backend.close()  # Stops whichever threads started; the rest is a no-op.
            raise
        return backend

    def release_when_dropped(self) -> Callable[[], None]:
        return functools.partial(_abandon, self._writer, self._readers, self._searchers)

    async def close(self) -> None:
        if self._readers is not self._writer:
            await self._searchers.stop()
            await self._readers.stop()
        # Last, so the last connection to close checkpoints the WAL into the database.
        await self._writer.stop()
        self._vector_cache.clear()

    async def _write(self, fn: Callable[[Any, *Ts], T], *args: *Ts) -> T:
        """``fn`` on the writer thread as one transaction, answered once durable; writes
        queued at the same time share the transaction and its fsync (group commit)."""
        return await self._writer.transact(fn, *args)

    # ---------------------------------------------------------------- users

    async def put_user(self, user: User) -> None:
        await self._write(write_put_user, user)

    async def get_user(self, user_id: str) -> User | None:
        row = await self._readers.run(read_one, sql.SELECT_USER, user_id)
        return None if row is None else user_from_row(row)

    # ---------------------------------------------------------------- sessions

    async def insert_session(self, new: NewSession, *, if_absent: bool) -> Session | None:
        return await self._write(write_insert_session, new, if_absent)

    async def find_or_insert_part(self, new: NewSession) -> Session:
        return await self._write(write_find_or_insert_part, new)

    async def get_session(self, session_id: str) -> Session | None:
        row = await self._readers.run(read_one, sql.SELECT_SESSION, session_id)
        return None if row is None else session_from_row(row)

    async def update_session(self, changes: SessionChanges) -> Session:
        return await self._write(write_update_session, changes)

    async def set_title(self, session_id: str, title: str | None, stamp: str) -> Session:
        return await self._write(write_set_title, session_id, title, stamp)

    async def delete_session(self, session_id: str) -> bool:
        return await self._write(write_delete, sql.DELETE_SESSION, session_id) > 0

    async def list_sessions(self, page: SessionPage) -> list[Session]:
        statement, parameters = _listing(False, page)
        rows = await self._readers.run(read_all, statement, parameters)
        return [session_from_row(row) for row in rows]

    async def list_summaries(self, page: SessionPage) -> list[SessionSummary]:
        statement, parameters = _listing(True, page)
        rows = await self._readers.run(read_all, statement, parameters)
        return [summary_from_row(row) for row in rows]

    async def count_sessions(self, owner_id: str, filter: SessionFilter) -> int:
        statement = sql.count_sql(filter.include_parts, filter.kind is not None)
        parameters = {"owner_id": owner_id, "kind": filter.kind}
        rows = await self._readers.run(read_all, statement, parameters)
        return int(rows[0][0])

    async def find_part(self, part_of: str, held_with: str) -> Session | None:
        rows = await self._readers.run(read_all, sql.FIND_PART, (part_of, held_with))
        return session_from_row(rows[0]) if rows else None

    async def list_parts(self, part_of: str) -> list[SessionSummary]:
        rows = await self._readers.run(read_all, sql.LIST_PARTS, (part_of,))
        return [summary_from_row(row) for row in rows]

    async def participants(self, session_id: str) -> list[User]:
        rows = await self._readers.run(read_all, sql.PARTICIPANTS, (session_id,))
        return [user for row in rows if (user := user_from_row(row)) is not None]

    async def find_sessions_by_metadata(self, name: str, value: str) -> list[Session]:
        rows = await self._readers.run(read_all, sql.SESSIONS_BY_METADATA, (name, value))
        return [session_from_row(row) for row in rows]

    async def add_indexed_keys(self, keys: frozenset[str]) -> frozenset[str]:
        return await self._write(write_indexed_keys, keys)

    async def remove_indexed_key(self, key: str) -> bool:
        return await self._write(write_unindexed_key, key)

    async def delete_expired(self, before: datetime) -> int:
        return await self._write(write_delete, sql.DELETE_EXPIRED, to_micros(before))

    # ---------------------------------------------------------------- the log

    async def append(self, append: PreparedAppend) -> AppendOutcome:
        return await self._write(write_append, append)

    async def version(self, session_id: str) -> int:
        row = await self._readers.run(read_one, sql.SESSION_VERSION, session_id)
        return 0 if row is None else int(row[0])

    async def read(self, session_id: str, event_filter: EventFilter) -> list[Event]:
        if not event_filter.active_view:
            # A single statement sees one snapshot without a transaction around it.
            return await self._readers.run(read_events, session_id, event_filter)
        return await self._readers.run(in_read_snapshot, read_events, (session_id, event_filter))

    async def set_narration(
        self, session_id: str, message_id: str, text: str | None, stamp: str
    ) -> bool:
        return await self._write(write_set_narration, session_id, message_id, text, stamp)

    # ---------------------------------------------------------------- vectors and text

    async def vector_index_spec(self) -> VectorIndexSpec | None:
        return await self._readers.run(read_vector_index)

    async def declare_vector_index(self, spec: VectorIndexSpec, *, replace: bool) -> None:
        await self._write(write_vector_index, spec, replace)

    async def pending_embeddings(
        self, model: str, roles: Sequence[Role], after: str | None, limit: int
    ) -> list[PendingEmbedding]:
        return await self._readers.run(read_pending, model, roles, after, limit)

    async def count_pending_embeddings(self, model: str, roles: Sequence[Role]) -> int:
        return await self._readers.run(read_count_pending, model, roles)

    async def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]]
    ) -> None:
        await self._write(write_embeddings, model, vectors)

    async def vector_search(self, query: VectorQuery) -> list[SearchHit]:
        scope = query.scope
        return await self._searchers.run(
            in_read_snapshot,
            read_vector_search,
            (
                *(self._vector_cache, query.vector, query.metric, query.model, query.k),
                *(scope.owner_id, scope.session_id, scope.roles),
            ),
        )

    async def text_search(self, query: TextQuery) -> list[SearchHit]:
        scope = query.scope
        return await self._searchers.run(
            in_read_snapshot,
            read_text_search,
            (query.terms, query.k, scope.owner_id, scope.session_id, scope.roles),
        )


def _require_directory(path: str) -> None:
    """SQLite would create the file, not its directory: say which is missing."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise BackendUnavailableError(
            f"cannot open the SQLite database {path!r}: the directory {directory!r} does not exist"
        )


def _listing(
    summaries: bool,
    page: SessionPage,
) -> tuple[str, dict[str, Any]]:
    order, after, filter = page.order, page.after, page.filter
    statement = sql.listing_sql(
        summaries, order, filter.include_parts, filter.kind is not None, after is not None
    )
    parameters = {
        "owner_id": page.owner_id,
        "kind": filter.kind,
        "after_id": None if after is None else after.session_id,
        "after_at": None if after is None else after.last_activity_us,
        "limit": page.limit,
    }
    return statement, parameters


def _abandon(
    writer: ConnectionWorker, readers: ConnectionWorker, searchers: ConnectionWorker
) -> None:
    searchers.abandon()
    readers.abandon()
    writer.abandon()
