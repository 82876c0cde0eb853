"""`SQLiteBackend`: the `Backend` primitives, each one function run on one thread."""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final, Self, TypeVar, TypeVarTuple

from convostore.backends import interface, spi
from convostore.backends.sql.backend import Parameters, SQLBackend
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.connection import (
    in_read_snapshot,
    open_connection,
)
from convostore.backends.sqlite.event_cache import EventCache
from convostore.backends.sqlite.inline import InlineConnection
from convostore.backends.sqlite.operations import (
    read_all,
    read_events,
    write_append,
    write_appends,
    write_changed,
    write_find_or_insert_part,
    write_insert_session,
    write_put_user,
    write_returning,
    write_update_session,
)
from convostore.backends.sqlite.schema import (
    prepare_database,
    read_pending_migrations,
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
from convostore.backends.sqlite.text_index import TextIndexer, write_catch_up
from convostore.backends.sqlite.url import SQLiteTarget, parse_sqlite_url
from convostore.backends.sqlite.worker import ConnectionWorker, translate_error
from convostore.errors import BackendUnavailableError, InvalidArgumentError
from convostore.filters import EventFilter

__all__ = ["READER_THREADS", "SEARCH_THREADS", "SQLiteBackend"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

READER_THREADS: Final = 2
SEARCH_THREADS: Final = 1


class SQLiteBackend(SQLBackend):
    """One SQLite database: a file, or ``:memory:`` (gone at close).

    One writer thread owns the only connection that writes; `READER_THREADS` reader
    threads each own one that reads, which WAL lets run while the writer writes, and
    `SEARCH_THREADS` more run searches, so that no search waits in front of a read. Open
    it with `open`, which migrates the schema.

    Vector search keeps a compact copy of the vectors it searches in memory, about 46 MB
    for 100,000 of 384 dimensions, until close (see
    `convostore.backends.sqlite.vector_cache`); reads keep up to `event_cache.CAPACITY`
    decoded events, so a window read again decodes only what is new or changed.
    """

    statements = sql.STATEMENTS

    def __init__(self, target: SQLiteTarget) -> None:
        self.target = target
        self.capabilities = interface.Capabilities(
            persistent=not target.in_memory,
            # Text search runs on the FTS5 index of message content (see `search`).
            full_text_index=True,
            # A :memory: database lives and dies in this store's one connection.
            cross_process=not target.in_memory,
        )
        where = f"SQLite database {target.path!r}"
        self._text_indexer = TextIndexer()
        self._writer = ConnectionWorker(
            "convostore-sqlite-writer",
            where,
            functools.partial(open_connection, target, reader=False, shared=True),
            threads=1,
            after_commit=self._text_indexer,
            inline=True,
            # Appends of many conversations committed together go in a few statements.
            batches={write_append: write_appends},
        )
        self._vector_cache = VectorCache()
        self._event_cache = EventCache()
        # No other connection can see a :memory: database, so it reads where it writes.
        self._readers = self._reading_worker("convostore-sqlite-reader", where, READER_THREADS)
        if self._readers is not self._writer:
            self._writer.checkpoint_on(self._readers)
        # Searches run on a thread of their own, so a slow one (a cold vector cache, a
        # large scan) never holds up the readers that every other read waits for.
        self._searchers = self._reading_worker("convostore-sqlite-search", where, SEARCH_THREADS)
        # Bounded reads (a window, a row by key) run on the caller's thread on a
        # connection of their own, where a thread hop would cost more than the read.
        self._inline_reader = None if target.in_memory else InlineConnection(where)

    def _reading_worker(self, name: str, where: str, threads: int) -> ConnectionWorker:
        """Threads with reading connections of their own; the writer where the database
        is in memory (no other connection can see it, so it reads where it writes)."""
        target = self.target
        if target.in_memory:
            return self._writer
        opener = functools.partial(open_connection, target, reader=True)
        return ConnectionWorker(name, where, opener, threads=threads)

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
        # A failure stops whichever threads started; the rest of close() is a no-op.
        async with interface.closed_on_failure(backend):
            await backend._writer.run(prepare_database, target)
            if backend._readers is not backend._writer:
                await backend._readers.start()
                await backend._searchers.start()
            if backend._inline_reader is not None:
                shared = await backend._readers.run(_open_shared_reader, target)
                backend._inline_reader.open(shared)
        return backend

    @classmethod
    async def pending_migrations(cls, url: str, **options: Any) -> list[str]:
        if options:
            raise InvalidArgumentError(f"unknown SQLite store options: {sorted(options)}")
        target = parse_sqlite_url(url)
        try:
            return await asyncio.to_thread(read_pending_migrations, target)
        except sqlite3.Error as error:
            raise translate_error(error, target.path) from error

    async def stats(self) -> interface.DatabaseStats:
        row = await self._readers.run(read_all, sql.STATEMENTS.database_stats, ())
        users, sessions, events, messages, vectors, size = row[0]
        return interface.DatabaseStats(
            users, sessions, events, messages, vectors, None if self.target.in_memory else size
        )

    def release_when_dropped(self) -> Callable[[], None]:
        return functools.partial(
            _abandon, self._writer, self._readers, self._searchers, self._inline_reader
        )

    async def close(self) -> None:
        if self._inline_reader is not None:
            self._inline_reader.close()
        if self._readers is not self._writer:
            await self._searchers.stop()
            await self._readers.stop()
        # Last, so the last connection to close checkpoints the WAL into the database.
        await self._writer.stop()
        self._vector_cache.clear()
        self._event_cache.clear()

    async def _write(self, fn: Callable[[Any, *Ts], T], *args: *Ts, small: bool = False) -> T:
        """``fn`` on the writer thread as one transaction, answered once durable; writes
        queued at the same time share the transaction and its fsync (group commit). A
        ``small`` write (bounded: a few rows) may run inline (see `worker`)."""
        return await self._writer.transact(fn, *args, small=small)

    async def _fetch_all(self, statement: str, parameters: Parameters) -> list[Sequence[Any]]:
        return await self._readers.run(read_all, statement, parameters)

    async def _fetch_by_key(self, statement: str, parameters: Parameters) -> Sequence[Any] | None:
        rows: list[Sequence[Any]]
        ran, rows = self._read_inline(read_all, statement, parameters)
        if not ran:
            rows = await self._readers.run(read_all, statement, parameters)
        return rows[0] if rows else None

    def _read_inline(self, fn: Callable[[Any, *Ts], T], *args: *Ts) -> tuple[bool, T]:
        """(True, ``fn(connection, *args)``) if it ran inline (see `inline`); else
        (False, None), and the caller reads through the reader threads."""
        reader = self._inline_reader
        if reader is None or not reader.pacer.allows():
            return False, None  # type: ignore[return-value]
        ran, result = reader.run(fn, args)
        return ran, result

    async def _changed(self, statement: str, parameters: Parameters) -> int:
        return await self._write(write_changed, statement, parameters)

    async def _returning(self, statement: str, parameters: Parameters) -> Sequence[Any] | None:
        # One session's row (`SQLBackend._returning`).
        row: Sequence[Any] | None = await self._write(
            write_returning, statement, parameters, small=True
        )
        return row

    # ---------------------------------------------------------------- users

    async def put_user(self, user: spi.User) -> None:
        await self._write(write_put_user, user, small=True)

    # ---------------------------------------------------------------- sessions

    async def insert_session(self, new: spi.NewSession, *, if_absent: bool) -> spi.Session | None:
        return await self._write(write_insert_session, new, if_absent, small=True)

    async def find_or_insert_part(self, new: spi.NewSession) -> spi.Session:
        return await self._write(write_find_or_insert_part, new, small=True)

    async def update_session(self, changes: spi.SessionChanges) -> spi.Session:
        return await self._write(write_update_session, changes, small=True)

    async def add_indexed_keys(self, keys: frozenset[str]) -> frozenset[str]:
        return await self._write(write_indexed_keys, keys)

    async def remove_indexed_key(self, key: str) -> bool:
        return await self._write(write_unindexed_key, key)

    # ---------------------------------------------------------------- the log

    async def append(self, append: spi.PreparedAppend) -> spi.AppendOutcome:
        self._text_indexer.count(sum(1 for p in append.events if p.message_json is not None))
        return await self._write(write_append, append, small=_is_small(append))

    async def read(self, session_id: str, event_filter: EventFilter) -> list[spi.Event]:
        cache = self._event_cache
        if _is_small_window(event_filter):
            ran, events = self._read_inline(read_events, cache, session_id, event_filter)
            if ran:
                return events
        if not event_filter.active_view:
            # One statement sees one snapshot without a transaction around it, and the
            # read falls back to one statement where its two would see different ones.
            return await self._readers.run(read_events, cache, session_id, event_filter)
        return await self._readers.run(
            in_read_snapshot, read_events, (cache, session_id, event_filter)
        )

    # ---------------------------------------------------------------- vectors and text

    async def vector_index_spec(self) -> spi.VectorIndexSpec | None:
        return await self._readers.run(read_vector_index)

    async def declare_vector_index(self, spec: spi.VectorIndexSpec, *, replace: bool) -> None:
        await self._write(write_vector_index, spec, replace)

    async def pending_embeddings(
        self, model: str, roles: Sequence[spi.Role], after: str | None, limit: int
    ) -> list[spi.PendingEmbedding]:
        return await self._readers.run(read_pending, model, roles, after, limit)

    async def count_pending_embeddings(self, model: str, roles: Sequence[spi.Role]) -> int:
        return await self._readers.run(read_count_pending, model, roles)

    async def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]], stamp: str
    ) -> None:
        await self._write(write_embeddings, model, vectors, stamp)

    async def vector_search(self, query: interface.VectorQuery) -> list[spi.SearchHit]:
        scope = query.scope
        return await self._searchers.run(
            in_read_snapshot,
            read_vector_search,
            (
                *(self._vector_cache, query.vector, query.metric, query.model, query.k),
                *(scope.owner_id, scope.session_id, scope.roles),
            ),
        )

    async def text_search(self, query: interface.TextQuery) -> list[spi.SearchHit]:
        scope = query.scope
        # Whatever was appended before this search, in any process, is indexed first.
        await self._write(write_catch_up)
        return await self._searchers.run(
            in_read_snapshot,
            read_text_search,
            (query.terms, query.k, scope.owner_id, scope.session_id, scope.roles),
        )


# An append written inline at most (see `worker`): a few events, a few pages of text.
INLINE_EVENTS: Final = 8
INLINE_CHARACTERS: Final = 32_768


def _is_small(append: spi.PreparedAppend) -> bool:
    if len(append.events) > INLINE_EVENTS:
        return False
    size = 0
    for prepared in append.events:
        size += len(prepared.metadata_json) + len(prepared.payload_json or "")
        parts = prepared.message_json
        event = prepared.event
        if parts is not None and isinstance(event, spi.Message):
            size += len(event.content or "") + len(event.narration or "")
            size += len(parts.tool_calls) + len(parts.attachments) + len(parts.data)
            size += len(parts.assets) + len(parts.recipient_ids)
            size += 4 * len(event.embedding or ())
    return size <= INLINE_CHARACTERS


# The largest window read inline: the newest n events and their turn's start, with no
# other condition (a condition may make the read scan far back for its matches).
INLINE_WINDOW: Final = 100


def _is_small_window(event_filter: EventFilter) -> bool:
    last = event_filter.last
    return last is not None and last <= INLINE_WINDOW and event_filter == EventFilter(last=last)


def _open_shared_reader(_: sqlite3.Connection, target: SQLiteTarget) -> sqlite3.Connection:
    """A reader's connection for `InlineConnection`, opened on a reader thread."""
    return open_connection(target, reader=True, shared=True)


def _require_directory(path: str) -> None:
    """SQLite would create the file, not its directory: say which is missing."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise BackendUnavailableError(
            f"cannot open the SQLite database {path!r}: the directory {directory!r} does not exist"
        )


def _abandon(
    writer: ConnectionWorker,
    readers: ConnectionWorker,
    searchers: ConnectionWorker,
    inline_reader: InlineConnection | None,
) -> None:
    if inline_reader is not None:
        inline_reader.close()
    searchers.abandon()
    readers.abandon()
    writer.abandon()
