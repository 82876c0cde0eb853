"""Neo4j URLs: ``neo4j://[user:password@]host[:port][/database][?options]``, and
``neo4j+s://`` (TLS), ``bolt://`` (one server, no routing) and ``bolt+s://``.

The user and password log in (basic authentication; none: no authentication), and the
path names the database (default: the server's default database). Options:

- ``pool_max_size``: connections the driver opens at most (default 100, its own);
- ``pool_timeout``: seconds an operation waits for a free connection (default 60);
- ``connect_timeout``: seconds to open a connection (default 30);
- ``retry_time``: seconds a transaction is tried again for after a transient error
  (a deadlock, a leader switch; default 30).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote

from convostore.backends.cypher.url import POOL_OPTIONS
from convostore.backends.urls import Parse, seconds, server_address, split, with_options
from convostore.errors import InvalidArgumentError

__all__ = ["DEFAULT_PORT", "SCHEMES", "Neo4jTarget", "parse_neo4j_url"]

SCHEMES: Final = ("neo4j", "neo4j+s", "bolt", "bolt+s")
DEFAULT_PORT: Final = 7687
# Neo4j's own rule for database names (ASCII letters, digits, dots and dashes).
DATABASE_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9.-]{2,62}")
_OPTIONS: Final[dict[str, Parse]] = {**POOL_OPTIONS, "retry_time": seconds}


@dataclass(frozen=True, slots=True)
class Neo4jTarget:
    """Where a store's database is and how the driver connects."""

    scheme: str = "neo4j"
    host: str = "localhost"
    port: int = DEFAULT_PORT
    database: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    pool_max_size: int = 100
    pool_timeout: float = 60.0
    connect_timeout: float = 30.0
    retry_time: float = 30.0

    @property
    def uri(self) -> str:
        """The driver's URI: scheme, host and port only."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def where(self) -> str:
        """The server and database, for messages (never the password)."""
        return f"Neo4j {self.uri}/{self.database or '(default database)'}"


def parse_neo4j_url(url: str) -> Neo4jTarget:
    """The target of a ``neo4j://``, ``neo4j+s://``, ``bolt://`` or ``bolt+s://`` URL."""
    parts = split(url, SCHEMES, "Neo4j")
    host, port, username, password = server_address(parts, DEFAULT_PORT, "Neo4j")
    database = unquote(parts.path.lstrip("/")) or None
    if database is not None and not DATABASE_NAME.fullmatch(database):
        raise InvalidArgumentError(
            f"a Neo4j database name must match [A-Za-z][A-Za-z0-9.-]{{2,62}}, not {database!r}"
        )
    if password is not None and username is None:
        raise InvalidArgumentError("a password in a Neo4j URL needs a user")
    target = Neo4jTarget(
        parts.scheme.lower(), host, port, database, username, username and (password or "")
    )
    return with_options(target, parts.query, _OPTIONS, "the Neo4j URL")
