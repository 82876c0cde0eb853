"""`falkordb://`: FalkorDB, through the ``falkordb`` client's asyncio API and a pool of
connections, on the Cypher layer of `convostore.backends.cypher` (its FalkorDB dialect).

- `store`: `FalkorDBBackend`: connections, running a query, where the driver's errors end.
- `schema`: the versioned migrations (range, full-text and vector indexes) applied at
  connect, and the metadata index's keys (added and backfilled, or dropped).
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
