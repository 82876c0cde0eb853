"""`mysql://` and `mariadb://`: MySQL 8 or MariaDB 10.6 and newer, on asyncmy's asyncio
driver and its pool. Vector search is an exact scan (neither server has a vector index
in those versions); text search runs on a FULLTEXT index.

Modules, in the order a call goes through them:

- `backend`: `MySQLBackend`, a `convostore.backends.sql.SQLBackend` whose own
  primitives each run one function on one pooled connection, and where the driver's
  errors end.
- `connection`: how connections are set up, transactions run and retried; the error
  translation.
- `operations`: the functions, one per primitive of the log and sessions.
- `search`: vector and text search, the vector index record and re-embedding.
- `statements`: MySQL's `Dialect` of the shared statements, and the statements only
  MySQL runs, as named constants with bound parameters.
- `rows`: the values of the columns only MySQL has (see `convostore.backends.sql.values`
  for the rest).
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
