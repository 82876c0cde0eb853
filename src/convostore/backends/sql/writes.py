"""Writes every SQL backend runs alike, written once without I/O (`steps`): the
metadata index's key adds and drops (SQLite, MySQL, PostgreSQL). What the statements
found is decided by `convostore.backends.sql.decisions`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from convostore.backends.sql import decisions
from convostore.backends.sql.statements import Statements
from convostore.backends.sql.steps import Query, Steps

__all__ = ["KeyStatements", "add_indexed_keys", "remove_indexed_key"]


@dataclass(frozen=True, slots=True)
class KeyStatements:
    """What adding an indexed key runs beyond the shared statements: recording a key
    (``name``; a key recorded meanwhile changes nothing), the sessions whose metadata
    has the key (``name``, or ``path``: ``$."name"``; rows of id and metadata), and
    inserting one entry (rows made by ``entry`` from name, value and session id)."""

    insert_key: str
    sessions_with_key: str
    insert_entry: str
    entry: Callable[[str, str, str], tuple[Any, ...]]


# ---------------------------------------------------------------------------- the metadata index


def _indexed_keys(statements: Statements) -> Steps[set[str]]:
    rows = yield Query(statements.select_indexed_keys, None, "all")
    return {str(row[0]) for row in rows}


def add_indexed_keys(
    statements: Statements, keys: KeyStatements, names: frozenset[str]
) -> Steps[frozenset[str]]:
    """`Backend.add_indexed_keys` in one transaction: each key the database does not
    index yet recorded, then backfilled; a key another store records meanwhile (whose
    row lock this insert waits on) is left to it. Every key the database indexes."""
    indexed = yield from _indexed_keys(statements)
    if names <= indexed:
        return frozenset(indexed)
    if statements.lock_indexed_keys is not None:
        # Session writes in flight commit first; later ones wait for this transaction
        # (see `convostore.backends.sql.statements`), so none escapes the backfill.
        yield Query(statements.lock_indexed_keys, None, "count")
    for name in sorted(names - indexed):
        if not (yield Query(keys.insert_key, {"name": name}, "count")):
            continue
        # Key names are [A-Za-z0-9_.:-]: quoted, each is one step of a JSON path.
        parameters = {"name": name, "path": '$."' + name + '"'}
        found = yield Query(keys.sessions_with_key, parameters, "all")
        entries = [keys.entry(name, value, id_) for value, id_ in decisions.backfill(name, found)]
        if entries:
            yield Query(keys.insert_entry, entries, "many")
    return frozenset(indexed | names)


def remove_indexed_key(statements: Statements, name: str) -> Steps[bool]:
    """`Backend.remove_indexed_key` in one transaction, once the session writes in flight
    have committed (so none leaves an entry of the key behind)."""
    if statements.lock_indexed_keys is not None:
        yield Query(statements.lock_indexed_keys, None, "count")
    if not (yield Query(statements.delete_indexed_key, {"name": name}, "count")):
        return False
    yield Query(statements.delete_key_entries, {"name": name}, "count")
    return True
