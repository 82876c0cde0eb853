"""MySQL and MariaDB URLs: the server, the database, and convostore's options.

``mysql://user:password@host:port/database?pool_max_size=20&ssl=verify_identity``
(also ``mariadb://``; ``mysql+asyncmy://`` and ``mariadb+asyncmy://`` name the driver).
Several hosts, ``mysql://user@host1:port1,host2:port2,host3:port3/database``, are the
nodes of one Galera cluster in order of preference: the store uses the first that is
up and ready, and moves to the next when that one is lost.
"""

from __future__ import annotations

import re
import ssl as tls
from dataclasses import dataclass, replace
from typing import Final, Literal, get_args
from urllib.parse import SplitResult, unquote

from convostore.backends.urls import (
    POOL_OPTIONS,
    Parse,
    check_pool,
    one_of,
    optional_text,
    seconds,
    server_address,
    split,
    whole,
    with_options,
)
from convostore.errors import InvalidArgumentError

__all__ = [
    "DATABASE_NAME",
    "SCHEMES",
    "VECTOR_SEARCHES",
    "MySQLTarget",
    "SslMode",
    "VectorSearch",
    "parse_mysql_url",
]

SCHEMES: Final = ("mysql", "mariadb", "mysql+asyncmy", "mariadb+asyncmy")
DEFAULT_PORT: Final = 3306
# The database names convostore accepts: quoted as an identifier, never as a value.
DATABASE_NAME: Final = re.compile(r"[A-Za-z0-9_]{1,64}")
SslMode = Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"]
VectorSearch = Literal["cache", "native", "scan"]
VECTOR_SEARCHES: Final[tuple[VectorSearch, ...]] = get_args(VectorSearch)
# Each mode by its name, and false and true for the two it stands for.
_SSL_MODES: Final[dict[str, SslMode]] = {
    **{mode: mode for mode in get_args(SslMode)},
    "false": "disabled",
    "true": "required",
}
_MAX_RETRIES = 100
_OPTIONS: Final[dict[str, Parse]] = {
    **POOL_OPTIONS,
    "connect_timeout": seconds,
    "deadlock_retries": whole(0, _MAX_RETRIES),
    "ssl": one_of(_SSL_MODES),
    "ssl_ca": optional_text,
    "unix_socket": optional_text,
    "vector_search": one_of({choice: choice for choice in VECTOR_SEARCHES}),
}


@dataclass(frozen=True, slots=True)
class MySQLTarget:
    """Where a store's tables are and how its connections are made.

    - ``database``: the database holding convostore's tables (created at connect if
      absent and the user may).
    - ``pool_min_size`` / ``pool_max_size``: connections kept open / opened at most.
    - ``pool_timeout``: seconds an operation waits for a free connection.
    - ``connect_timeout``: seconds a new connection may take.
    - ``ssl``: ``disabled`` (default), ``preferred``, ``required`` (encrypted, the
      certificate not checked), ``verify_ca``, ``verify_identity`` (checked against
      ``ssl_ca`` or the system's CAs, and the host name too).
    - ``deadlock_retries``: how many times a transaction InnoDB chose as a deadlock
      victim, or that waited too long for a lock, is run again before it fails.
    - ``vector_search``: ``cache`` (default): the vectors kept in memory in compact
      form, following the database's change feed (`convostore.backends.sql.vector_cache`);
      ``native``: MariaDB 11.7+'s own vector index, built and searched (elsewhere, the
      cache); ``scan``: every search reads the vectors in scope from the database.
    """

    host: str
    port: int
    user: str | None
    password: str | None
    database: str
    unix_socket: str | None = None
    pool_min_size: int = 1
    pool_max_size: int = 10
    pool_timeout: float = 30.0
    connect_timeout: float = 10.0
    ssl: SslMode = "disabled"
    ssl_ca: str | None = None
    deadlock_retries: int = 5
    vector_search: VectorSearch = "cache"
    # The other nodes of a Galera cluster the URL lists after ``host:port``, in order.
    other_nodes: tuple[tuple[str, int], ...] = ()

    @property
    def nodes(self) -> tuple[tuple[str, int], ...]:
        """Every node the URL lists, in its order (one for a lone server)."""
        return ((self.host, self.port), *self.other_nodes)

    @property
    def where(self) -> str:
        """The server and database, for messages (never the password)."""
        place = self.unix_socket or ",".join(f"{host}:{port}" for host, port in self.nodes)
        return f"MySQL {place}/{self.database}"

    def on_node(self, node: tuple[str, int]) -> MySQLTarget:
        """This target with ``node`` (one of `nodes`) first, the others after it in
        their order."""
        nodes = self.nodes
        start = nodes.index(node)
        host, port = node
        rotated = nodes[start + 1 :] + nodes[:start]
        return replace(self, host=host, port=port, other_nodes=rotated)

    def ssl_context(self) -> tls.SSLContext | None:
        """The TLS context the connections use, or None for none."""
        if self.ssl == "disabled":
            return None
        context = tls.create_default_context(cafile=self.ssl_ca)
        if self.ssl in ("preferred", "required"):
            context.check_hostname = False
            context.verify_mode = tls.CERT_NONE
        elif self.ssl == "verify_ca":
            context.check_hostname = False
        return context


def parse_mysql_url(url: str) -> MySQLTarget:
    """The target of a ``mysql://`` or ``mariadb://`` URL. Query options: the fields of
    `MySQLTarget` after ``database`` (``ssl`` also takes false and true; ``unix_socket``
    is used instead of host and port; ``deadlock_retries`` is 0..100)."""
    parts = split(url, SCHEMES, "MySQL")
    database = unquote(parts.path.lstrip("/"))
    if not DATABASE_NAME.fullmatch(database):
        raise InvalidArgumentError(
            f"a MySQL URL must name its database as [A-Za-z0-9_]{{1,64}}, not {database!r}"
        )
    (host, port), *others = _nodes(parts)
    first = parts._replace(netloc=parts.netloc.partition(",")[0])
    _, _, user, password = server_address(first, DEFAULT_PORT, "MySQL")
    target = MySQLTarget(host, port, user, password, database, other_nodes=tuple(others))
    target = with_options(target, parts.query, _OPTIONS, "the MySQL URL")
    check_pool(target.pool_min_size, target.pool_max_size)
    if others and target.unix_socket is not None:
        raise InvalidArgumentError("a MySQL URL with several hosts cannot name a unix_socket")
    return target


def _nodes(parts: SplitResult) -> list[tuple[str, int]]:
    """The host and port of each node the URL lists (``h1:p1,h2:p2``), in order."""
    credentials, at, hosts = parts.netloc.rpartition("@")
    nodes = []
    for host in hosts.split(","):
        one = parts._replace(netloc=f"{credentials}{at}{host}")
        name, port, _, _ = server_address(one, DEFAULT_PORT, "MySQL")
        nodes.append((name, port))
    if len(set(nodes)) != len(nodes):
        raise InvalidArgumentError("a MySQL URL lists the same host twice")
    return nodes
