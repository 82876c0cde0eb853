"""`MySQLBackend`: the shared steps on asyncmy's pool, in MySQL's dialect."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, Self

from asyncmy.pool import Pool

from convostore.backends import interface
from convostore.backends.mysql import native_vectors, vector_feed
from convostore.backends.mysql import statements as sql
from convostore.backends.mysql.connection import (
    DRIVER,
    Connection,
    ServerFacts,
    check_size,
    node_ready,
    open_connection,
    open_pool,
    snapshot,
)
from convostore.backends.mysql.schema import prepare_database, read_pending_migrations
from convostore.backends.mysql.url import MySQLTarget, parse_mysql_url
from convostore.backends.sql.generic import GenericSQLBackend
from convostore.backends.transports import abort_transports
from convostore.backends.urls import target_of
from convostore.errors import BackendUnavailableError

__all__ = ["MySQLBackend", "ready_node"]

log = logging.getLogger("convostore.mysql")
# How long a node may take to answer when the store looks for one that is up.
_PROBE_TIMEOUT_S = 2.0


class MySQLBackend(GenericSQLBackend[Connection]):
    """One MySQL 8 or MariaDB (10.6 or newer) database.

    Each primitive runs the shared steps (`GenericSQLBackend`) on one connection of
    asyncmy's pool, as one statement or one transaction (see
    `convostore.backends.mysql.connection`). Open it with `open`, which creates the
    database if absent and migrates its schema.

    How vectors are kept and searched is chosen at open (``vectors``): through the
    shared `VectorCache` and the commit-ordered change feed (`vector_feed`), by a scan,
    or with MariaDB 11.7+'s graph (`native_vectors`), as the URL's ``vector_search``
    and the server allow.

    A URL listing several nodes of a Galera cluster: every connection goes to one node
    (``node``), the first of the list that answers and is ready when the store opens;
    when a connection to it is lost (or it stops being ready), the next connections go
    to the first node after it in the list that is (`_fail_over`). One node takes the
    store's writes, so its transactions never lose certification to each other.
    """

    statements = sql.STATEMENTS
    driver = DRIVER
    key_statements = sql.KEY_STATEMENTS
    writes = sql.WRITES
    embeddings = sql.EMBEDDINGS
    appends = sql.APPENDS
    reads = sql.READS
    search = sql.SEARCH
    text_query = staticmethod(sql.fulltext_query)
    vectors: vector_feed.FeedVectors

    def __init__(self, target: MySQLTarget) -> None:
        super().__init__(target.where)
        self.target = target
        self.retries = target.deadlock_retries
        self.facts = ServerFacts("mariadb", (), "utf8mb4_nopad_bin")
        self.capabilities = interface.Capabilities(
            persistent=True, full_text_index=True, cross_process=True
        )
        self.vectors = vector_feed.FeedVectors(target)
        self.node = target.nodes[0]
        self._pool: Pool | None = None
        self._closed = False
        self._moving = asyncio.Lock()

    @classmethod
    async def open(cls, url: str, **options: Any) -> Self:
        """Connect to the database ``url`` names (see `parse_mysql_url`), create it if
        absent and migrate it to this version's schema, then open the pool."""
        backend = cls(target_of(parse_mysql_url, url, options, "MySQL"))
        with DRIVER.translated(backend.target.where):
            if len(backend.target.nodes) > 1:
                backend.node = await ready_node(backend.target, backend.node)
            target = backend.target.on_node(backend.node)
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
        self.event_cache.clear()
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
        if self._pool is not None:
            await self._pool.clear()
            if len(self.target.nodes) > 1:
                await self._fail_over()

    async def _fail_over(self) -> None:
        """Point the pool's next connections at the first node, from the current one on,
        that answers and is ready (the current one if none is)."""
        lost = self.node
        async with self._moving:
            if self.node != lost or self._pool is None:
                return  # Another caller moved the store while this one waited.
            node = await ready_node(self.target, lost)
            # asyncmy's pool opens each new connection with these arguments.
            arguments: dict[str, Any] = self._pool._conn_kwargs  # type: ignore[attr-defined]
            arguments.update(host=node[0], port=node[1])
            self.node = node
            if node != lost:
                log.warning("%s: node %s:%s lost, now on %s:%s", self._where, *lost, *node)

    def _check(self, values: Iterable[Any], what: str) -> None:
        check_size(values, self.facts.max_packet, what)

    def _read_snapshot(self, connection: Connection) -> AbstractAsyncContextManager[None]:
        return snapshot(connection)


async def ready_node(target: MySQLTarget, first: tuple[str, int]) -> tuple[str, int]:
    """The first of ``target``'s nodes, from ``first`` on (in the URL's order, wrapping
    around), that accepts a connection and takes statements (`node_ready`); ``first``
    when none does (its connections then fail as they would have)."""
    nodes = target.nodes
    start = nodes.index(first)
    probe_timeout = min(target.connect_timeout, _PROBE_TIMEOUT_S)
    for node in nodes[start:] + nodes[:start]:
        candidate = dataclasses.replace(target.on_node(node), connect_timeout=probe_timeout)
        try:
            async with asyncio.timeout(probe_timeout + 1):
                connection = await open_connection(candidate, None)
                try:
                    if await node_ready(connection):
                        return node
                finally:
                    connection.close()
        except (*DRIVER.exceptions, TimeoutError):
            continue
    return first


def _drop_sockets(pool: Pool) -> None:
    """Close the sockets of ``pool``'s connections now (a store collected without
    `close`; the pool's own fields are read)."""
    connections = (*getattr(pool, "_free", ()), *getattr(pool, "_used", ()))
    abort_transports(getattr(connection, "_transport", None) for connection in connections)
