"""How a backend describes its schema migrations to ``convostore migrate --dry-run``, and
refuses a schema a newer convostore wrote; a server's or extension's version read."""

from __future__ import annotations

import re
from collections.abc import Sequence

from convostore.errors import SchemaVersionError

__all__ = ["describe", "pending", "refuse_newer", "version_tuple"]

_OBJECT = re.compile(
    r"\b(CREATE|ALTER|DROP)\s+(?:UNIQUE\s+|VIRTUAL\s+)?(TABLE|INDEX|TRIGGER|VIEW|EXTENSION)"
    r"\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?([\w.\"]+)",
    re.IGNORECASE,
)


def describe(version: int, statements: Sequence[str]) -> str:
    """``"3: create table events, create index events_by_seq"``: the version a
    migration brings the schema to and what its statements create, alter or drop."""
    objects = []
    for statement in statements:
        found = _OBJECT.search(statement)
        if found is not None:
            verb, kind, name = found.groups()
            objects.append(f"{verb.lower()} {kind.lower()} {name.strip(chr(34))}")
    return f"{version}: {', '.join(objects) if objects else 'data changes'}"


def pending(recorded: int, migrations: Sequence[Sequence[str]]) -> list[str]:
    """The migrations after version ``recorded``, described."""
    return [
        describe(number, migrations[number - 1])
        for number in range(recorded + 1, len(migrations) + 1)
    ]


def refuse_newer(recorded: int, known: int, where: str) -> None:
    """`SchemaVersionError` when the database (``where``) records a schema version newer
    than the ``known`` one this convostore writes and reads."""
    if recorded > known:
        raise SchemaVersionError(
            f"{where} has convostore schema version {recorded}, newer than version "
            f"{known} this convostore knows; upgrade convostore to open it"
        )


def version_tuple(version: str) -> tuple[int, ...]:
    """``"10.11.6-MariaDB"`` or ``"0.8.2"`` as (10, 11, 6) or (0, 8, 2); what is not a
    number ends it."""
    numbers: list[int] = []
    for part in version.split("-", 1)[0].split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)
