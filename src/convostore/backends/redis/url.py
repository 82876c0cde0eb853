"""Redis and Valkey URLs.

- ``redis://[user:password@]host[:port][/db][?options]``: one server (``db`` 0 by
  default);
- ``redis+cluster://[user:password@]host:port[,host:port...][?options]``: the seed
  nodes of a cluster (database 0 only);
- ``rediss://`` and ``rediss+cluster://``: the same over TLS; ``valkey://``,
  ``valkey+cluster://``, ``valkeys://``, ``valkeys+cluster://`` are aliases.

Options:

- ``namespace``: the prefix of every key (default ``convostore``), so several stores
  share a server;
- ``buckets``: how many owner buckets a new database has (default 256; fixed when the
  database is first created, later values are ignored);
- ``replicas``: how many replicas must confirm a write on their disk before it returns
  (``WAITAOF``; default 0 on one server, 1 on a cluster);
- ``fsync``: ``yes`` (default): a write returns once it is in the master's fsynced
  append-only file (``WAITAOF 1``); ``no`` waits for nothing (a benchmark's baseline);
- ``wait_timeout``: seconds a write waits for that confirmation (default 5);
- ``vectors``: ``auto`` (default: Redis 8's vector sets where the server has them, else
  this process's vector cache kept by each bucket's change feed), ``scan`` (an exact
  scan of the scope on the server, for every search);
- ``pool_max_size``, ``connect_timeout``, ``socket_timeout``;
- over TLS: ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``, ``ssl_cert_reqs``
  (``required``, ``optional``, ``none``): redis-py's options of the same names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Final
from urllib.parse import unquote, urlsplit

from convostore.backends.urls import (
    Parse,
    one_of,
    redacted,
    seconds,
    tls_options,
    whole,
    with_options,
)
from convostore.errors import InvalidArgumentError

__all__ = ["SCHEMES", "RedisTarget", "parse_redis_url"]

SCHEMES: Final = (
    "redis", "rediss", "redis+cluster", "rediss+cluster",
    "valkey", "valkeys", "valkey+cluster", "valkeys+cluster",
)  # fmt: skip
DEFAULT_PORT: Final = 6379
NAMESPACE: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _namespace(name: str, value: str) -> str:
    if not NAMESPACE.fullmatch(value):
        raise InvalidArgumentError(f"{name} must match [A-Za-z0-9_.-]{{1,64}}, not {value!r}")
    return value


_OPTIONS: Final[dict[str, Parse]] = {
    "namespace": _namespace,
    "buckets": whole(1, 16384),
    "replicas": whole(0, 16),
    "fsync": one_of({"yes": True, "no": False}),
    "wait_timeout": seconds,
    "vectors": one_of({"auto": "auto", "scan": "scan"}),
    "pool_max_size": whole(1, 1000),
    "connect_timeout": seconds,
    "socket_timeout": seconds,
}


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """Where a store's keys are and how its connections are opened."""

    nodes: tuple[tuple[str, int], ...]
    cluster: bool = False
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    namespace: str = "convostore"
    buckets: int = 256
    replicas: int | None = None
    fsync: bool = True
    wait_timeout: float = 5.0
    vectors: str = "auto"
    pool_max_size: int = 64
    connect_timeout: float = 10.0
    socket_timeout: float | None = None
    ssl: dict[str, str] = field(default_factory=dict)

    @property
    def wait_replicas(self) -> int:
        """How many replicas confirm each write."""
        if self.replicas is not None:
            return self.replicas
        return 1 if self.cluster else 0

    @property
    def where(self) -> str:
        """The servers and namespace, for messages (never the password)."""
        kind = "Redis cluster" if self.cluster else "Redis"
        nodes = ",".join(f"{host}:{port}" for host, port in self.nodes)
        return f"{kind} {nodes} namespace {self.namespace!r}"


def _address(text: str, url: str) -> tuple[str, int]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, colon, port = text.rpartition(":")
        if not colon:
            host, port = text, ""
    if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise InvalidArgumentError(f"bad port in the Redis URL {redacted(url)!r}")
    return host or "localhost", int(port) if port else DEFAULT_PORT


def parse_redis_url(url: str) -> RedisTarget:
    """The target of a Redis or Valkey URL (see the module)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidArgumentError(f"not a Redis URL: {redacted(url)!r}")
    cluster = scheme.endswith("+cluster")
    tls = scheme.partition("+")[0] in ("rediss", "valkeys")
    credentials, _, hosts = parts.netloc.rpartition("@")
    username = password = None
    if credentials:
        user, colon, secret = credentials.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    nodes = tuple(_address(text, url) for text in (hosts or "localhost").split(","))
    if len(nodes) > 1 and not cluster:
        raise InvalidArgumentError("several hosts need a redis+cluster:// URL")
    path = parts.path.lstrip("/")
    db = 0
    if path:
        if cluster or not (path.isascii() and path.isdigit()):
            raise InvalidArgumentError(
                "a Redis URL's path is a database number (one server only), not " + repr(path)
            )
        db = int(path)
    target = RedisTarget(nodes, cluster, db, username, password, tls)
    given: list[tuple[str, str]] = []
    target = with_options(target, parts.query, _OPTIONS, "the Redis URL", given)
    ssl = tls_options(given, tls, "the Redis URL", "a TLS (rediss://) URL")
    return replace(target, ssl=ssl)
