"""How a store's connections are opened and set up, and where psycopg's errors end.

Every connection is in autocommit mode: a primitive that is one statement is its own
transaction and costs one round trip; one of several statements opens a transaction
itself, in a pipeline where it can. ``prepare_threshold=0`` prepares every statement on
its first use, and the store's statements are a bounded set, so each is parsed and
planned once per connection.
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

import psycopg
from psycopg import AsyncConnection, errors
from psycopg.types.string import TextBinaryLoader, TextLoader
from psycopg_pool import AsyncConnectionPool, PoolClosed

from convostore.backends.postgresql.url import PostgreSQLTarget
from convostore.backends.sql.aio import CursorDriver
from convostore.errors import BackendUnavailableError, InvalidArgumentError, StoreError

__all__ = [
    "DRIVER",
    "PREPARED_MAX",
    "Connection",
    "configure_connection",
    "is_connection_lost",
    "open_connection",
    "open_pool",
    "session_settings",
    "translate_error",
]

log = logging.getLogger("convostore.postgresql")

Connection = AsyncConnection[Any]
# Enough for every statement a store can compose (listings, filters, search scopes),
# so none is ever evicted and prepared again.
PREPARED_MAX: Final = 1024
CONNECTION_OPTIONS: Final[dict[str, Any]] = {"autocommit": True, "prepare_threshold": 0}
# The settings of every connection, in one statement: (names, values).
CONFIGURE_SESSION: Final = (
    "SELECT set_config(setting.name, setting.value, false)"
    " FROM unnest(%s::text[], %s::text[]) AS setting (name, value)"
)


class PostgreSQLDriver(CursorDriver[Connection]):
    """Rows are read in binary: times and vectors arrive exact, with no text to parse."""

    exceptions = (psycopg.Error,)

    def translate(self, error: BaseException, where: str) -> StoreError:
        return translate_error(error, where)

    async def fetch_one(
        self, connection: Connection, statement: str, parameters: Any = None
    ) -> Any:
        cursor = await connection.execute(statement, parameters, binary=True)
        return await cursor.fetchone()

    async def fetch_all(
        self, connection: Connection, statement: str, parameters: Any = None
    ) -> list[Any]:
        cursor = await connection.execute(statement, parameters, binary=True)
        return await cursor.fetchall()

    async def execute(self, connection: Connection, statement: str, parameters: Any = None) -> int:
        cursor = await connection.execute(statement, parameters)
        return cursor.rowcount

    def transaction(self, connection: Connection) -> AbstractAsyncContextManager[Any]:
        return connection.transaction()

    def retryable(self, error: BaseException) -> bool:
        return isinstance(error, errors.SerializationFailure | errors.DeadlockDetected)

    def lost(self, error: BaseException) -> bool:
        return is_connection_lost(error)


DRIVER: Final = PostgreSQLDriver()


def _read_json_as_text(connection: Connection) -> None:
    # JSON columns are read as their text, which convostore decodes itself, exactly as
    # it encoded it (the same as every other backend).
    connection.adapters.register_loader("json", TextLoader)
    connection.adapters.register_loader("json", TextBinaryLoader)


def session_settings(
    search_path: str, *, ef_search: int | None, iterative_scan: bool
) -> dict[str, str]:
    """The settings of a store's connections: the search path finds the store's tables
    first, then pgvector's type and operators; times are read in UTC whatever the
    server's default; with pgvector, how wide an HNSW search walks and (pgvector 0.8)
    that it walks on until the filters let k rows through."""
    settings = {"search_path": search_path, "TimeZone": "UTC"}
    if ef_search is not None:
        settings["hnsw.ef_search"] = str(ef_search)
    if iterative_scan:
        settings["hnsw.iterative_scan"] = "relaxed_order"
    return settings


async def configure_connection(connection: Connection, settings: dict[str, str]) -> None:
    """Set up a new connection as every connection of a store is."""
    connection.prepared_max = PREPARED_MAX
    _read_json_as_text(connection)
    await connection.execute(CONFIGURE_SESSION, (list(settings), list(settings.values())))


async def open_connection(target: PostgreSQLTarget) -> Connection:
    """One connection outside the pool (for connect's migration): its failure carries
    libpq's own message, where a pool would only time out."""
    connection = await AsyncConnection.connect(target.conninfo, **CONNECTION_OPTIONS)
    _read_json_as_text(connection)
    return connection


def open_pool(
    target: PostgreSQLTarget, settings: dict[str, str]
) -> AsyncConnectionPool[Connection]:
    """The store's pool, not yet open; each connection gets ``settings``."""

    async def configure(connection: Connection) -> None:
        await configure_connection(connection, settings)

    return AsyncConnectionPool(
        target.conninfo,
        kwargs=dict(CONNECTION_OPTIONS),
        min_size=target.pool_min_size,
        max_size=target.pool_max_size,
        timeout=target.pool_timeout,
        configure=configure,
        open=False,
        name="convostore",
    )


def translate_error(error: BaseException, where: str) -> StoreError:
    """The convostore error to raise (``from error``) for a psycopg error:
    `BackendUnavailableError` when the server cannot be used (lost connection, shutdown,
    no free connection, missing privilege), `InvalidArgumentError` for a value
    PostgreSQL cannot hold (a NUL character in text), else `StoreError`."""
    message = error.diag.message_primary if isinstance(error, psycopg.DatabaseError) else None
    detail = f"{where}: {message or error}"
    if isinstance(error, PoolClosed):
        return BackendUnavailableError(f"{where}: the store is closed")
    if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return BackendUnavailableError(detail)
    if isinstance(error, errors.InsufficientPrivilege):
        return BackendUnavailableError(f"{detail} (the role lacks a privilege convostore needs)")
    if isinstance(error, psycopg.DataError):
        return InvalidArgumentError(detail)
    return StoreError(detail)


def is_connection_lost(error: BaseException) -> bool:
    """Whether the error means the connection it came from is unusable."""
    return isinstance(error, psycopg.OperationalError) and not isinstance(
        error, PoolClosed | errors.QueryCanceled
    )
