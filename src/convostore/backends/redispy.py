"""What the backends on redis-py share (Redis and Valkey, FalkorDB): how a pool of
connections to one server is opened from a URL's target, and which of the driver's
errors say that a server cannot be used now."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

__all__ = ["UNAVAILABLE", "ClientTarget", "connection_pool"]

# The driver's errors of a server that cannot be used now: the connection lost or timed
# out, the login refused, the server still loading its files.
UNAVAILABLE: Final = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.AuthenticationError,
    redis_errors.BusyLoadingError,
)


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
    ssl: dict[str, Any] = dict(target.ssl)  # redis-py's options of these names
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
        **ssl,
    )
