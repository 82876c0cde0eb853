"""`mysql://` and `mariadb://`: MySQL 8 or MariaDB 10.6 and newer, on asyncmy's asyncio
driver and its pool. Vectors are searched through the shared vector cache, kept current
by a change feed in commit order (or by MariaDB 11.7+'s own index, or an exact scan: the
URL's ``vector_search``); text search runs on a FULLTEXT index.

What every SQL backend shares (`convostore.backends.sql`) does most of the work: the
statements rendered in MySQL's dialect, the reads of the log, the session writes, the
append, the vector index record and the exact vector search. Here, in the order a call
goes through them:

- `backend`: `MySQLBackend`, a `convostore.backends.sql.aio.AsyncSQLBackend` whose
  primitives each run on one pooled connection, and how a vector search picks its way.
- `connection`: how connections are set up, transactions run and retried; the error
  translation.
- `statements`: MySQL's `Dialect`, the statements only MySQL runs (named constants with
  bound parameters), and the values of the columns only MySQL has.
- `vector_feed` and `native_vectors`: the cache's change feed, MariaDB's own index.
- `schema` and `migrate`: the versioned migrations applied at connect.
- `url`: ``mysql://`` URLs and their options.

The driver is the ``mysql`` extra; without it, importing this package raises
`BackendUnavailableError` naming the extra.
"""

from convostore.errors import BackendUnavailableError

try:
    import asyncmy  # noqa: F401
except ImportError as missing:
    raise BackendUnavailableError(
        "the MySQL/MariaDB backend needs asyncmy: pip install 'convostore[mysql]'"
    ) from missing

from convostore.backends.mysql.backend import MySQLBackend
from convostore.backends.mysql.schema import MIGRATIONS, SCHEMA_VERSION
from convostore.backends.mysql.url import MySQLTarget, parse_mysql_url

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "MySQLBackend", "MySQLTarget", "parse_mysql_url"]
