"""`FalkorDBStore`: the Cypher store on FalkorDB, through the ``falkordb`` client's
asyncio API and a pool of connections; where the driver's errors end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import redis.asyncio as aioredis
from falkordb.asyncio import FalkorDB
from falkordb.asyncio.graph import AsyncGraph
from falkordb.exceptions import SchemaVersionMismatchException
from redis import exceptions as redis_errors

from convostore.backends.cypher.dialect import FALKORDB
from convostore.backends.cypher.store import CypherStore, Rows
from convostore.backends.falkordb import schema
from convostore.backends.falkordb.url import FalkorDBTarget, parse_falkordb_url
from convostore.embedding import Embedder, VectorIndexSpec
from convostore.errors import BackendUnavailableError, InvalidArgumentError, StoreError
from convostore.store import Capabilities

__all__ = ["FalkorDBStore", "translate_error"]

log = logging.getLogger("convostore.falkordb")

DriverError = (redis_errors.RedisError, SchemaVersionMismatchException)
# What a server says when an index being created exists already (another store made it).
_ALREADY_INDEXED = ("already indexed", "already exists")
_DURABLE = {"appendonly": "yes", "appendfsync": "always"}


class FalkorDBStore(CypherStore):
    """A store in one graph of a FalkorDB server. Open it with `open`, which migrates
    the graph's schema.

    Each primitive is one Cypher query on a connection of the pool: FalkorDB runs the
    writes to a graph one at a time, each atomically, so a query's checks and writes
    see no other writer in between.
    """

    capabilities = Capabilities(
        persistent=True, native_vector_index=True, full_text_index=True, cross_process=True
    )

    def __init__(
        self,
        target: FalkorDBTarget,
        *,
        indexed_metadata: Iterable[str] = (),
        embedder: Embedder | None = None,
    ) -> None:
        super().__init__(FALKORDB, indexed_metadata=indexed_metadata, embedder=embedder)
        self.target = target
        self._where = target.where
        self._pool: aioredis.BlockingConnectionPool | None = None
        self._graph: AsyncGraph | None = None

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        indexed_metadata: Iterable[str] = (),
        embedder: Embedder | None = None,
        **options: Any,
    ) -> FalkorDBStore:
        """Connect to the graph ``url`` names (see `parse_falkordb_url`), migrate its
        schema and index ``indexed_metadata``."""
        if options:
            raise InvalidArgumentError(f"unknown FalkorDB store options: {sorted(options)}")
        store = cls(parse_falkordb_url(url), indexed_metadata=indexed_metadata, embedder=embedder)
        try:
            await store._connect()
            facts = await schema.prepare_graph(
                store._schema_query, store._ddl, store.queries, store.indexed_metadata, store._where
            )
            if facts.vector_index_built:
                store.native_index = facts.vector_index
            await store._after_connect()
        except BaseException:
            await store._close()
            raise
        return store

    async def _connect(self) -> None:
        target = self.target
        connection_class = aioredis.SSLConnection if target.tls else aioredis.Connection
        tls: dict[str, Any] = dict(target.ssl)
        self._pool = aioredis.BlockingConnectionPool(
            host=target.host,
            port=target.port,
            username=target.username,
            password=target.password,
            max_connections=target.pool_max_size,
            timeout=target.pool_timeout,
            socket_connect_timeout=target.connect_timeout,
            socket_timeout=target.socket_timeout,
            decode_responses=True,
            protocol=2,
            client_name="convostore",
            connection_class=connection_class,
            **tls,
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

    async def _close(self) -> None:
        pool, self._pool = self._pool, None
        self._graph = None
        if pool is not None:
            await pool.aclose()

    @property
    def graph(self) -> AsyncGraph:
        """The client's graph object (for the store's own tests and benchmarks)."""
        if self._graph is None:
            raise BackendUnavailableError(f"{self._where}: the store is not open")
        return self._graph

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

    async def _schema_query(self, query: str, parameters: dict[str, Any]) -> Rows:
        """A query of the schema's (which may write): `schema.Run`."""
        return await self._run(query, parameters, write=True)

    async def _ddl(self, query: str) -> None:
        graph = self.graph
        try:
            await graph.query(query)
        except redis_errors.ResponseError as error:
            if not any(text in str(error) for text in _ALREADY_INDEXED):
                raise translate_error(error, self._where) from error
        except DriverError as error:
            raise translate_error(error, self._where) from error

    # ---------------------------------------------------------------- the vector index

    async def _vector_index_spec(self) -> VectorIndexSpec | None:
        return await schema.read_vector_index(self._schema_query)

    async def _declare_vector_index(self, spec: VectorIndexSpec, *, replace: bool) -> None:
        self.native_index = await schema.declare_vector_index(
            self._schema_query, self._ddl, self.queries, spec, replace=replace
        )


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
    if isinstance(
        error,
        redis_errors.ConnectionError
        | redis_errors.TimeoutError
        | redis_errors.AuthenticationError
        | redis_errors.BusyLoadingError,
    ):
        return BackendUnavailableError(detail)
    if isinstance(error, redis_errors.ResponseError) and "NOAUTH" in str(error):
        return BackendUnavailableError(detail)
    return StoreError(detail)
