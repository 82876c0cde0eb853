"""A graph's schema: the versioned migrations applied at connect, the metadata index's
keys, and the vector index.

FalkorDB has no DDL transaction: each index is created by a query of its own, and a
migration only creates what is missing, so connecting stores that race (or a connect
that was interrupted) end with the same indexes. The version is recorded in the
graph's one ``ConvostoreSchema`` node once its migration is complete.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from convostore._json import indexable, loads
from convostore.backends.cypher import queries as q
from convostore.backends.cypher.values import metadata_entry
from convostore.backends.migrations import refuse_newer
from convostore.backends.spi import Metric, VectorIndexSpec

__all__ = [
    "SCHEMA_VERSION",
    "GraphFacts",
    "declare_vector_index",
    "prepare_graph",
    "read_pending_migrations",
]

log = logging.getLogger("convostore.falkordb")

Run = Callable[[str, dict[str, Any]], Awaitable[list[list[Any]]]]
# One entry per version: what version n adds (labels, properties, kinds of index), as
# (label, property, kind) with kind "RANGE" or "FULLTEXT".
MIGRATIONS: Final = (
    (*[(label, prop, "RANGE") for label, prop in q.INDEXED_PROPERTIES], (*q.FULLTEXT, "FULLTEXT")),
)
SCHEMA_VERSION: Final = len(MIGRATIONS)
_KEY: Final = {"key": q.SCHEMA_LABEL_KEY}


class GraphFacts:
    """What connect read from the graph: its vector index (recorded and built)."""

    def __init__(self, vector_index: VectorIndexSpec | None, built: bool) -> None:
        self.vector_index = vector_index
        self.vector_index_built = built


async def indexes(run: Run) -> set[tuple[str, str, str]]:
    """(label, property, kind) of every index the graph has."""
    found: set[tuple[str, str, str]] = set()
    for label, types in await run(q.LIST_INDEXES, {}):
        for prop, kinds in (types or {}).items():
            found.update((label, prop, kind) for kind in kinds)
    return found


async def read_pending_migrations(run: Run, where: str) -> list[str]:
    """The migrations `prepare_graph` would apply, read without writing: a graph with no
    recorded version has them all pending."""
    rows = await run(q.READ_SCHEMA, _KEY)
    recorded = int(rows[0][0] or 0) if rows else 0
    refuse_newer(recorded, SCHEMA_VERSION, where)
    return [
        f"{number}: "
        + ", ".join(
            f"create {kind.lower()} index on {label}.{prop}"
            for label, prop, kind in MIGRATIONS[number - 1]
        )
        for number in range(recorded + 1, SCHEMA_VERSION + 1)
    ]


async def prepare_graph(
    run: Run,
    ddl: Callable[[str], Awaitable[None]],
    queries: q.CypherQueries,
    where: str,
) -> GraphFacts:
    """Migrate the graph to `SCHEMA_VERSION` and say what vector index it has. A newer
    schema raises `SchemaVersionError` and writes nothing. ``ddl`` runs a DDL query,
    taking an index that already exists as done."""
    rows = await run(q.READ_SCHEMA, _KEY)
    version, _, dimensions, metric, model = rows[0]
    recorded = int(version or 0)
    refuse_newer(recorded, SCHEMA_VERSION, where)
    existing = await indexes(run)
    ranges = {(label, prop): ddl_text for label, prop, ddl_text in queries.range_indexes()}
    for migration in MIGRATIONS[:SCHEMA_VERSION]:
        for label, prop, kind in migration:
            if (label, prop, kind) in existing:
                continue
            await ddl(ranges[(label, prop)] if kind == "RANGE" else queries.fulltext_index())
    if recorded < SCHEMA_VERSION:
        await run(q.RECORD_VERSION, {**_KEY, "version": SCHEMA_VERSION})
    spec = None
    if model is not None:
        checked: Metric = "euclidean" if metric == "euclidean" else "cosine"
        spec = VectorIndexSpec(int(dimensions), checked, str(model))
    return GraphFacts(spec, (*q.VECTOR, "VECTOR") in existing)


async def _indexed_keys(run: Run) -> set[str]:
    _, keys, *_ = (await run(q.READ_SCHEMA, _KEY))[0]
    return set(keys or ())


async def indexed_keys(run: Run) -> frozenset[str]:
    """Every key the graph indexes now."""
    return frozenset(await _indexed_keys(run))


async def add_indexed_keys(run: Run, keys: frozenset[str]) -> frozenset[str]:
    """Index ``keys`` too, backfilling those not yet indexed; every indexed key. The keys
    are first marked as being indexed, so every later write indexes them itself; the
    sessions written before are then read and backfilled in one query, which records the
    keys as indexed (a rerun after a failure writes the same)."""
    indexed = await _indexed_keys(run)
    added = sorted(keys - indexed)
    if not added:
        return frozenset(indexed)
    # From here on every write indexes the added keys itself (see q.ADD_INDEXING_KEYS).
    await run(q.ADD_INDEXING_KEYS, {**_KEY, "added": added})
    rows = []
    for session_id, metadata in await run(q.SESSIONS_WITH_METADATA, {}):
        values = loads(metadata)
        new = [
            metadata_entry(name, value)
            for name in added
            if name in values and (value := indexable(values[name])) is not None
        ]
        if new:
            rows.append({"id": session_id, "metadata": metadata, "entries": new})
    prefixes = [f"{name}=" for name in added]
    await run(q.ADD_INDEXED_KEYS, {**_KEY, "added": added, "prefixes": prefixes, "rows": rows})
    return await indexed_keys(run)


async def remove_indexed_key(run: Run, key: str) -> bool:
    """Stop indexing ``key`` and drop its entries, in one query; False if it was not
    indexed. A key an add left marked as being indexed (it stopped before recording it)
    is unmarked too, so writes stop indexing it."""
    rows = await run(q.REMOVE_INDEXED_KEY, {**_KEY, "name": key, "prefix": f"{key}="})
    return bool(rows and rows[0][0])


# Each index's status: "OPERATIONAL", or "[Indexing] n/m: UNDER CONSTRUCTION" while it
# is built (when a query of it fails).
INDEX_STATUS: Final = "CALL db.indexes() YIELD label, types, status RETURN label, types, status"


async def vector_index_operational(run: Run) -> bool:
    """True when the graph's vector index exists and is built (queries of an index
    under construction fail)."""
    for label, types, status in await run(INDEX_STATUS, {}):
        if label == q.VECTOR[0] and "VECTOR" in (types or {}).get(q.VECTOR[1], ()):
            return str(status) == "OPERATIONAL"
    return False


async def read_vector_index(run: Run) -> VectorIndexSpec | None:
    _, _, dimensions, metric, model = (await run(q.READ_SCHEMA, _KEY))[0]
    if model is None:
        return None
    checked: Metric = "euclidean" if metric == "euclidean" else "cosine"
    return VectorIndexSpec(int(dimensions), checked, str(model))


async def declare_vector_index(
    run: Run,
    ddl: Callable[[str], Awaitable[None]],
    queries: q.CypherQueries,
    spec: VectorIndexSpec,
    *,
    replace: bool,
    build: bool = True,
) -> VectorIndexSpec | None:
    """Record ``spec`` if none is recorded (with ``replace``, in place of what is), then
    make the graph's vector index the recorded one's: dropped and built again when it
    changed. Returns the spec of the index the graph now has, None when ``build`` is
    False and none stands (it is built by a later call). Stored vectors are never
    dropped."""
    parameters = {
        **_KEY,
        "replace": replace,
        "dimensions": spec.dimensions,
        "metric": spec.metric,
        "model": spec.model,
    }
    changed = bool(await run(q.RECORD_VECTOR_INDEX, parameters))
    recorded = await read_vector_index(run)
    assert recorded is not None
    built = (*q.VECTOR, "VECTOR") in await indexes(run)
    if built and changed and replace:
        await ddl(queries.drop_vector_index())
        built = False
    if not built:
        if not build:
            return None
        await ddl(queries.vector_index(recorded.dimensions, recorded.metric))
    return recorded
