"""`sqlite://`: the embedded default, on the standard library's `sqlite3`.

Modules, in the order a call goes through them:

- `backend`: `SQLiteBackend`, whose primitives each hand one function to one thread.
- `worker`: the threads that own connections, and where sqlite3 errors are translated.
- `connection`: how connections are set up; the write and read transactions.
- `operations`: the functions the threads run, one per primitive.
- `search`: the same for vector and text search and re-embedding.
- `statements`: every statement, as named constants with bound parameters.
- `rows`: values to parameters, and rows back to values.
- `schema`: the versioned migrations applied at connect.
- `url`: ``sqlite://`` URLs and their options.
"""

from convostore.backends.sqlite.backend import SQLiteBackend
from convostore.backends.sqlite.schema import MIGRATIONS, SCHEMA_VERSION
from convostore.backends.sqlite.url import SQLiteTarget, parse_sqlite_url

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteBackend", "SQLiteTarget", "parse_sqlite_url"]
