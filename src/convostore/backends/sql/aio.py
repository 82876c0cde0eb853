"""What the SQL backends on an asyncio driver share (PostgreSQL on psycopg, MySQL on
asyncmy): a `Driver`, the few calls that differ between drivers and which of their
errors a transaction may be run again for; `AsyncSQLBackend`, the I/O hooks of
`SQLBackend` and the transaction runner over a pool's connections; and `drive`, which
runs an operation written without I/O (`convostore.backends.sql.steps`) on a driver.
Nothing here knows a driver.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Generic, TypeVar

from convostore.backends import spi
from convostore.backends.sql import writes
from convostore.backends.sql.backend import Parameters, SQLBackend
from convostore.backends.sql.embeddings import Embeddings
from convostore.backends.sql.steps import Query, RollbackAndReturn, Steps
from convostore.backends.sql.writes import KeyStatements
from convostore.errors import StoreError

__all__ = [
    "AsyncSQLBackend",
    "CursorDriver",
    "Driver",
    "RollbackAndReturn",
    "drive",
    "in_transaction",
]

log = logging.getLogger("convostore.sql")

C = TypeVar("C")
T = TypeVar("T")
# The first retry waits about this long, each later one twice as long as the last.
_RETRY_BASE_S: Final = 0.005


class Driver(abc.ABC, Generic[C]):
    """How one asyncio driver runs statements on its connection type ``C``, and which
    of its exceptions (``exceptions``) become which of convostore's (`translate`)."""

    exceptions: tuple[type[BaseException], ...]

    @abc.abstractmethod
    def translate(self, error: BaseException, where: str) -> StoreError:
        """The convostore error to raise (``from error``) for one of ``exceptions``
        (``where``: the server and database, for the message)."""

    @contextlib.contextmanager
    def translated(self, where: str) -> Iterator[None]:
        """The driver's ``exceptions`` raised in the block become convostore's."""
        try:
            yield
        except self.exceptions as error:
            raise self.translate(error, where) from error

    @abc.abstractmethod
    async def fetch_one(self, connection: C, statement: str, parameters: Any = None) -> Any:
        """The first row of the statement's answer, or None."""

    @abc.abstractmethod
    async def fetch_all(self, connection: C, statement: str, parameters: Any = None) -> list[Any]:
        """Every row of the statement's answer."""

    @abc.abstractmethod
    async def execute(self, connection: C, statement: str, parameters: Any = None) -> int:
        """Run the statement; how many rows it changed itself (not its cascades)."""

    @abc.abstractmethod
    async def execute_many(self, connection: C, statement: str, rows: Sequence[Any]) -> None:
        """Run the statement once per row of parameters."""

    @abc.abstractmethod
    def transaction(self, connection: C) -> AbstractAsyncContextManager[Any]:
        """One transaction: committed when the block ends, rolled back when it raises."""

    def duplicate(self, error: Exception) -> bool:
        """Whether ``error`` is a unique key refusing a row, which leaves the transaction
        going on (where a refusal aborts the transaction, False: the error is raised)."""
        return False

    def retryable(self, error: BaseException) -> bool:
        """Whether a transaction that raised ``error`` may succeed when run again (the
        database ended it as a deadlock victim, a serialization failure, a lock wait
        timeout)."""
        return False

    def lost(self, error: BaseException) -> bool:
        """Whether ``error`` means the connection it came from is unusable (dropped,
        refused, the server shut down): the server may have restarted."""
        return False


class CursorDriver(Driver[C]):
    """A `Driver` whose connection opens an async cursor (``async with
    connection.cursor() as cursor``) that runs a statement and then reads its rows, as
    the DB-API does (asyncmy; psycopg for ``executemany``). Its ``connection`` is typed
    Any: the cursor is all it needs of one."""

    async def fetch_one(self, connection: Any, statement: str, parameters: Any = None) -> Any:
        async with connection.cursor() as cursor:
            await cursor.execute(statement, parameters)
            return await cursor.fetchone()

    async def fetch_all(self, connection: Any, statement: str, parameters: Any = None) -> list[Any]:
        async with connection.cursor() as cursor:
            await cursor.execute(statement, parameters)
            return list(await cursor.fetchall())

    async def execute(self, connection: Any, statement: str, parameters: Any = None) -> int:
        async with connection.cursor() as cursor:
            return int(await cursor.execute(statement, parameters))

    async def execute_many(self, connection: Any, statement: str, rows: Sequence[Any]) -> None:
        async with connection.cursor() as cursor:
            await cursor.executemany(statement, rows)


async def drive(driver: Driver[C], connection: C, steps: Steps[T]) -> T:
    """Run ``steps`` (`convostore.backends.sql.writes`) on ``connection``."""
    answer: Any = None
    while True:
        try:
            query: Query = steps.send(answer)
        except StopIteration as done:
            result: T = done.value
            return result
        statement, parameters = query.statement, query.parameters
        if query.answer == "one":
            answer = await driver.fetch_one(connection, statement, parameters)
        elif query.answer == "all":
            answer = await driver.fetch_all(connection, statement, parameters)
        elif query.answer == "many":
            await driver.execute_many(connection, statement, parameters)
            answer = None
        else:
            try:
                changed = await driver.execute(connection, statement, parameters)
            except Exception as error:
                if query.answer != "insert" or not driver.duplicate(error):
                    raise
                answer = False
            else:
                # As `convostore.backends.sql.steps.drive` answers: an insert, True.
                answer = changed if query.answer == "count" else True


async def in_transaction(
    driver: Driver[C], connection: C, retries: int, fn: Callable[..., Awaitable[T]], *args: Any
) -> T:
    """``fn(connection, *args)`` in one transaction, committed when it returns and
    rolled back when it raises; run again, up to ``retries`` more times, when the
    driver calls its error retryable (`Driver.retryable`)."""
    for attempt in range(retries + 1):
        try:
            async with driver.transaction(connection):
                return await fn(connection, *args)
        except RollbackAndReturn as signal:
            value: T = signal.value
            return value
        except Exception as error:
            if attempt == retries or not driver.retryable(error):
                raise
            log.debug("retrying a transaction after %r (attempt %d)", error, attempt + 1)
        await asyncio.sleep(_RETRY_BASE_S * 2**attempt * (0.5 + random.random()))
    raise AssertionError("unreachable")  # pragma: no cover


class AsyncSQLBackend(SQLBackend, Generic[C]):
    """A `SQLBackend` whose primitives each run on one connection of a pool: a subclass
    sets ``driver``, ``retries`` and ``_where`` and gives `_acquire` and `_release`, the
    pool's two calls; `_connection` is where the driver's errors become convostore's.
    Re-embedding (``embeddings``) and the metadata index (``key_statements``) run the
    shared steps; `convostore.backends.sql.generic.GenericSQLBackend` runs every other
    primitive through them too."""

    driver: Driver[C]
    key_statements: KeyStatements
    # Re-embedding, where the backend runs the shared steps.
    embeddings: Embeddings
    # How many times a transaction the driver calls retryable is run again.
    retries: int = 0
    # The server and database, for messages (never a password).
    _where: str

    def _check(self, values: Iterable[Any], what: str) -> None:
        """Refuse (`InvalidArgumentError`) values too large for the database, before a
        statement carries them (``what``: "the session", ...); none by default."""

    @abc.abstractmethod
    async def _acquire(self) -> C:
        """A free connection of the pool, waited for at most the pool's timeout
        (`BackendUnavailableError` after it)."""

    @abc.abstractmethod
    async def _release(self, connection: C, *, failed: bool) -> None:
        """Give ``connection`` back to the pool. ``failed``: the block using it raised
        something other than a `StoreError` (a driver's error) or was cancelled, so its
        state is unknown."""

    async def _connection_lost(self) -> None:
        """One connection was lost (`Driver.lost`): the server may have restarted, so
        the idle ones may be lost too. Checking or dropping them here spares the next
        callers from finding out one by one; nothing by default."""

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[C]:
        """A connection of the pool, for one primitive; the driver's errors raised in
        the block become convostore's."""
        driver = self.driver
        try:
            connection = await self._acquire()
        except driver.exceptions as error:
            raise driver.translate(error, self._where) from error
        failed = True
        try:
            try:
                yield connection
                failed = False
            except StoreError:
                # convostore's own refusal (a stale stamp, an unknown session), raised
                # between statements, its transaction rolled back: the connection is fine.
                # Only the driver's errors and a cancellation leave it in doubt.
                failed = False
                raise
            finally:
                await self._release(connection, failed=failed)
        except driver.exceptions as error:  # The block's, or giving the connection back.
            if driver.lost(error):
                await self._connection_lost()
            raise driver.translate(error, self._where) from error

    async def _run(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``fn(connection, *args, **kwargs)`` on a connection of the pool."""
        async with self._connection() as connection:
            return await fn(connection, *args, **kwargs)

    async def _steps(self, connection: C, make: Callable[..., Steps[T]], *args: Any) -> T:
        """The steps ``make(*args)`` run on ``connection``: as ``fn`` of `_run` or of
        `_write` (made again for each retry), ``_run(self._steps, make, *args)``."""
        return await drive(self.driver, connection, make(*args))

    async def _write(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``fn(connection, *args)`` in one transaction (`in_transaction`)."""
        async with self._connection() as connection:
            return await in_transaction(self.driver, connection, self.retries, fn, *args)

    async def _write_steps(self, write: Callable[..., Steps[T]], *args: Any) -> T:
        """The write ``write(*args)`` (`convostore.backends.sql.writes`) in one
        transaction, made again for each retry."""
        return await self._write(self._steps, write, *args)

    async def _fetch_all(self, statement: str, parameters: Parameters) -> list[Sequence[Any]]:
        return await self._run(self.driver.fetch_all, statement, parameters)

    async def _changed(self, statement: str, parameters: Parameters) -> int:
        self._check(parameters.values(), "the write")
        return await self._run(self.driver.execute, statement, parameters)

    async def _returning(self, statement: str, parameters: Parameters) -> Sequence[Any] | None:
        self._check(parameters.values(), "the write")
        if self.statements.dialect.returning:
            row: Sequence[Any] | None = await self._run(
                self.driver.fetch_one, statement, parameters
            )
            return row

        async def update_then_read(connection: C) -> Sequence[Any] | None:
            # The stamp always changes: a session that exists is always a changed row.
            if not await self.driver.execute(connection, statement, parameters):
                return None
            select = self.statements.select_session
            found: Sequence[Any] | None = await self.driver.fetch_one(
                connection, select, parameters
            )
            return found

        return await self._write(update_then_read)

    # ---------------------------------------------------------------- re-embedding

    async def vector_index_spec(self) -> spi.VectorIndexSpec | None:
        return await self._run(self._steps, self.embeddings.spec)

    async def pending_embeddings(
        self, model: str, roles: Sequence[spi.Role], after: str | None, limit: int
    ) -> list[spi.PendingEmbedding]:
        return await self._run(self._steps, self.embeddings.pending, model, roles, after, limit)

    async def count_pending_embeddings(self, model: str, roles: Sequence[spi.Role]) -> int:
        return await self._run(self._steps, self.embeddings.count_pending, model, roles)

    # ---------------------------------------------------------------- the metadata index

    async def add_indexed_keys(self, keys: frozenset[str]) -> frozenset[str]:
        return await self._write_steps(
            writes.add_indexed_keys, self.statements, self.key_statements, keys
        )

    async def remove_indexed_key(self, key: str) -> bool:
        return await self._write_steps(writes.remove_indexed_key, self.statements, key)
