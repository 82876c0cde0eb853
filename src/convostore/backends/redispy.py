"""What the backends on redis-py share (Redis and Valkey, FalkorDB): how a pool of
connections to one server is opened from a URL's target."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import redis.asyncio as aioredis

__all__ = ["ClientTarget", "connection_pool"]


class ClientTarget(Protocol):
    """The fields of a URL's target that say how its connections are opened (the URL
    options of the same names)."""

    @property
    def username(self) -> str | None: ...
    @property
    def password(self) -> str | None: ...
    @property
    def tls(self) -> bool: ...
    @property
    def pool_max_size(self) -> int: ...
    @property
    def connect_timeout(self) -> float: ...
    @property
    def socket_timeout(self) -> float | None: ...
    @property
    def ssl(self) -> Mapping[str, str]: ...


def connection_pool(
    target: ClientTarget,
    host: str,
    port: int,
    *,
    timeout: float,
    decode_responses: bool,
    db: int = 0,
) -> aioredis.BlockingConnectionPool:
    """A pool of ``target``'s connections to the server at ``host``:``port`` (its
    database ``db``), in RESP2; an operation waits ``timeout`` seconds for a free
    connection."""
    return aioredis.BlockingConnectionPool(
        host=host,
        port=port,
        db=db,
        username=target.username,
        password=target.password,
        max_connections=target.pool_max_size,
        timeout=timeout,
        socket_connect_timeout=target.connect_timeout,
        socket_timeout=target.socket_timeout,
        decode_responses=decode_responses,
        protocol=2,
        client_name="convostore",
        connection_class=aioredis.SSLConnection if target.tls else aioredis.Connection,
        **target.ssl,
    )
