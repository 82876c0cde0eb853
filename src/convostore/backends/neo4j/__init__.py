"""``neo4j://``, ``neo4j+s://``, ``bolt://``, ``bolt+s://``: Neo4j 5.13 or newer, through
the official ``neo4j`` driver's async API, on the Cypher layer of
`convostore.backends.cypher` (its queries, with Neo4j's dialect).

- `store`: `Neo4jBackend`: the driver, running a query in a managed transaction, where
  the driver's errors end.
- `schema`: the versioned migrations (constraints, range and full-text indexes) and
  how the database's indexes are read (see `convostore.backends.cypher.schema`).
- `dialect`: what Neo4j spells its own way.
- `url`: the URLs and their options.

The driver is the ``neo4j`` extra; without it, importing this package raises
`BackendUnavailableError` naming the extra.
"""

from convostore.backends.registry import require_driver

require_driver("Neo4j", "neo4j", "neo4j")

from convostore.backends.neo4j.schema import MIGRATIONS, SCHEMA_VERSION  # noqa: E402
from convostore.backends.neo4j.store import Neo4jBackend  # noqa: E402
from convostore.backends.neo4j.url import Neo4jTarget, parse_neo4j_url  # noqa: E402

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Neo4jBackend", "Neo4jTarget", "parse_neo4j_url"]
