"""`falkordb://`: FalkorDB, through the ``falkordb`` client's asyncio API and a pool of
connections, on the Cypher layer of `convostore.backends.cypher` (its FalkorDB dialect).

- `store`: `FalkorDBBackend`: connections, running a query, where the driver's errors end.
- `schema`: the versioned migrations (range and full-text indexes) and how the graph's
  indexes are read (see `convostore.backends.cypher.schema`).
- `url`: ``falkordb://`` and ``falkordbs://`` URLs and their options.

The client is the ``falkordb`` extra; without it, importing this package raises
`BackendUnavailableError` naming the extra.
"""

from convostore.backends.registry import require_driver

require_driver("FalkorDB", "falkordb", "falkordb", "redis")

from convostore.backends.falkordb.schema import MIGRATIONS, SCHEMA_VERSION  # noqa: E402
from convostore.backends.falkordb.store import FalkorDBBackend  # noqa: E402
from convostore.backends.falkordb.url import FalkorDBTarget, parse_falkordb_url  # noqa: E402

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "FalkorDBBackend",
    "FalkorDBTarget",
    "parse_falkordb_url",
]
