"""A graph's migrations on FalkorDB, and the indexes it has (see
`convostore.backends.cypher.schema` for how they are applied).

FalkorDB has no DDL transaction: each index is created by a query of its own. It builds
an index in the background, and a query of a vector index under construction fails, so
the vector index is asked only once ``db.indexes()`` calls it operational.
"""

from __future__ import annotations

from typing import Any, Final

from convostore.backends import spi
from convostore.backends.cypher import queries as q
from convostore.backends.cypher.dialect import FALKORDB
from convostore.backends.cypher.schema import IndexInventory, Migration, Run, metric_of

__all__ = ["INDEX_STATUS", "MIGRATIONS", "SCHEMA_VERSION", "inventory"]


def _key(label: str, prop: str, kind: str) -> str:
    return f"{kind} {label}.{prop}"


def _statement(label: str, prop: str, kind: str) -> tuple[str, str]:
    ddl = FALKORDB.range_index if kind == "RANGE" else FALKORDB.fulltext_index
    return _key(label, prop, kind), ddl(label, prop)


# One entry per version.
_INDEXES: Final = (
    *[(label, prop, "RANGE") for label, prop in q.INDEXED_PROPERTIES],
    (*q.FULLTEXT, "FULLTEXT"),
)
MIGRATIONS: Final[tuple[Migration, ...]] = (
    (
        ", ".join(
            f"create {kind.lower()} index on {label}.{prop}" for label, prop, kind in _INDEXES
        ),
        tuple(_statement(*index) for index in _INDEXES),
    ),
)
SCHEMA_VERSION: Final = len(MIGRATIONS)
# Each label's indexes: their kinds and options by property, and one status for them
# all ("OPERATIONAL", or "[Indexing] n/m: UNDER CONSTRUCTION" while one is built).
INDEX_STATUS: Final = (
    "CALL db.indexes() YIELD label, types, options, status RETURN label, types, options, status"
)


async def inventory(run: Run) -> IndexInventory:
    """The graph's indexes, as `db.indexes()` gives them."""
    keys: set[str] = set()
    all_built, vector_shape, vector_built = True, None, False
    for label, types, options, status in await run(INDEX_STATUS, {}):
        built = str(status) == "OPERATIONAL"
        all_built = all_built and built
        for prop, kinds in (types or {}).items():
            keys.update(_key(label, prop, kind) for kind in kinds)
            if (label, prop) == q.VECTOR and "VECTOR" in kinds:
                vector_shape = _shape((options or {}).get(prop) or {})
                vector_built = built
    return IndexInventory(frozenset(keys), all_built, vector_shape, vector_built)


def _shape(options: dict[str, Any]) -> tuple[int, spi.Metric]:
    return int(options.get("dimension", 0)), metric_of(options.get("similarityFunction"))
