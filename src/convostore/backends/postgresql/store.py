"""`PostgreSQLStore`: the `Store` primitives, each one function on one pooled connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from convostore._time import from_micros
from convostore.backends.postgresql import search
from convostore.backends.postgresql import statements as sql
from convostore.backends.postgresql.connection import (
    Connection,
    is_connection_lost,
    open_connection,
    open_pool,
    session_settings,
    translate_error,
)
from convostore.backends.postgresql.operations import (
    append,
    fetch_all,
    fetch_one,
    find_or_insert_part,
    insert_session,
    put_user,
    read_events,
    row_count,
    set_title,
    update_session,
)
from convostore.backends.postgresql.rows import session_from_row, summary_from_row, user_from_row
from convostore.backends.postgresql.schema import (
    ADVISORY_LOCK_CLASS,
    TAKE_SCHEMA_LOCK,
    ServerFacts,
    prepare_database,
    search_path,
)
from convostore.backends.postgresql.url import PostgreSQLTarget, parse_postgresql_url
from convostore.cursors import Keyset
from convostore.embedding import Embedder, Metric, PendingEmbedding, VectorIndexSpec
from convostore.errors import BackendUnavailableError, InvalidArgumentError
from convostore.filters import EventFilter
from convostore.model import (
    Event,
    Role,
    SearchHit,
    Session,
    SessionFilter,
    SessionOrder,
    SessionSummary,
    User,
)
from convostore.prepare import AppendOutcome, NewSession, PreparedAppend, SessionChanges
from convostore.store import Capabilities, Store

__all__ = ["PostgreSQLStore"]

log = logging.getLogger("convostore.postgresql")

T = TypeVar("T")
P = ParamSpec("P")
# pgvector's relaxed iterative scan, which lets a filtered search return its k rows.
_ITERATIVE_SCAN_SINCE = (0, 8)


class PostgreSQLStore(Store):
    """A store on a PostgreSQL database (14 or newer), in one schema of it.

    Each primitive takes one connection from a `psycopg_pool.AsyncConnectionPool` and
    runs as one statement (or one transaction). Open it with `open`, which migrates the
    schema and installs pgvector where the role may.
    """

    def __init__(
        self,
        target: PostgreSQLTarget,
        *,
        indexed_metadata: Iterable[str] = (),
        embedder: Embedder | None = None,
    ) -> None:
        super().__init__(indexed_metadata=indexed_metadata, embedder=embedder)
        self.target = target
        self.facts = ServerFacts(vector_schema=None, vector_version=(), text_collation=None)
        self.capabilities = Capabilities(persistent=True, full_text_index=True, cross_process=True)
        self._pool: AsyncConnectionPool[Connection] | None = None
        self._where = target.where
        self._schema_lock = (TAKE_SCHEMA_LOCK, (ADVISORY_LOCK_CLASS, target.schema))
        self._pool_checks: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        indexed_metadata: Iterable[str] = (),
        embedder: Embedder | None = None,
        **options: Any,
    ) -> PostgreSQLStore:
        """Connect to the database ``url`` names (see `parse_postgresql_url`), create
        the schema if need be and migrate it to this version's schema and
        ``indexed_metadata``, then open the pool."""
        if options:
            raise InvalidArgumentError(f"unknown PostgreSQL store options: {sorted(options)}")
        store = cls(parse_postgresql_url(url), indexed_metadata=indexed_metadata, embedder=embedder)
        target = store.target
        try:
            connection = await open_connection(target)
        except psycopg.Error as error:
            raise translate_error(error, target.where) from error
        try:
            facts = await prepare_database(
                connection, target.schema, store.indexed_metadata, target.where
            )
        except psycopg.Error as error:
            raise translate_error(error, target.where) from error
        finally:
            await connection.close()
        store.facts = facts
        store.capabilities = replace(
            store.capabilities, native_vector_index=facts.vector_schema is not None
        )
        with_vectors = facts.vector_schema is not None
        settings = session_settings(
            search_path(target.schema, facts.vector_schema),
            ef_search=target.ef_search if with_vectors else None,
            iterative_scan=with_vectors and facts.vector_version >= _ITERATIVE_SCAN_SINCE,
        )
        pool = open_pool(target, settings)
        store._pool = pool
        try:
            await pool.open(wait=True, timeout=target.pool_timeout)
            await store._after_connect()
        except psycopg.Error as error:
            await pool.close()
            raise translate_error(error, target.where) from error
        except BaseException:
            await pool.close()
            raise
        if embedder is not None and facts.vector_schema is None:
            log.warning(
                "%s: pgvector is not installed in this database; vector search is "
                "unavailable (messages are still embedded and stored)",
                target.where,
            )
        return store

    async def _close(self) -> None:
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

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        """A connection of the pool; psycopg's errors become convostore's here."""
        try:
            async with self.pool.connection() as connection:
                yield connection
        except psycopg.Error as error:
            if is_connection_lost(error):
                self._check_pool()
            raise translate_error(error, self._where) from error

    async def _run(
        self,
        fn: Callable[Concatenate[Connection, P], Awaitable[T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(connection, *args, **kwargs)`` on a connection of the pool."""
        async with self._connection() as connection:
            return await fn(connection, *args, **kwargs)

    def _check_pool(self) -> None:
        # A lost connection often means the server restarted: every idle connection is
        # lost too. Checking them now spares the next callers from finding out one by one.
        task = asyncio.get_running_loop().create_task(self.pool.check())
        self._pool_checks.add(task)
        task.add_done_callback(self._pool_checks.discard)

    # ---------------------------------------------------------------- users

    async def _put_user(self, user: User) -> None:
        await self._run(put_user, user)

    async def _get_user(self, user_id: str) -> User | None:
        row = await self._run(fetch_one, sql.SELECT_USER, (user_id,))
        return None if row is None else user_from_row(row)

    # ---------------------------------------------------------------- sessions

    async def _insert_session(self, new: NewSession, *, if_absent: bool) -> Session | None:
        return await self._run(insert_session, new, if_absent)

    async def _find_or_insert_part(self, new: NewSession) -> Session:
        return await self._run(find_or_insert_part, new)

    async def _get_session(self, session_id: str) -> Session | None:
        row = await self._fetch_one_binary(sql.SELECT_SESSION, (session_id,))
        return None if row is None else session_from_row(row)

    async def _update_session(self, changes: SessionChanges) -> Session:
        return await self._run(update_session, changes)

    async def _set_title(self, session_id: str, title: str | None, stamp: str) -> Session:
        return await self._run(set_title, session_id, title, stamp)

    async def _delete_session(self, session_id: str) -> bool:
        return await self._run(row_count, sql.DELETE_SESSION, (session_id,)) > 0

    async def _list_sessions(
        self,
        owner_id: str,
        order: SessionOrder,
        after: Keyset | None,
        limit: int,
        filter: SessionFilter,
    ) -> list[Session]:
        statement, parameters = _listing(False, owner_id, order, after, limit, filter)
        rows = await self._fetch_all_binary(statement, parameters)
        return [session_from_row(row) for row in rows]

    async def _list_summaries(
        self,
        owner_id: str,
        order: SessionOrder,
        after: Keyset | None,
        limit: int,
        filter: SessionFilter,
    ) -> list[SessionSummary]:
        statement, parameters = _listing(True, owner_id, order, after, limit, filter)
        rows = await self._fetch_all_binary(statement, parameters)
        return [summary_from_row(row) for row in rows]

    async def _count_sessions(self, owner_id: str, filter: SessionFilter) -> int:
        statement = sql.count_sql(filter.include_parts, filter.kind is not None)
        row = await self._run(fetch_one, statement, {"owner_id": owner_id, "kind": filter.kind})
        return int(row[0])

    async def _find_part(self, part_of: str, held_with: str) -> Session | None:
        row = await self._fetch_one_binary(sql.FIND_PART, (part_of, held_with))
        return None if row is None else session_from_row(row)

    async def _list_parts(self, part_of: str) -> list[SessionSummary]:
        rows = await self._fetch_all_binary(sql.LIST_PARTS, (part_of,))
        return [summary_from_row(row) for row in rows]

    async def _participants(self, session_id: str) -> list[User]:
        rows = await self._run(fetch_all, sql.PARTICIPANTS, (session_id,))
        return [user for row in rows if (user := user_from_row(row)) is not None]

    async def _find_sessions_by_metadata(self, name: str, value: str) -> list[Session]:
        rows = await self._fetch_all_binary(
            sql.SESSIONS_BY_METADATA, {"name": name, "value": value}
        )
        return [session_from_row(row) for row in rows]

    async def _delete_expired(self, before: datetime) -> int:
        return await self._run(row_count, sql.DELETE_EXPIRED, {"before": before})

    # ---------------------------------------------------------------- the log

    async def _append(self, append_: PreparedAppend) -> AppendOutcome:
        return await self._run(append, append_)

    async def _version(self, session_id: str) -> int:
        row = await self._run(fetch_one, sql.SESSION_VERSION, (session_id,))
        return 0 if row is None else int(row[0])

    async def _read(self, session_id: str, event_filter: EventFilter) -> list[Event]:
        return await self._run(read_events, session_id, event_filter, self.facts.text_collation)

    async def _set_narration(
        self, session_id: str, message_id: str, text: str | None, stamp: str
    ) -> bool:
        parameters = (text, stamp, message_id, session_id)
        return await self._run(row_count, sql.SET_NARRATION, parameters) > 0

    # ---------------------------------------------------------------- vectors and text

    async def _vector_index_spec(self) -> VectorIndexSpec | None:
        return await self._run(search.vector_index_spec)

    async def _declare_vector_index(self, spec: VectorIndexSpec, *, replace: bool) -> None:
        await self._declare(spec, replace=replace, build=True)

    async def _declare(self, spec: VectorIndexSpec, *, replace: bool, build: bool) -> None:
        await self._run(
            search.declare_vector_index,
            self.target.schema,
            spec,
            replace=replace,
            build=build and self.facts.vector_schema is not None,
            lock=self._schema_lock,
        )

    async def _begin_reembed(self, spec: VectorIndexSpec) -> bool:
        """Point the vector index at ``spec``; True when that recreated it. A new index
        is built after the run (`_end_reembed`), over every vector at once, rather than
        one insert at a time during it."""
        if await self._vector_index_spec() == spec:
            return False
        await self._declare(spec, replace=True, build=False)
        return True

    async def _end_reembed(self, spec: VectorIndexSpec) -> None:
        await self._declare(spec, replace=False, build=True)

    async def _pending_embeddings(
        self, model: str, roles: Sequence[Role], after: str | None, limit: int
    ) -> list[PendingEmbedding]:
        return await self._run(search.pending, model, roles, after, limit)

    async def _count_pending_embeddings(self, model: str, roles: Sequence[Role]) -> int:
        return await self._run(search.count_pending, model, roles)

    async def _set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]]
    ) -> None:
        await self._run(search.set_embeddings, model, vectors)

    async def _vector_search(
        self,
        vector: tuple[float, ...],
        metric: Metric,
        model: str | None,
        k: int,
        owner_id: str | None,
        session_id: str | None,
        roles: tuple[Role, ...] | None,
    ) -> list[SearchHit]:
        if self.facts.vector_schema is None:
            raise BackendUnavailableError(
                f"{self._where}: vector search needs the PostgreSQL extension 'vector' "
                "(pgvector), which is not installed in this database: have an "
                "administrator run CREATE EXTENSION vector, then reconnect"
            )
        return await self._run(
            search.vector_search,
            vector,
            metric,
            model,
            k,
            (owner_id, session_id, roles),
        )

    async def _text_search(
        self,
        terms: tuple[str, ...],
        k: int,
        owner_id: str | None,
        session_id: str | None,
        roles: tuple[Role, ...] | None,
    ) -> list[SearchHit]:
        return await self._run(search.text_search, terms, k, (owner_id, session_id, roles))

    # ---------------------------------------------------------------- helpers

    async def _fetch_one_binary(self, statement: str, parameters: Any) -> Any:
        return await self._run(_fetch_one_binary, statement, parameters)

    async def _fetch_all_binary(self, statement: str, parameters: Any) -> list[Any]:
        return await self._run(_fetch_all_binary, statement, parameters)


async def _fetch_one_binary(connection: Connection, statement: str, parameters: Any) -> Any:
    # Binary results: times and vectors arrive exact, with no text to parse.
    return await fetch_one(connection, statement, parameters, binary=True)


async def _fetch_all_binary(connection: Connection, statement: str, parameters: Any) -> list[Any]:
    return await fetch_all(connection, statement, parameters, binary=True)


def _listing(
    summaries: bool,
    owner_id: str,
    order: SessionOrder,
    after: Keyset | None,
    limit: int,
    filter: SessionFilter,
) -> tuple[str, dict[str, Any]]:
    statement = sql.listing_sql(
        summaries, order, filter.include_parts, filter.kind is not None, after is not None
    )
    after_at = None
    if after is not None and after.last_activity_us is not None:
        after_at = from_micros(after.last_activity_us)
    parameters = {
        "owner_id": owner_id,
        "kind": filter.kind,
        "after_id": None if after is None else after.session_id,
        "after_at": after_at,
        "limit": limit,
    }
    return statement, parameters
