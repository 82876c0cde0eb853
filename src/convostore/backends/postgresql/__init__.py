"""`postgresql://`: PostgreSQL 14 or newer, on psycopg 3's async API and its pool, with
pgvector's HNSW index for vector search where the extension is installed.

Modules, in the order a call goes through them:

- `backend`: `PostgreSQLBackend`, whose primitives each run one function on one pooled
  connection, and where psycopg's errors end.
- `connection`: how connections are opened and set up; the error translation.
- `operations`: the functions, one per primitive of the log and sessions.
- `search`: vector and text search, the vector index and re-embedding.
- `statements`: every statement, as named constants with bound parameters.
- `rows`: values to parameters, and rows back to values.
- `schema`: the versioned migrations applied at connect.
- `url`: ``postgresql://`` URLs and their options.

The driver is the ``postgresql`` extra; without it, importing this package raises
`BackendUnavailableError` naming the extra.
"""

from convostore.backends.registry import require_driver

require_driver("PostgreSQL", "postgresql", "psycopg", "psycopg_pool")

from convostore.backends.postgresql.backend import PostgreSQLBackend  # noqa: E402
from convostore.backends.postgresql.schema import MIGRATIONS, SCHEMA_VERSION  # noqa: E402
from convostore.backends.postgresql.url import (  # noqa: E402
    PostgreSQLTarget,
    parse_postgresql_url,
)

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PostgreSQLBackend",
    "PostgreSQLTarget",
    "parse_postgresql_url",
]
