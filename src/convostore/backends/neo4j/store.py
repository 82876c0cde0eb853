"""`Neo4jBackend`: the Cypher backend on Neo4j 5, through the official ``neo4j``
driver's async API (its pool, and its routing for ``neo4j://``); where the driver's
errors end."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, Self

import neo4j
from neo4j import exceptions as neo4j_errors

from convostore.backends.cypher.schema import IndexInventory
from convostore.backends.cypher.store import CypherBackend, Rows
from convostore.backends.neo4j import schema
from convostore.backends.neo4j.dialect import NEO4J
from convostore.backends.neo4j.url import Neo4jTarget, parse_neo4j_url
from convostore.backends.transports import abort_transports
from convostore.backends.urls import target_of
from convostore.errors import BackendUnavailableError, StoreError

__all__ = ["Neo4jBackend", "translate_error"]

log = logging.getLogger("convostore.neo4j")

# A write that met another's uniqueness (two inserts of one id) or a node deleted under
# it wrote nothing: it is run again, and then sees what the other committed.
_RERUN_CODES: Final = (
    "Neo.ClientError.Schema.ConstraintValidationFailed",
    "Neo.ClientError.Statement.EntityNotFound",
)
_RERUNS: Final = 3
# What a schema statement says when another store created the same index just before.
_ALREADY: Final = (
    "Neo.ClientError.Schema.EquivalentSchemaRuleAlreadyExists",
    "Neo.ClientError.Schema.IndexAlreadyExists",
    "Neo.ClientError.Schema.ConstraintAlreadyExists",
)


class Neo4jBackend(CypherBackend):
    """One database of a Neo4j server (or cluster). `open` migrates its schema.

    Each primitive is one managed transaction of one query (a write's checks and
    writes in it; one that checks a session locks it first), run again by the driver
    after a transient error such as a deadlock.
    """

    migrations = schema.MIGRATIONS

    def __init__(self, target: Neo4jTarget) -> None:
        super().__init__(NEO4J, target.where)
        self.target = target
        self._driver: neo4j.AsyncDriver | None = None

    @classmethod
    def for_url(cls, url: str, options: Mapping[str, Any]) -> Self:
        """A backend for the database ``url`` names (see `parse_neo4j_url`)."""
        return cls(target_of(parse_neo4j_url, url, options, "Neo4j"))

    async def _connect(self) -> None:
        target = self.target
        auth = None if target.username is None else (target.username, target.password or "")
        try:
            self._driver = neo4j.AsyncGraphDatabase.driver(
                target.uri,
                auth=auth,
                max_connection_pool_size=target.pool_max_size,
                connection_acquisition_timeout=target.pool_timeout,
                connection_timeout=target.connect_timeout,
                max_transaction_retry_time=target.retry_time,
                user_agent="convostore",
                # Notices such as "this property does not exist yet" are not errors.
                notifications_min_severity="OFF",
            )
            await self._driver.verify_connectivity()
        except (neo4j_errors.Neo4jError, neo4j_errors.DriverError, ValueError) as error:
            raise translate_error(error, self._where) from error

    async def close(self) -> None:
        driver, self._driver = self._driver, None
        if driver is not None:
            await driver.close()

    def release_when_dropped(self) -> Callable[[], None] | None:
        return self._releasing(_abort_connections, self._driver)

    @property
    def driver(self) -> neo4j.AsyncDriver:
        """The driver (for the store's own tests and benchmarks)."""
        return self._opened(self._driver)

    # ---------------------------------------------------------------- running queries

    async def _run(self, query: str, parameters: dict[str, Any], *, write: bool) -> Rows:
        driver = self.driver
        mode = neo4j.WRITE_ACCESS if write else neo4j.READ_ACCESS
        for attempt in range(1, _RERUNS + 1):
            try:
                async with driver.session(
                    database=self.target.database, default_access_mode=mode
                ) as session:
                    if write:
                        return await session.execute_write(_rows, query, parameters)
                    return await session.execute_read(_rows, query, parameters)
            except neo4j_errors.Neo4jError as error:
                if write and error.code in _RERUN_CODES and attempt < _RERUNS:
                    continue
                raise translate_error(error, self._where) from error
            except neo4j_errors.DriverError as error:
                raise translate_error(error, self._where) from error
        raise AssertionError("unreachable")

    async def _ddl(self, statement: str) -> None:
        try:
            await self._run(statement, {}, write=True)
        except StoreError as error:
            cause = error.__cause__
            if not (isinstance(cause, neo4j_errors.Neo4jError) and cause.code in _ALREADY):
                raise

    async def _inventory(self) -> IndexInventory:
        return await schema.inventory(self._read_query)

    async def _await_indexes(self) -> None:
        await self._run(schema.AWAIT_INDEXES, {"seconds": schema.INDEX_WAIT_SECONDS}, write=True)


async def _rows(tx: neo4j.AsyncManagedTransaction, query: str, parameters: dict[str, Any]) -> Rows:
    result = await tx.run(query, parameters)
    rows: Rows = await result.values()
    return rows


def translate_error(error: BaseException, where: str) -> StoreError:
    """The convostore error to raise (``from error``) for a driver error:
    `BackendUnavailableError` when the server cannot be used (unreachable, a refused
    login or missing rights, no free connection in time, the database absent or not
    available), else `StoreError`."""
    detail = f"{where}: {error}"
    if isinstance(
        error,
        neo4j_errors.ServiceUnavailable
        | neo4j_errors.SessionExpired
        | neo4j_errors.DatabaseUnavailable
        | neo4j_errors.ConfigurationError,
    ):
        return BackendUnavailableError(detail)
    code = getattr(error, "code", None)
    if isinstance(error, neo4j_errors.Neo4jError) and code is None:
        # The driver's own (no free connection from the pool in time).
        return BackendUnavailableError(detail)
    if code is not None and (
        code.startswith("Neo.ClientError.Security.")
        or code == "Neo.ClientError.Database.DatabaseNotFound"
    ):
        return BackendUnavailableError(detail)
    return StoreError(detail)


def _abort_connections(driver: neo4j.AsyncDriver) -> None:
    """Close the sockets of ``driver``'s pooled connections now (a store collected
    without close(); the driver's own fields are read)."""
    pool = getattr(driver, "_pool", None)
    queues = list(getattr(pool, "connections", {}).values())
    connections = [connection for queue in queues for connection in list(queue)]
    writers = (getattr(getattr(c, "socket", None), "_writer", None) for c in connections)
    abort_transports(None if writer is None else writer.transport for writer in writers)
