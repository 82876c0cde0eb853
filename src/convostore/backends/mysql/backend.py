"""`MySQLBackend`: the `Backend` primitives, each one function on one pooled connection."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Self, TypeVar

from asyncmy import errors
from asyncmy.pool import Pool

from convostore._time import to_micros
from convostore.backends.interface import (
    Backend,
    Capabilities,
    DatabaseStats,
    SessionPage,
    TextQuery,
    VectorQuery,
)
from convostore.backends.mysql import native_vectors, search
from convostore.backends.mysql import statements as sql
from convostore.backends.mysql.connection import (
    Connection,
    in_snapshot,
    in_transaction,
    is_connection_lost,
    open_pool,
    translate_error,
)
from convostore.backends.mysql.migrate import (
    add_indexed_keys,
    migration_lock,
    prepare_database,
    read_pending_migrations,
    remove_indexed_key,
)
from convostore.backends.mysql.operations import (
    check_size,
    execute,
    fetch_all,
    fetch_one,
    needs_snapshot,
    read_events,
    write_append,
    write_delete_expired,
    write_find_or_insert_part,
    write_insert_session,
    write_set_title,
    write_update_session,
)
from convostore.backends.mysql.rows import (
    session_from_row,
    summary_from_row,
    user_from_row,
    user_values,
)
from convostore.backends.mysql.schema import VALUE_PREFIX_LENGTH, ServerFacts
from convostore.backends.mysql.url import MySQLTarget, parse_mysql_url
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

__all__ = ["MySQLBackend"]

log = logging.getLogger("convostore.mysql")

T = TypeVar("T")
# The driver's errors, and what a dropped socket raises below it.
_DRIVER_ERRORS = (errors.MySQLError, OSError, asyncio.IncompleteReadError)


class MySQLBackend(Backend):
    """One MySQL 8 or MariaDB (10.6 or newer) database.

    Each primitive takes one connection from asyncmy's pool and runs as one statement
    or one transaction (see `convostore.backends.mysql.connection`). Open it with
    `open`, which creates the database if absent and migrates its schema.
    """

    def __init__(self, target: MySQLTarget) -> None:
        self.target = target
        self.facts = ServerFacts("mariadb", (), "utf8mb4_nopad_bin")
        # Text search runs on a FULLTEXT index; vectors are scanned (see `search`).
        self.capabilities = Capabilities(persistent=True, full_text_index=True, cross_process=True)
        # Whether the server has MariaDB's VECTOR type and index (see `native_vectors`),
        # and its graph's neighbours per node and search candidates.
        self.server_vectors = False
        self.graph_m = native_vectors.GRAPH_M
        self.ef_search = native_vectors.EF_SEARCH
        self._pool: Pool | None = None
        self._where = target.where

    @classmethod
    async def open(cls, url: str, **options: Any) -> Self:
        """Connect to the database ``url`` names (see `parse_mysql_url`), create it if
        absent and migrate it to this version's schema, then open the pool."""
        if options:
            raise InvalidArgumentError(f"unknown MySQL store options: {sorted(options)}")
        backend = cls(parse_mysql_url(url))
        target = backend.target
        try:
            backend.facts = await prepare_database(target)
            backend._pool = await open_pool(target, backend.facts)
            await backend._probe_native_vectors()
        except _DRIVER_ERRORS as error:
            raise translate_error(error, target.where) from error
        return backend

    async def _probe_native_vectors(self) -> None:
        self.server_vectors = await self._run(native_vectors.server_has_vectors, self.facts)
        self.capabilities = dataclasses.replace(
            self.capabilities, native_vector_index=self.server_vectors
        )

    @classmethod
    async def pending_migrations(cls, url: str, **options: Any) -> list[str]:
        if options:
            raise InvalidArgumentError(f"unknown MySQL store options: {sorted(options)}")
        target = parse_mysql_url(url)
        try:
            return await read_pending_migrations(target)
        except _DRIVER_ERRORS as error:
            raise translate_error(error, target.where) from error

    async def stats(self) -> DatabaseStats:
        row = await self._run(fetch_one, sql.DATABASE_STATS, ())
        assert row is not None
        users, sessions, events, messages, vectors, size = row
        return DatabaseStats(
            int(users), int(sessions), int(events), int(messages), int(vectors), int(size)
        )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
            await pool.wait_closed()

    @property
    def pool(self) -> Pool:
        """The store's connection pool (for its own tests and benchmarks)."""
        if self._pool is None:
            raise BackendUnavailableError(f"{self._where}: the store is closed")
        return self._pool

    # ---------------------------------------------------------------- connections

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        """A connection of the pool; the driver's errors become convostore's here. A
        connection that failed is closed, never given to the next caller."""
        pool = self.pool
        try:
            async with asyncio.timeout(self.target.pool_timeout):
                connection = await pool.acquire()
        except TimeoutError as error:
            raise BackendUnavailableError(
                f"{self._where}: no free connection in {self.target.pool_timeout} s"
            ) from error
        except _DRIVER_ERRORS as error:
            raise translate_error(error, self._where) from error
        try:
            yield connection
        except _DRIVER_ERRORS as error:
            connection.close()
            if is_connection_lost(error):
                # The server may have restarted: every idle connection is lost too.
                await pool.clear()
            raise translate_error(error, self._where) from error
        except BaseException:
            # Cancelled or failed mid-statement: the connection's state is unknown.
            connection.close()
            raise
        finally:
            pool.release(connection)

    async def _run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``fn(connection, *args)`` on a connection of the pool."""
        async with self._connection() as connection:
            return await fn(connection, *args)

    async def _write(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``fn(connection, *args)`` in one transaction, retried on a deadlock."""
        async with self._connection() as connection:
            return await in_transaction(connection, self.target.deadlock_retries, fn, *args)

    async def _snapshot(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``fn(connection, *args)`` in one consistent read snapshot."""
        async with self._connection() as connection:
            return await in_snapshot(connection, fn, *args)

    # ---------------------------------------------------------------- users

    async def put_user(self, user: User) -> None:
        values = user_values(user)
        check_size(values, self.facts.max_packet, "the user")
        await self._run(execute, sql.UPSERT_USER, values)

    async def get_user(self, user_id: str) -> User | None:
        row = await self._run(fetch_one, sql.SELECT_USER, (user_id,))
        return None if row is None else user_from_row(row)

    # ---------------------------------------------------------------- sessions

    async def insert_session(self, new: NewSession, *, if_absent: bool) -> Session | None:
        return await self._write(write_insert_session, new, if_absent, self.facts.max_packet)

    async def find_or_insert_part(self, new: NewSession) -> Session:
        return await self._write(write_find_or_insert_part, new, self.facts.max_packet)

    async def get_session(self, session_id: str) -> Session | None:
        row = await self._run(fetch_one, sql.SELECT_SESSION, (session_id,))
        return None if row is None else session_from_row(row)

    async def update_session(self, changes: SessionChanges) -> Session:
        return await self._write(write_update_session, changes, self.facts.max_packet)

    async def set_title(self, session_id: str, title: str | None, stamp: str) -> Session:
        check_size((title,), self.facts.max_packet, "the title")
        return await self._write(write_set_title, session_id, title, stamp)

    async def delete_session(self, session_id: str) -> bool:
        if self.server_vectors:
            return await self._write(native_vectors.delete_session, session_id)
        return await self._run(execute, sql.DELETE_SESSION, (session_id,)) > 0

    async def list_sessions(self, page: SessionPage) -> list[Session]:
        statement, parameters = _listing(False, page)
        rows = await self._run(fetch_all, statement, parameters)
        return [session_from_row(row) for row in rows]

    async def list_summaries(self, page: SessionPage) -> list[SessionSummary]:
        statement, parameters = _listing(True, page)
        rows = await self._run(fetch_all, statement, parameters)
        return [summary_from_row(row) for row in rows]

    async def count_sessions(self, owner_id: str, filter: SessionFilter) -> int:
        statement = sql.count_sql(filter.include_parts, filter.kind is not None)
        row = await self._run(fetch_one, statement, {"owner_id": owner_id, "kind": filter.kind})
        return int(row[0])

    async def find_part(self, part_of: str, held_with: str) -> Session | None:
        row = await self._run(fetch_one, sql.FIND_PART, (part_of, held_with))
        return None if row is None else session_from_row(row)

    async def list_parts(self, part_of: str) -> list[SessionSummary]:
        rows = await self._run(fetch_all, sql.LIST_PARTS, (part_of,))
        return [summary_from_row(row) for row in rows]

    async def participants(self, session_id: str) -> list[User]:
        rows = await self._run(fetch_all, sql.PARTICIPANTS, (session_id,))
        return [user for row in rows if (user := user_from_row(row)) is not None]

    async def find_sessions_by_metadata(self, name: str, value: str) -> list[Session]:
        parameters = (name, value[:VALUE_PREFIX_LENGTH], value)
        rows = await self._run(fetch_all, sql.SESSIONS_BY_METADATA, parameters)
        return [session_from_row(row) for row in rows]

    async def delete_expired(self, before: datetime) -> int:
        if self.server_vectors:
            return await self._write(
                native_vectors.delete_expired, to_micros(before), write_delete_expired
            )
        return await self._write(write_delete_expired, to_micros(before))

    # ---------------------------------------------------------------- the log

    async def add_indexed_keys(self, keys: frozenset[str]) -> frozenset[str]:
        return await self._run(add_indexed_keys, keys)

    async def remove_indexed_key(self, key: str) -> bool:
        return await self._write(remove_indexed_key, key)

    async def append(self, append: PreparedAppend) -> AppendOutcome:
        if self.server_vectors:
            return await self._write(
                native_vectors.append, append, write_append, self.facts.max_packet
            )
        return await self._write(write_append, append, self.facts.max_packet)

    async def version(self, session_id: str) -> int:
        row = await self._run(fetch_one, sql.SESSION_VERSION, (session_id,))
        return 0 if row is None else int(row[0])

    async def read(self, session_id: str, event_filter: EventFilter) -> list[Event]:
        if needs_snapshot(event_filter):
            return await self._snapshot(read_events, session_id, event_filter)
        return await self._run(read_events, session_id, event_filter)

    async def set_narration(
        self, session_id: str, message_id: str, text: str | None, stamp: str
    ) -> bool:
        parameters = (text, stamp, message_id, session_id)
        check_size(parameters, self.facts.max_packet, "the narration")
        return await self._run(execute, sql.SET_NARRATION, parameters) > 0

    # ---------------------------------------------------------------- vectors and text

    async def vector_index_spec(self) -> VectorIndexSpec | None:
        return await self._run(search.vector_index_spec)

    async def declare_vector_index(self, spec: VectorIndexSpec, *, replace: bool) -> None:
        await self._run(search.declare_vector_index, spec, replace)
        if self.server_vectors:
            await self._native_graph(replace=replace, build=True)

    async def begin_reembed(self, spec: VectorIndexSpec) -> bool:
        """As `Backend.begin_reembed`; MariaDB's graph of a new declaration is built
        after the run (`end_reembed`), over every vector at once."""
        if await self.vector_index_spec() == spec:
            return False
        await self._run(search.declare_vector_index, spec, True)
        if self.server_vectors:
            await self._native_graph(replace=True, build=False)
        return True

    async def _native_graph(self, *, replace: bool, build: bool) -> None:
        """Under the migration lock: with ``replace``, drop the graph; with ``build``,
        build the graph of the recorded declaration where it is not built."""
        async with self._connection() as connection, migration_lock(connection, self.target):
            await native_vectors.ensure(
                connection, replace=replace, build=build, graph_m=self.graph_m, where=self._where
            )

    async def pending_embeddings(
        self, model: str, roles: Sequence[Role], after: str | None, limit: int
    ) -> list[PendingEmbedding]:
        return await self._run(search.pending, model, roles, after, limit)

    async def count_pending_embeddings(self, model: str, roles: Sequence[Role]) -> int:
        return await self._run(search.count_pending, model, roles)

    async def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]]
    ) -> None:
        if self.server_vectors:
            ids = [message_id for message_id, _ in vectors]
            await self._write(
                native_vectors.set_embeddings, ids, search.set_embeddings, model, vectors
            )
            return
        await self._write(search.set_embeddings, model, vectors)

    async def vector_search(self, query: VectorQuery) -> list[SearchHit]:
        if self.server_vectors:
            graph = functools.partial(native_vectors.search, ef_search=self.ef_search)
            return await self._snapshot(search.vector_search, query, graph)
        return await self._snapshot(search.vector_search, query)

    async def text_search(self, query: TextQuery) -> list[SearchHit]:
        return await self._snapshot(search.text_search, query)


def _listing(summaries: bool, page: SessionPage) -> tuple[str, dict[str, Any]]:
    filter = page.filter
    after = page.after
    statement = sql.listing_sql(
        summaries, page.order, filter.include_parts, filter.kind is not None, after is not None
    )
    parameters = {
        "owner_id": page.owner_id,
        "kind": filter.kind,
        "after_id": None if after is None else after.session_id,
        "after_at": None if after is None else after.last_activity_us,
        "limit": page.limit,
    }
    return statement, parameters
