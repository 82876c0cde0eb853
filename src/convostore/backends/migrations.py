"""How a backend describes its schema migrations to ``convostore migrate --dry-run``."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["describe", "pending"]

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
