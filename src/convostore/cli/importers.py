"""The formats ``convostore import FORMAT SOURCE --to URL`` reads.

A format is one entry of `IMPORT_FORMATS`: a one-line summary and an async function
that reads SOURCE into the store, calls ``advance(n)`` as it goes (for the progress
bar), and returns what it counted. Adding a format is adding an entry.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from convostore.errors import InvalidArgumentError
from convostore.store import Store

__all__ = ["IMPORT_FORMATS", "ImportFormat"]

Advance = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class ImportFormat:
    """``load(store, source, advance) -> counts``; ``total(source)`` is how many units
    ``advance`` will count in all, when that is cheap to know (None: unknown)."""

    summary: str
    load: Callable[[Store, str, Advance], Awaitable[Mapping[str, int]]]
    total: Callable[[str], int | None] | None = None


def _lines(source: str) -> Iterator[str]:
    if source == "-":
        yield from sys.stdin
        return
    path = Path(source)
    if not path.is_file():
        raise InvalidArgumentError(f"no such file: {source}")
    with path.open(encoding="utf-8") as lines:
        yield from lines


async def _load_jsonl(store: Store, source: str, advance: Advance) -> Mapping[str, int]:
    from convostore.jsonl import import_lines

    return (await import_lines(store, _lines(source), advance)).as_dict()


def _jsonl_total(source: str) -> int | None:
    if source == "-":
        return None
    path = Path(source)
    if not path.is_file():
        return None
    with path.open("rb") as data:
        return sum(1 for line in data if line.strip())


IMPORT_FORMATS: dict[str, ImportFormat] = {
    "jsonl": ImportFormat(
        "convostore's own JSON lines, as `convostore export` writes them", _load_jsonl, _jsonl_total
    ),
}
