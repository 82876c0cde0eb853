"""A database's migrations on Neo4j, and the indexes it has (see
`convostore.backends.cypher.schema` for how they are applied).

Each statement is ``IF NOT EXISTS`` and runs as its own transaction (Neo4j runs no
schema change beside writes). Ids are kept unique by constraints (each backed by a
range index), so two writers inserting the same id cannot both commit. Neo4j builds an
index in the background, and one still populating answers with what it holds so far:
a connect, and a vector index's build, wait until every index is online.
"""

from __future__ import annotations

from typing import Any, Final

from convostore.backends import spi
from convostore.backends.cypher import queries as q
from convostore.backends.cypher.schema import IndexInventory, Migration, Run, metric_of
from convostore.backends.neo4j.dialect import FULLTEXT_INDEX, NEO4J, VECTOR_INDEX

__all__ = [
    "AWAIT_INDEXES",
    "INDEX_STATES",
    "INDEX_WAIT_SECONDS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "inventory",
]

# The ids kept unique by a constraint; every other looked-up property has a range index.
UNIQUE: Final = (("User", "id"), ("Session", "id"), ("Event", "id"), (q.SCHEMA_LABEL, "key"))
_CONSTRAINT: Final = (
    "CREATE CONSTRAINT convostore_{label}_{prop}_unique IF NOT EXISTS"
    " FOR (n:{label}) REQUIRE n.{prop} IS UNIQUE"
)
# One entry per version; each statement's key is the name of what it creates.
MIGRATIONS: Final[tuple[Migration, ...]] = (
    (
        "unique ids, range indexes and the full-text index",
        (
            *[
                (f"convostore_{label}_{prop}_unique", _CONSTRAINT.format(label=label, prop=prop))
                for label, prop in UNIQUE
            ],
            *[
                (f"convostore_{label}_{prop}", NEO4J.range_index(label, prop))
                for label, prop in q.INDEXED_PROPERTIES
                if (label, prop) not in UNIQUE
            ],
            (FULLTEXT_INDEX, NEO4J.fulltext_index(*q.FULLTEXT)),
        ),
    ),
)
SCHEMA_VERSION: Final = len(MIGRATIONS)
# How long a connect, or a vector index's build, waits for the indexes to be online.
INDEX_WAIT_SECONDS: Final = 600
AWAIT_INDEXES: Final = "CALL db.awaitIndexes($seconds)"
# Every index's name, state and configuration.
INDEX_STATES: Final = (
    "SHOW INDEXES YIELD name, state, options RETURN name, state, options.indexConfig"
)


async def inventory(run: Run) -> IndexInventory:
    """The database's indexes (the constraints' included), as SHOW INDEXES gives them."""
    names: set[str] = set()
    all_built, vector_shape, vector_built = True, None, False
    for name, state, config in await run(INDEX_STATES, {}):
        names.add(name)
        online = state == "ONLINE"
        all_built = all_built and online
        if name == VECTOR_INDEX:
            vector_shape = _shape(config or {})
            vector_built = online
    return IndexInventory(frozenset(names), all_built, vector_shape, vector_built)


def _shape(config: dict[str, Any]) -> tuple[int, spi.Metric]:
    dimensions = int(config.get("vector.dimensions", 0))
    return dimensions, metric_of(config.get("vector.similarity_function"))
