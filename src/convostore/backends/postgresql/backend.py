"""`PostgreSQLBackend`: the `Backend` primitives, each one function on one pooled connection."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Self

from psycopg_pool import AsyncConnectionPool

from convostore.backends import interface, spi
from convostore.backends.postgresql import search
from convostore.backends.postgresql import statements as sql
from convostore.backends.postgresql.connection import (
    DRIVER,
    Connection,
    open_connection,
    open_pool,
    session_settings,
)
from convostore.backends.postgresql.operations import (
    append,
    find_or_insert_part,
    insert_session,
    put_user,
    read_events,
    update_session,
)
from convostore.backends.postgresql.schema import (
    ADVISORY_LOCK_CLASS,
    KEY_STATEMENTS,
    TAKE_SCHEMA_LOCK,
    ServerFacts,
    prepare_database,
    read_pending_migrations,
    search_path,
)
from convostore.backends.postgresql.url import PostgreSQLTarget, parse_postgresql_url
from convostore.backends.sql.aio import AsyncSQLBackend
from convostore.backends.urls import target_of
from convostore.errors import BackendUnavailableError
from convostore.filters import EventFilter

__all__ = ["PostgreSQLBackend"]

log = logging.getLogger("convostore.postgresql")

# pgvector's relaxed iterative scan, which lets a filtered search return its k rows.
_ITERATIVE_SCAN_SINCE = (0, 8)


class PostgreSQLBackend(AsyncSQLBackend[Connection]):
    """A PostgreSQL database (14 or newer), in one schema of it.

    Each primitive takes one connection from a `psycopg_pool.AsyncConnectionPool` and
    runs as one statement (or one transaction). `open` migrates the schema and installs
    pgvector where the role may.
    """

    statements = sql.STATEMENTS
    driver = DRIVER
    key_statements = KEY_STATEMENTS
    embeddings = search.EMBEDDINGS
    # A transaction ended as a deadlock victim or by a serialization failure.
    retries = 3

    def __init__(self, target: PostgreSQLTarget) -> None:
        self.target = target
        self.facts = ServerFacts(vector_schema=None, vector_version=(), text_collation=None)
        self.capabilities = interface.Capabilities(
            persistent=True, full_text_index=True, cross_process=True
        )
        self._pool: AsyncConnectionPool[Connection] | None = None
        self._where = target.where
        self._schema_lock = (TAKE_SCHEMA_LOCK, (ADVISORY_LOCK_CLASS, target.schema))
        self._pool_checks: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(cls, url: str, **options: Any) -> Self:
        """Connect to the database ``url`` names (see `parse_postgresql_url`), create
        the schema if need be and migrate it to this version's schema, then open the
        pool."""
        backend = cls(target_of(parse_postgresql_url, url, options, "PostgreSQL"))
        target = backend.target
        with DRIVER.translated(target.where):
            async with interface.closing(await open_connection(target)) as connection:
                facts = await prepare_database(connection, target.schema, target.where)
        backend.facts = facts
        backend.capabilities = replace(
            backend.capabilities, native_vector_index=facts.vector_schema is not None
        )
        with_vectors = facts.vector_schema is not None
        settings = session_settings(
            search_path(target.schema, facts.vector_schema),
            ef_search=target.ef_search if with_vectors else None,
            iterative_scan=with_vectors and facts.vector_version >= _ITERATIVE_SCAN_SINCE,
        )
        pool = open_pool(target, settings)
        backend._pool = pool
        async with interface.closed_on_failure(pool):
            with DRIVER.translated(target.where):
                await pool.open(wait=True, timeout=target.pool_timeout)
        return backend

    @classmethod
    async def pending_migrations(cls, url: str, **options: Any) -> list[str]:
        target = target_of(parse_postgresql_url, url, options, "PostgreSQL")
        with DRIVER.translated(target.where):
            async with interface.closing(await open_connection(target)) as connection:
                return await read_pending_migrations(connection, target.schema, target.where)

    async def close(self) -> None:
        for task in list(self._pool_checks):
            task.cancel()
        if self._pool is not None:
            await self._pool.close()

    @property
    def pool(self) -> AsyncConnectionPool[Connection]:
        """The store's connection pool (for its own tests and benchmarks)."""
        if self._pool is None:
            raise BackendUnavailableError(f"{self._where}: the store is not open")
        return self._pool

    # ---------------------------------------------------------------- connections

    async def _acquire(self) -> Connection:
        return await self.pool.getconn()

    async def _release(self, connection: Connection, *, failed: bool) -> None:
        # The pool itself rolls back or drops a connection left in a transaction or broken.
        await self.pool.putconn(connection)

    async def _connection_lost(self) -> None:
        # The idle connections are checked in the background, not by the caller.
        task = asyncio.get_running_loop().create_task(self.pool.check())
        self._pool_checks.add(task)
        task.add_done_callback(self._pool_checks.discard)

    # ---------------------------------------------------------------- users

    async def put_user(self, user: spi.User) -> None:
        await self._run(put_user, user)

    # ---------------------------------------------------------------- sessions

    async def insert_session(self, new: spi.NewSession, *, if_absent: bool) -> spi.Session | None:
        return await self._run(insert_session, new, if_absent)

    async def find_or_insert_part(self, new: spi.NewSession) -> spi.Session:
        return await self._run(find_or_insert_part, new)

    async def update_session(self, changes: spi.SessionChanges) -> spi.Session:
        return await self._run(update_session, changes)

    # ---------------------------------------------------------------- the log

    async def append(self, append_: spi.PreparedAppend) -> spi.AppendOutcome:
        return await self._run(append, append_)

    async def read(self, session_id: str, event_filter: EventFilter) -> list[spi.Event]:
        return await self._run(read_events, session_id, event_filter, self.facts.text_collation)

    # ---------------------------------------------------------------- vectors and text

    async def declare_vector_index(self, spec: spi.VectorIndexSpec, *, replace: bool) -> None:
        if self.facts.vector_schema is None:
            log.warning(
                "%s: pgvector is not installed in this database; vector search is "
                "unavailable (messages are still embedded and stored)",
                self._where,
            )
        await self._declare(spec, replace=replace, build=True)

    async def _declare(self, spec: spi.VectorIndexSpec, *, replace: bool, build: bool) -> None:
        await self._run(
            search.declare_vector_index,
            self.target.schema,
            spec,
            replace=replace,
            build=build and self.facts.vector_schema is not None,
            lock=self._schema_lock,
        )

    async def begin_reembed(self, spec: spi.VectorIndexSpec) -> bool:
        """Point the vector index at ``spec``; True when that recreated it. A new index
        is built after the run (`end_reembed`), over every vector at once, rather than
        one insert at a time during it."""
        if await self.vector_index_spec() == spec:
            return False
        await self._declare(spec, replace=True, build=False)
        return True

    async def end_reembed(self, spec: spi.VectorIndexSpec) -> None:
        await self._declare(spec, replace=False, build=True)

    async def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]], stamp: str
    ) -> None:
        await self._run(search.set_embeddings, model, vectors, stamp)

    async def vector_search(self, query: interface.VectorQuery) -> list[spi.SearchHit]:
        if self.facts.vector_schema is None:
            raise BackendUnavailableError(
                f"{self._where}: vector search needs the PostgreSQL extension 'vector' "
                "(pgvector), which is not installed in this database: have an "
                "administrator run CREATE EXTENSION vector, then reconnect"
            )
        scope = (query.scope.owner_id, query.scope.session_id, query.scope.roles)
        return await self._run(
            search.vector_search, query.vector, query.metric, query.model, query.k, scope
        )

    async def text_search(self, query: interface.TextQuery) -> list[spi.SearchHit]:
        scope = (query.scope.owner_id, query.scope.session_id, query.scope.roles)
        return await self._run(search.text_search, query.terms, query.k, scope)

    # ---------------------------------------------------------------- helpers
