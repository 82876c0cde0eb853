"""A Neo4j database's schema: the versioned migrations applied at connect, the metadata
index's keys, and the vector index.

Each migration is a list of DDL statements, each its own transaction (Neo4j runs no
schema change beside writes), each ``IF NOT EXISTS``: stores that connect at once, or a
connect that was interrupted, end with the same schema. Ids are kept unique by
constraints (each backed by a range index), so two writers inserting the same id
cannot both commit. The version is recorded in the one ``ConvostoreSchema`` node once
its migration's indexes are online; a newer version is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from convostore._json import indexable, loads
from convostore.backends.cypher import queries as q
from convostore.backends.cypher.values import metadata_entry
from convostore.backends.migrations import refuse_newer
from convostore.backends.neo4j.dialect import FULLTEXT_INDEX, NEO4J, VECTOR_INDEX
from convostore.backends.spi import Metric, VectorIndexSpec

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "GraphFacts",
    "declare_vector_index",
    "prepare_database",
    "read_pending_migrations",
]

Run = Callable[[str, dict[str, Any]], Awaitable[list[list[Any]]]]
Ddl = Callable[[str], Awaitable[None]]

# The ids kept unique by a constraint; every other looked-up property has a range index.
UNIQUE: Final = (("User", "id"), ("Session", "id"), ("Event", "id"), (q.SCHEMA_LABEL, "key"))
_CONSTRAINT: Final = (
    "CREATE CONSTRAINT convostore_{label}_{prop}_unique IF NOT EXISTS"
    " FOR (n:{label}) REQUIRE n.{prop} IS UNIQUE"
)
# One entry per version: (what it adds, for `read_pending_migrations`; its indexes and
# constraints as (name, DDL)).
MIGRATIONS: Final = (
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
_KEY: Final = {"key": q.SCHEMA_LABEL_KEY}
# How long connect waits for the indexes it created (or found populating) to be online.
INDEX_WAIT_SECONDS: Final = 600
AWAIT_INDEXES: Final = "CALL db.awaitIndexes($seconds)"
# Every index's name, state and configuration.
INDEX_STATES: Final = (
    "SHOW INDEXES YIELD name, state, options RETURN name, state, options.indexConfig"
)


class GraphFacts:
    """What connect read from the database: its vector index (recorded and built)."""

    def __init__(self, vector_index: VectorIndexSpec | None, built: bool) -> None:
        self.vector_index = vector_index
        self.vector_index_built = built


async def read_pending_migrations(run: Run, where: str) -> list[str]:
    """The migrations `prepare_database` would apply, read without writing."""
    rows = await run(q.READ_SCHEMA, _KEY)
    recorded = int(rows[0][0] or 0) if rows else 0
    refuse_newer(recorded, SCHEMA_VERSION, where)
    return [
        f"{number}: {MIGRATIONS[number - 1][0]}"
        for number in range(recorded + 1, SCHEMA_VERSION + 1)
    ]


async def prepare_database(run: Run, ddl: Ddl, where: str) -> GraphFacts:
    """Migrate the database to `SCHEMA_VERSION` and say what vector index it has. A
    newer schema raises `SchemaVersionError` and writes nothing."""
    rows = await run(q.READ_SCHEMA, _KEY)
    version, _, dimensions, metric, model = rows[0] if rows else (None,) * 5
    recorded = int(version or 0)
    refuse_newer(recorded, SCHEMA_VERSION, where)
    states = await run(INDEX_STATES, {})
    existing = {name for name, _, _ in states}
    for _, statements in MIGRATIONS[recorded:]:
        for name, statement in statements:
            if name not in existing:
                await ddl(statement)
    # Indexes build in the background: none is used before it is online (this one's,
    # or one another store created and is still populating).
    if recorded < SCHEMA_VERSION or any(state != "ONLINE" for _, state, _ in states):
        await run(AWAIT_INDEXES, {"seconds": INDEX_WAIT_SECONDS})
    if recorded < SCHEMA_VERSION:
        await run(q.RECORD_VERSION, {**_KEY, "version": SCHEMA_VERSION})
    spec = _spec(dimensions, metric, model)
    built = _vector_shape(states)
    return GraphFacts(spec, spec is not None and built == _shape(spec))


def _spec(dimensions: Any, metric: Any, model: Any) -> VectorIndexSpec | None:
    if model is None:
        return None
    checked: Metric = "euclidean" if metric == "euclidean" else "cosine"
    return VectorIndexSpec(int(dimensions), checked, str(model))


def _shape(spec: VectorIndexSpec) -> tuple[int, str]:
    return spec.dimensions, spec.metric


def _vector_shape(states: list[list[Any]]) -> tuple[int, str] | None:
    """(width, metric) of the vector index among ``states`` (`INDEX_STATES`), or None."""
    for name, _, config in states:
        if name == VECTOR_INDEX:
            config = config or {}
            metric = str(config.get("vector.similarity_function", "cosine")).lower()
            return int(config.get("vector.dimensions", 0)), metric
    return None


async def _indexed_keys(run: Run) -> set[str]:
    rows = await run(q.READ_SCHEMA, _KEY)
    return set(rows[0][1] or ()) if rows else set()


async def indexed_keys(run: Run) -> frozenset[str]:
    """Every key the database indexes now."""
    return frozenset(await _indexed_keys(run))


async def add_indexed_keys(run: Run, keys: frozenset[str]) -> frozenset[str]:
    """Index ``keys`` too, backfilling those not yet indexed (see
    ``queries.ADD_INDEXING_KEYS``: marked first, then backfilled and recorded in one
    transaction); every indexed key."""
    indexed = await _indexed_keys(run)
    added = sorted(keys - indexed)
    if not added:
        return frozenset(indexed)
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
    """Stop indexing ``key`` and drop its entries, in one transaction; False if it was
    not indexed."""
    rows = await run(q.REMOVE_INDEXED_KEY, {**_KEY, "name": key, "prefix": f"{key}="})
    return bool(rows and rows[0][0])


async def read_vector_index(run: Run) -> VectorIndexSpec | None:
    rows = await run(q.READ_SCHEMA, _KEY)
    return _spec(*rows[0][2:]) if rows else None


async def declare_vector_index(
    run: Run, ddl: Ddl, spec: VectorIndexSpec, *, replace: bool
) -> VectorIndexSpec:
    """Record ``spec`` if none is recorded (with ``replace``, in place of what is), then
    make the database's vector index the recorded one's width and metric (dropped and
    built again when they changed), and wait until it is online. Returns what is
    recorded. Stored vectors are never dropped."""
    parameters = {
        **_KEY,
        "replace": replace,
        "dimensions": spec.dimensions,
        "metric": spec.metric,
        "model": spec.model,
    }
    await run(q.RECORD_VECTOR_INDEX, parameters)
    recorded = await read_vector_index(run)
    assert recorded is not None
    built = _vector_shape(await run(INDEX_STATES, {}))
    if built is not None and built != _shape(recorded):
        await ddl(NEO4J.drop_vector_index(*q.VECTOR))
        built = None
    if built is None:
        await ddl(NEO4J.vector_index(*q.VECTOR, recorded.dimensions, recorded.metric))
    await run(AWAIT_INDEXES, {"seconds": INDEX_WAIT_SECONDS})
    return recorded
