"""`MySQLBackend`: the `Backend` primitives, each one function on one pooled connection."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Self, TypeVar

from asyncmy.pool import Pool

from convostore._time import to_micros
from convostore.backends.interface import (
    Capabilities,
    TextQuery,
    VectorQuery,
)
from convostore.backends.mysql import native_vectors, vector_feed
from convostore.backends.mysql import statements as sql
from convostore.backends.mysql.connection import (
    DRIVER,
    Connection,
    ServerFacts,
    check_size,
    open_pool,
    snapshot,
)
from convostore.backends.mysql.schema import prepare_database, read_pending_migrations
from convostore.backends.mysql.url import MySQLTarget, parse_mysql_url
from convostore.backends.sql import appends
from convostore.backends.sql import search as steps
from convostore.backends.sql.aio import AsyncSQLBackend, drive
from convostore.backends.sql.event_cache import EventCache
from convostore.backends.urls import target_of
from convostore.embedding import VectorIndexSpec
from convostore.errors import BackendUnavailableError
from convostore.filters import EventFilter
from convostore.model import Event, SearchHit
from convostore.prepare import AppendOutcome, PreparedAppend

__all__ = ["MySQLBackend"]

T = TypeVar("T")


class MySQLBackend(AsyncSQLBackend[Connection]):
    """One MySQL 8 or MariaDB (10.6 or newer) database.

    Each primitive takes one connection from asyncmy's pool and runs as one statement
    or one transaction (see `convostore.backends.mysql.connection`). Open it with
    `open`, which creates the database if absent and migrates its schema.

    How vectors are kept and searched is chosen at open (``vectors``): through the
    shared `VectorCache` and the commit-ordered change feed (`vector_feed`), by a scan,
    or with MariaDB 11.7+'s graph (`native_vectors`), as the URL's ``vector_search``
    and the server allow.
    """

    statements = sql.STATEMENTS
    driver = DRIVER
    key_statements = sql.KEY_STATEMENTS
    writes = sql.WRITES
    embeddings = sql.EMBEDDINGS

    def __init__(self, target: MySQLTarget) -> None:
        self.target = target
        self.retries = target.deadlock_retries
        self.facts = ServerFacts("mariadb", (), "utf8mb4_nopad_bin")
        self.capabilities = Capabilities(persistent=True, full_text_index=True, cross_process=True)
        self.vectors = vector_feed.FeedVectors(target)
        self._pool: Pool | None = None
        self._closed = False
        self._where = target.where
        self._event_cache = EventCache()

    @classmethod
    async def open(cls, url: str, **options: Any) -> Self:
        """Connect to the database ``url`` names (see `parse_mysql_url`), create it if
        absent and migrate it to this version's schema, then open the pool."""
        backend = cls(target_of(parse_mysql_url, url, options, "MySQL"))
        target = backend.target
        with DRIVER.translated(target.where):
            backend.facts = await prepare_database(target)
            backend._pool = await open_pool(target, backend.facts)
            vectors = await backend._run(native_vectors.vectors_of, backend.facts, target)
        backend.vectors = vectors
        backend.capabilities = dataclasses.replace(
            backend.capabilities, native_vector_index=vectors.native
        )
        return backend

    @classmethod
    async def pending_migrations(cls, url: str, **options: Any) -> list[str]:
        target = target_of(parse_mysql_url, url, options, "MySQL")
        with DRIVER.translated(target.where):
            return await read_pending_migrations(target)

    def release_when_dropped(self) -> Callable[[], None] | None:
        return None if self._pool is None else functools.partial(_drop_sockets, self._pool)

    async def close(self) -> None:
        if self._closed:
            return
        pool, self._closed = self._pool, True
        self._event_cache.clear()
        self.vectors.clear()
        if pool is not None:
            pool.close()  # Waits for the connections in use to be given back.
            await pool.wait_closed()

    @property
    def pool(self) -> Pool:
        """The store's connection pool (for its own tests and benchmarks)."""
        if self._pool is None or self._closed:
            raise BackendUnavailableError(f"{self._where}: the store is closed")
        return self._pool

    @property
    def event_cache(self) -> EventCache:
        """The events this store read, kept (for its own tests and benchmarks)."""
        return self._event_cache

    # ---------------------------------------------------------------- connections

    async def _acquire(self) -> Connection:
        try:
            async with asyncio.timeout(self.target.pool_timeout):
                connection: Connection = await self.pool.acquire()
        except TimeoutError as error:
            raise BackendUnavailableError(
                f"{self._where}: no free connection in {self.target.pool_timeout} s"
            ) from error
        return connection

    async def _release(self, connection: Connection, *, failed: bool) -> None:
        if failed:  # A connection in an unknown state is closed, never reused.
            connection.close()
        assert self._pool is not None  # It gave the connection, closing or not.
        self._pool.release(connection)

    async def _connection_lost(self) -> None:
        await self.pool.clear()

    async def _snapshot(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``fn(connection, *args)`` in one consistent read snapshot."""
        async with self._connection() as connection, snapshot(connection):
            return await fn(connection, *args)

    def _check(self, values: Iterable[Any], what: str) -> None:
        check_size(values, self.facts.max_packet, what)

    # Every write that touches a vector runs through ``vectors``, which keeps them.

    async def delete_session(self, session_id: str) -> bool:
        return await self._write(self.vectors.delete_session, session_id)

    async def delete_expired(self, before: datetime) -> int:
        return await self._write(self.vectors.delete_expired, to_micros(before))

    # ---------------------------------------------------------------- the log

    async def append(self, append: PreparedAppend) -> AppendOutcome:
        return await self._write(self.vectors.append, append, self._append)

    async def _append(self, connection: Connection, append: PreparedAppend) -> AppendOutcome:
        """The shared append (`convostore.backends.sql.appends`), its rows no larger than
        the server takes."""

        def check(rows: Sequence[Sequence[Any]]) -> None:
            self._check(itertools.chain.from_iterable(rows), "the append")

        write = appends.append(sql.APPENDS, sql.WRITES, append, check)
        return await drive(DRIVER, connection, write)

    async def read(self, session_id: str, event_filter: EventFilter) -> list[Event]:
        decode = functools.partial(self._event_cache.events, reader=sql.DIALECT.rows)
        read = sql.READS.read_events
        # The active view's boundary and later events must agree: one snapshot.
        if event_filter.active_view:
            return await self._snapshot(self._steps, read, session_id, event_filter, decode)
        async with self._connection() as connection:
            return await drive(DRIVER, connection, read(session_id, event_filter, decode))

    # ---------------------------------------------------------------- vectors and text

    async def declare_vector_index(self, spec: VectorIndexSpec, *, replace: bool) -> None:
        await self._run(self._steps, sql.EMBEDDINGS.declare_index, spec, replace)
        await self.vectors.declared(self._connection, replace=replace, reembedding=False)

    async def begin_reembed(self, spec: VectorIndexSpec) -> bool:
        if await self.vector_index_spec() == spec:
            return False
        await self._run(self._steps, sql.EMBEDDINGS.declare_index, spec, True)
        await self.vectors.declared(self._connection, replace=True, reembedding=True)
        return True

    async def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]]
    ) -> None:
        ids = [message_id for message_id, _ in vectors]
        write = (self._steps, sql.EMBEDDINGS.set_embeddings, model, vectors)
        await self._write(self.vectors.set_embeddings, ids, *write)

    async def vector_search(self, query: VectorQuery) -> list[SearchHit]:
        async with self._connection() as connection:
            return await self.vectors.search(connection, query)

    async def text_search(self, query: TextQuery) -> list[SearchHit]:
        scope, terms = query.scope, sql.fulltext_query(query.terms)
        search = (sql.SEARCH, terms, query.k, scope.owner_id, scope.session_id, scope.roles)
        return await self._snapshot(self._steps, steps.text_search, *search)


def _drop_sockets(pool: Pool) -> None:
    """Close the socket of every connection of ``pool`` now, with or without its event
    loop: the loop holds each connection's transport, so the sockets of a store
    collected without `close` would never be closed otherwise. (The pool's and the
    transports' own fields are read: neither asyncmy nor asyncio closes a socket
    without a running loop.)"""
    for connection in (*getattr(pool, "_free", ()), *getattr(pool, "_used", ())):
        transport = getattr(connection, "_transport", None)
        if transport is None:
            continue
        with contextlib.suppress(RuntimeError):  # The loop is closed: nothing to tell it.
            transport.abort()
        # asyncio's wrapper of the socket (plain or under TLS) holds the socket itself.
        raw = getattr(transport.get_extra_info("socket"), "_sock", None)
        if raw is not None:
            raw.close()
