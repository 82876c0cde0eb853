"""`mysql://` and `mariadb://`: MySQL 8 or MariaDB 10.6 and newer, on asyncmy's asyncio
driver and its pool; text search runs on a FULLTEXT index.

What every SQL backend shares (`convostore.backends.sql`) does most of the work, in
MySQL's dialect (`statements`). `backend` runs it on pooled connections (`connection`:
their setup, transactions and errors); `schema` is the schema and brings a database to
it; `url` reads the URL. Vectors are kept and searched through the shared vector
cache, which follows a change feed in commit order (`vector_feed`), by an exact scan, or
with MariaDB 11.7+'s own index (`native_vectors`), as the URL's ``vector_search`` says.

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
