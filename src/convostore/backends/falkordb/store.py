"""`FalkorDBBackend`: the Cypher backend on FalkorDB, through the ``falkordb`` client's
asyncio API and a pool of connections; where the driver's errors end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Self

import redis.asyncio as aioredis
from falkordb.asyncio import FalkorDB
from falkordb.asyncio.graph import AsyncGraph
from falkordb.exceptions import SchemaVersionMismatchException
from redis import exceptions as redis_errors

from convostore.backends.cypher.dialect import FALKORDB
from convostore.backends.cypher.schema import IndexInventory, Run
from convostore.backends.cypher.store import CypherBackend, Rows
from convostore.backends.falkordb import schema
from convostore.backends.falkordb.url import FalkorDBTarget, parse_falkordb_url
from convostore.backends.redispy import UNAVAILABLE, connection_pool
from convostore.backends.transports import abort_transports
from convostore.backends.urls import target_of
from convostore.errors import BackendUnavailableError, StoreError

__all__ = ["FalkorDBBackend", "translate_error"]

log = logging.getLogger("convostore.falkordb")

DriverError = (redis_errors.RedisError, SchemaVersionMismatchException)
# What a server says when an index being created exists already (another store made it).
_ALREADY_INDEXED = ("already indexed", "already exists")
_DURABLE = {"appendonly": "yes", "appendfsync": "always"}


class FalkorDBBackend(CypherBackend):
    """One graph of a FalkorDB server. `open` migrates the graph's schema.

    Each primitive is one Cypher query on a connection of the pool: FalkorDB runs the
    writes to a graph one at a time, each atomically, so a query's checks and writes
    see no other writer in between.
    """

    migrations = schema.MIGRATIONS

    def __init__(self, target: FalkorDBTarget) -> None:
        super().__init__(FALKORDB, target.where)
        self.target = target
        self._pool: aioredis.BlockingConnectionPool | None = None
        self._graph: AsyncGraph | None = None

    @classmethod
    def for_url(cls, url: str, options: Mapping[str, Any]) -> Self:
        """A backend for the graph ``url`` names (see `parse_falkordb_url`)."""
        return cls(target_of(parse_falkordb_url, url, options, "FalkorDB"))

    async def _schema_reader(self) -> Run:
        try:
            exists = await aioredis.Redis(connection_pool=self._pool).exists(self.target.graph)
        except DriverError as error:
            raise translate_error(error, self._where) from error
        # A graph that does not exist yet cannot be queried, read-only.
        return self._read_query if exists else _no_graph

    async def _connect(self) -> None:
        target = self.target
        self._pool = connection_pool(
            target, target.host, target.port, timeout=target.pool_timeout, decode_responses=True
        )
        try:
            # The client probes the server (cluster or not) synchronously: off the loop.
            client = await asyncio.to_thread(FalkorDB, connection_pool=self._pool)
            settings = await _durability(client)
        except DriverError as error:
            raise translate_error(error, self._where) from error
        self._graph = client.select_graph(target.graph)
        if settings and any(settings.get(k) != v for k, v in _DURABLE.items()):
            log.warning(
                "%s: the server is not fully durable (appendonly=%s, appendfsync=%s): "
                "appends it acknowledged may be lost in a crash",
                self._where,
                settings.get("appendonly"),
                settings.get("appendfsync"),
            )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        self._graph = None
        if pool is not None:
            await pool.aclose()

    def release_when_dropped(self) -> Callable[[], None] | None:
        return self._releasing(_abort_connections, self._pool)

    @property
    def graph(self) -> AsyncGraph:
        """The client's graph object (for the store's own tests and benchmarks)."""
        return self._opened(self._graph)

    # ---------------------------------------------------------------- running queries

    async def _run(self, query: str, parameters: dict[str, Any], *, write: bool) -> Rows:
        graph = self.graph
        try:
            if write:
                result = await graph.query(query, parameters)
            else:
                result = await graph.ro_query(query, parameters)
        except DriverError as error:
            raise translate_error(error, self._where) from error
        rows: Rows = result.result_set
        return rows

    async def _ddl(self, statement: str) -> None:
        graph = self.graph
        try:
            await graph.query(statement)
        except redis_errors.ResponseError as error:
            if not any(text in str(error) for text in _ALREADY_INDEXED):
                raise translate_error(error, self._where) from error
        except DriverError as error:
            raise translate_error(error, self._where) from error

    async def _inventory(self) -> IndexInventory:
        # As a write: a read-only query of a graph not yet created fails.
        return await schema.inventory(self._schema_query)


async def _durability(client: FalkorDB) -> dict[str, str]:
    """The server's persistence settings; {} where CONFIG is not allowed (managed
    services often rename or forbid it)."""
    try:
        reply = await client.connection.config_get("append*")
    except redis_errors.ResponseError:
        return {}
    return {str(k): str(v) for k, v in dict(reply).items()}


def translate_error(error: BaseException, where: str) -> StoreError:
    """The convostore error to raise (``from error``) for a driver error:
    `BackendUnavailableError` when the server cannot be used (lost connection, refused
    login, no free connection, still loading its files), else `StoreError`."""
    detail = f"{where}: {error}"
    if isinstance(error, UNAVAILABLE):
        return BackendUnavailableError(detail)
    if isinstance(error, redis_errors.ResponseError) and "NOAUTH" in str(error):
        return BackendUnavailableError(detail)
    return StoreError(detail)


async def _no_graph(query: str, parameters: dict[str, Any]) -> Rows:
    """What a query of a graph that does not exist reads: nothing."""
    return []


def _abort_connections(pool: aioredis.BlockingConnectionPool) -> None:
    """Close the sockets of ``pool``'s connections now (a store collected without
    close(); the pool's own fields are read)."""
    connections = [
        *getattr(pool, "_available_connections", ()),
        *getattr(pool, "_in_use_connections", ()),
    ]
    writers = (getattr(connection, "_writer", None) for connection in connections)
    abort_transports(None if writer is None else writer.transport for writer in writers)
