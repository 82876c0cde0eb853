"""What a SQL backend decides from what its statements found: bounds, the parameters
of a read, the metadata index's entries; and, named here too, the decisions every
backend shares (`convostore.backends.decisions`).

Nothing here does I/O: a backend runs its statements, then hands their answers here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from convostore import _json
from convostore.backends.decisions import (
    check_parent,
    missing_session,
    refuse_existing,
    replay_or_conflict,
    stale_or_missing,
    unconfirmed_users,
    unknown_users,
)
from convostore.backends.sql.dialect import Dialect
from convostore.filters import EventFilter, branch_lineage

__all__ = [
    "MAX_INTEGER",
    "backfill",
    "bounded",
    "check_parent",
    "event_conditions",
    "kept_entries",
    "missing_session",
    "read_parameters",
    "refuse_existing",
    "replay_or_conflict",
    "stale_or_missing",
    "unconfirmed_users",
    "unknown_users",
]

# SQL integers are signed 64-bit; a window bound beyond that bounds nothing.
MAX_INTEGER: Final = 2**63 - 1


def bounded(value: int | None) -> int | None:
    return None if value is None else min(value, MAX_INTEGER)


def backfill(name: str, rows: Sequence[Sequence[Any]]) -> list[tuple[str, str]]:
    """The (value, session_id) entries of the newly indexed key ``name`` for the sessions
    ``rows`` (id, metadata JSON) that have it, each value rendered as every write renders
    it (`convostore._json.index_value`), so it compares as a written one does. A value
    no lookup could name (a string holding a NUL) gets no entry, as in a write."""
    entries = []
    for session_id, metadata in rows:
        values = _json.loads(metadata)
        if name not in values:
            continue  # The rows may be found by a looser test than a top-level key.
        value = _json.indexable(values[name])
        if value is not None:
            entries.append((value, session_id))
    return entries


def kept_entries(
    candidates: tuple[tuple[str, str], ...], indexed: Iterable[str]
) -> list[tuple[str, str]]:
    """The candidate (key, value) entries of a write (`convostore.prepare.indexed_pairs`)
    whose key is among ``indexed``, the keys the database indexes as read in the write's
    own transaction."""
    keys = frozenset(indexed)
    return [(name, value) for name, value in candidates if name in keys]


def event_conditions(names: Sequence[str], event_filter: EventFilter) -> tuple[bool, ...]:
    """Which of the conditions ``names`` (attributes of `EventFilter`) the filter sets."""
    return tuple(
        event_filter.exclude_synthetic
        if name == "exclude_synthetic"
        else getattr(event_filter, name) is not None
        for name in names
    )


def read_parameters(dialect: Dialect, session_id: str, f: EventFilter) -> dict[str, Any]:
    """The parameters of a read of the log through ``f``, as ``dialect`` binds them:
    session_id, types, roles, lineage (the branches a branch filter admits), since,
    until, text, after_seq, limit and last; None for what the filter does not set."""
    strings, time = dialect.strings, dialect.time_param
    return {
        "session_id": session_id,
        "types": None if f.types is None else strings(f.types),
        "roles": None if f.roles is None else strings(str(role) for role in f.roles),
        "lineage": None if f.branch is None else strings(branch_lineage(f.branch)),
        "since": None if f.since is None else time(f.since),
        "until": None if f.until is None else time(f.until),
        "text": f.text,
        "after_seq": bounded(f.after_seq),
        "limit": dialect.no_limit if f.limit is None else bounded(f.limit),
        "last": bounded(f.last),
    }
