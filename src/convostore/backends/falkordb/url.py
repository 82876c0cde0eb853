"""FalkorDB URLs: ``falkordb://[user:password@]host[:port][/graph][?options]``, and
``falkordbs://`` for TLS.

The graph name defaults to ``convostore``. Options:

- ``pool_max_size``: connections opened at most (default 16);
- ``pool_timeout``: seconds an operation waits for a free connection (default 30);
- ``connect_timeout``: seconds to open a connection (default 10);
- ``socket_timeout``: seconds to wait for a reply (default none: a query may run long);
- with ``falkordbs://``: ``ssl_ca_certs`` (a CA bundle file), ``ssl_certfile`` and
  ``ssl_keyfile`` (a client certificate), ``ssl_cert_reqs`` (``required``, the
  default, ``optional`` or ``none``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Final
from urllib.parse import unquote, urlsplit

from convostore.backends.cypher.url import POOL_OPTIONS
from convostore.backends.urls import Parse, seconds, server_address, tls_options, with_options
from convostore.errors import InvalidArgumentError

__all__ = ["DEFAULT_GRAPH", "DEFAULT_PORT", "SCHEMES", "FalkorDBTarget", "parse_falkordb_url"]

SCHEMES: Final = ("falkordb", "falkordbs")
DEFAULT_GRAPH: Final = "convostore"
DEFAULT_PORT: Final = 6379
# A graph is a Redis key; convostore keeps to names that need no quoting anywhere.
GRAPH_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}")
_OPTIONS: Final[dict[str, Parse]] = {**POOL_OPTIONS, "socket_timeout": seconds}


@dataclass(frozen=True, slots=True)
class FalkorDBTarget:
    """Where a store's graph is and how its connections are opened."""

    host: str = "localhost"
    port: int = DEFAULT_PORT
    graph: str = DEFAULT_GRAPH
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    pool_max_size: int = 16
    pool_timeout: float = 30.0
    connect_timeout: float = 10.0
    socket_timeout: float | None = None
    ssl: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """The server and graph, for messages (never the password)."""
        scheme = "falkordbs" if self.tls else "falkordb"
        return f"FalkorDB {scheme}://{self.host}:{self.port}/{self.graph}"


def parse_falkordb_url(url: str) -> FalkorDBTarget:
    """The target of a ``falkordb://`` or ``falkordbs://`` URL (see the module)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidArgumentError(f"not a FalkorDB URL (falkordb:// or falkordbs://): {scheme!r}")
    host, port, username, password = server_address(parts, DEFAULT_PORT, "FalkorDB")
    graph = unquote(parts.path.lstrip("/")) or DEFAULT_GRAPH
    if not GRAPH_NAME.fullmatch(graph):
        raise InvalidArgumentError(
            f"a graph name must match [A-Za-z0-9_][A-Za-z0-9_.:-]{{0,127}}, not {graph!r}"
        )
    target = FalkorDBTarget(host, port, graph, username, password, tls=scheme == "falkordbs")
    given: list[tuple[str, str]] = []
    target = with_options(target, parts.query, _OPTIONS, "the FalkorDB URL", given)
    ssl = tls_options(given, target.tls, "the FalkorDB URL", "a falkordbs:// (TLS) URL")
    return replace(target, ssl=ssl)
