"""PostgreSQL URLs: the server libpq connects to, and convostore's own options.

``postgresql://user:password@host:port/database?schema=chat&pool_max_size=20`` (also
``postgres://`` and ``postgresql+psycopg://``). convostore's options are taken out of the
query; every other query parameter (``sslmode``, ``connect_timeout``, ...) goes to libpq
as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Final
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from convostore.backends.urls import (
    POOL_OPTIONS,
    Parse,
    check_pool,
    split,
    whole,
    with_options,
)
from convostore.errors import InvalidArgumentError

__all__ = [
    "DEFAULT_SCHEMA",
    "IDENTIFIER",
    "SCHEMES",
    "PostgreSQLTarget",
    "parse_postgresql_url",
]

SCHEMES: Final = ("postgresql", "postgres", "postgresql+psycopg")
DEFAULT_SCHEMA: Final = "public"
# The names convostore accepts for its schema: lowercase, unquoted-safe, at most 63
# bytes (PostgreSQL's limit). Composed into SQL only as `psycopg.sql.Identifier`.
IDENTIFIER: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MAX_EF_SEARCH = 1000  # pgvector's own limit


def _schema(name: str, value: str) -> str:
    if not IDENTIFIER.fullmatch(value):
        raise InvalidArgumentError(f"schema must match [a-z_][a-z0-9_]{{0,62}}, not {value!r}")
    if value == "information_schema" or value.startswith("pg_"):
        raise InvalidArgumentError(
            f"schema {value!r} belongs to PostgreSQL itself (information_schema and "
            "pg_* are the system's): name a schema of your own"
        )
    return value


# convostore's own options; every other one goes to libpq.
_OPTIONS: Final[dict[str, Parse]] = {
    "schema": _schema,
    **POOL_OPTIONS,
    "ef_search": whole(1, _MAX_EF_SEARCH),
}


@dataclass(frozen=True, slots=True)
class PostgreSQLTarget:
    """Where a store's tables are and how its pool is sized.

    - ``conninfo``: the URL libpq is given, without convostore's options.
    - ``schema``: the schema holding convostore's tables (created at connect if absent).
    - ``pool_min_size`` / ``pool_max_size``: connections kept open / opened at most.
    - ``pool_timeout``: seconds an operation waits for a free connection.
    - ``ef_search``: pgvector's HNSW search breadth (more: better recall, slower);
      a search for k hits uses at least k.
    """

    conninfo: str
    schema: str = DEFAULT_SCHEMA
    pool_min_size: int = 1
    pool_max_size: int = 10
    pool_timeout: float = 30.0
    ef_search: int = 60

    @property
    def where(self) -> str:
        """The server and database, for messages (never the password)."""
        parts = urlsplit(self.conninfo)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
        return f"PostgreSQL {host}{port}{parts.path or '/'} (schema {self.schema})"


def parse_postgresql_url(url: str) -> PostgreSQLTarget:
    """The target of a ``postgresql://`` URL. convostore's query options:

    - ``schema``: ``[a-z_][a-z0-9_]{0,62}``, default ``public``; not a system schema
      (``information_schema``, ``pg_*``);
    - ``pool_min_size`` (default 1), ``pool_max_size`` (default 10);
    - ``pool_timeout``: seconds, default 30;
    - ``ef_search``: 1..1000, default 60 (recall@10 0.97 on real text; see
      ``benchmarks/recall.py``).
    """
    parts = split(url, SCHEMES, "PostgreSQL")
    passed_on: list[tuple[str, str]] = []
    target = with_options(
        PostgreSQLTarget(""), parts.query, _OPTIONS, "the PostgreSQL URL", passed_on
    )
    check_pool(target.pool_min_size, target.pool_max_size)
    if not any(name == "application_name" for name, _ in passed_on):
        passed_on.append(("application_name", "convostore"))
    # Percent-encoded throughout: libpq reads no "+" as a space.
    query_text = urlencode(passed_on, quote_via=quote)
    conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, query_text, ""))
    return replace(target, conninfo=conninfo)
