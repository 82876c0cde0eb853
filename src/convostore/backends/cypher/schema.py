"""A graph's schema, for every graph backend: its record (the one ``ConvostoreSchema``
node: the schema version, the metadata keys indexed and the vector index declared),
its versioned migrations, and the metadata index's keys (added and backfilled, or
dropped).

A migration is a list of index (or constraint) statements, each with the key under
which `IndexInventory` lists what it creates. Neither server runs a schema change in a
transaction beside writes, so each statement runs on its own, and a migration creates
only what is missing: stores that connect at once, or a connect that was interrupted,
end with the same schema. The version is recorded once its migration is complete; a
newer one is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from convostore._json import indexable, loads
from convostore.backends import spi
from convostore.backends.cypher import queries as q
from convostore.backends.cypher.values import metadata_entry
from convostore.backends.migrations import refuse_newer

__all__ = [
    "IndexInventory",
    "Migration",
    "Record",
    "Run",
    "add_indexed_keys",
    "indexed_keys",
    "metric_of",
    "migrate",
    "pending_migrations",
    "read_record",
    "record_vector_index",
    "remove_indexed_key",
    "shape",
]

Run = Callable[[str, dict[str, Any]], Awaitable[list[list[Any]]]]
# (what it adds, for ``convostore migrate --dry-run``; its statements as (key, DDL)).
Migration = tuple[str, tuple[tuple[str, str], ...]]
_KEY: Final = {"key": q.SCHEMA_LABEL_KEY}


@dataclass(frozen=True, slots=True)
class Record:
    """What the graph's schema node records (all empty on a new graph)."""

    version: int
    indexed_keys: frozenset[str]
    vector_index: spi.VectorIndexSpec | None


@dataclass(frozen=True, slots=True)
class IndexInventory:
    """The indexes a graph has, as a backend reads them from its server: the key of
    each (as its migrations name them), whether every one is built (none populating),
    and the vector index's width and metric (None: there is none) and whether it is
    built."""

    keys: frozenset[str]
    all_built: bool
    vector_shape: tuple[int, spi.Metric] | None
    vector_built: bool


def shape(spec: spi.VectorIndexSpec) -> tuple[int, spi.Metric]:
    """What a built vector index has of a declared one: its width and metric."""
    return spec.dimensions, spec.metric


def metric_of(name: Any) -> spi.Metric:
    return "euclidean" if str(name).lower() == "euclidean" else "cosine"


async def read_record(run: Run) -> Record:
    rows = await run(q.READ_SCHEMA, _KEY)
    row: list[Any] = rows[0] if rows else [None] * 5
    version, keys, dimensions, metric, model = row
    spec = None if model is None else spi.VectorIndexSpec(int(dimensions), metric_of(metric), model)
    return Record(int(version or 0), frozenset(keys or ()), spec)


async def pending_migrations(run: Run, migrations: Sequence[Migration], where: str) -> list[str]:
    """The migrations a connect would apply, read without writing: a graph with no
    recorded version has them all pending."""
    recorded = (await read_record(run)).version
    refuse_newer(recorded, len(migrations), where)
    return [
        f"{number}: {migrations[number - 1][0]}"
        for number in range(recorded + 1, len(migrations) + 1)
    ]


async def migrate(
    run: Run,
    ddl: Callable[[str], Awaitable[None]],
    inventory: IndexInventory,
    migrations: Sequence[Migration],
    where: str,
) -> tuple[Record, bool]:
    """Create what ``migrations`` hold and ``inventory`` lacks, then record the version;
    the record read first, and whether anything was created or is still being built (so
    the caller waits for it). A newer schema raises `SchemaVersionError` and writes
    nothing."""
    record = await read_record(run)
    refuse_newer(record.version, len(migrations), where)
    created = False
    for _, statements in migrations:
        for key, statement in statements:
            if key not in inventory.keys:
                await ddl(statement)
                created = True
    if record.version < len(migrations):
        await run(q.RECORD_VERSION, {**_KEY, "version": len(migrations)})
    return record, created or not inventory.all_built


async def indexed_keys(run: Run) -> frozenset[str]:
    """Every key the graph indexes now."""
    return (await read_record(run)).indexed_keys


async def add_indexed_keys(run: Run, keys: frozenset[str]) -> frozenset[str]:
    """Index ``keys`` too, backfilling those not yet indexed; every indexed key. The keys
    are first marked as being indexed, so every later write indexes them itself; the
    sessions written before are then read and backfilled in one query (one
    transaction), which records the keys as indexed (a rerun after a failure writes the
    same; see ``queries.ADD_INDEXING_KEYS``)."""
    indexed = await indexed_keys(run)
    added = sorted(keys - indexed)
    if not added:
        return indexed
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
    """Stop indexing ``key`` and drop its entries, in one query (one transaction); False
    if it was not indexed. A key an add left marked as being indexed (it stopped before
    recording it) is unmarked too, so writes stop indexing it."""
    rows = await run(q.REMOVE_INDEXED_KEY, {**_KEY, "name": key, "prefix": f"{key}="})
    return bool(rows and rows[0][0])


async def record_vector_index(
    run: Run, spec: spi.VectorIndexSpec, *, replace: bool
) -> spi.VectorIndexSpec:
    """Record ``spec`` if no vector index is recorded (with ``replace``, in place of
    what is); what is recorded then."""
    parameters = {
        **_KEY,
        "replace": replace,
        "dimensions": spec.dimensions,
        "metric": spec.metric,
        "model": spec.model,
    }
    await run(q.RECORD_VECTOR_INDEX, parameters)
    recorded = (await read_record(run)).vector_index
    assert recorded is not None
    return recorded
