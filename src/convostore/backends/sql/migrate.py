"""The migration runner of every SQL backend, written once without I/O (`steps`).

A schema is a list of migrations: ``migrations[i]`` takes it from version i to i + 1.
Each applied version is a row of a table (`VersionTable`); connect applies the missing
ones under the backend's own lock and refuses a schema a newer convostore wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convostore._time import to_micros, utc_now
from convostore.backends.migrations import pending, refuse_newer
from convostore.backends.sql.steps import Query, Steps

__all__ = ["VersionTable", "checked_version", "migrate", "pending_migrations"]


@dataclass(frozen=True, slots=True)
class VersionTable:
    """Where a schema records the versions applied to it, one row each: statements that
    tell whether the table exists (one row, true if so; ``parameters``), read the highest
    version recorded, create the table if absent, and record a version (parameters
    ``version`` and ``applied_at``, microseconds since the epoch)."""

    exists: str
    recorded: str
    create: str
    record: str
    parameters: Mapping[str, Any] = field(default_factory=dict)


def checked_version(table: VersionTable, known: int, where: str) -> Steps[int]:
    """The schema version the database records (0 where none is), refused with
    `SchemaVersionError` when newer than the ``known`` one."""
    (exists,) = yield Query(table.exists, table.parameters)
    version = 0
    if exists:
        (recorded,) = yield Query(table.recorded)
        version = int(recorded)
    refuse_newer(version, known, where)
    return version


def migrate(
    table: VersionTable,
    migrations: Sequence[Sequence[str]],
    where: str,
    first: Sequence[str] = (),
) -> Steps[None]:
    """Bring the schema to version ``len(migrations)``, each version recorded as it is
    applied; a newer schema is refused and nothing is written. ``first`` runs before the
    first migration applied. The caller holds the schema's lock."""
    version = yield from checked_version(table, len(migrations), where)
    if version == len(migrations):
        return
    yield Query(table.create, None, "count")
    for statement in first:
        yield Query(statement, None, "count")
    for number in range(version + 1, len(migrations) + 1):
        for statement in migrations[number - 1]:
            yield Query(statement, None, "count")
        applied = {"version": number, "applied_at": to_micros(utc_now())}
        yield Query(table.record, applied, "count")


def pending_migrations(
    table: VersionTable, migrations: Sequence[Sequence[str]], where: str
) -> Steps[list[str]]:
    """The migrations `migrate` would apply, described (read without writing)."""
    version = yield from checked_version(table, len(migrations), where)
    return pending(version, migrations)
