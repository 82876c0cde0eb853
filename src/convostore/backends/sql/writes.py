"""Writes every SQL backend runs alike, written once without I/O (`steps`): the
metadata index's key adds and drops (SQLite, MySQL, PostgreSQL), and the session writes
of a backend whose writes serialise on row locks or run one at a time (SQLite, MySQL).
What the statements found is decided by `convostore.backends.sql.decisions`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from convostore.backends import spi
from convostore.backends.decisions import owned_by_parent
from convostore.backends.sql import decisions
from convostore.backends.sql.rows import user_values
from convostore.backends.sql.statements import SESSION_COLUMNS, Statements
from convostore.backends.sql.steps import Query, RollbackAndReturn, Steps
from convostore.model import Session, User

__all__ = [
    "KeyStatements",
    "SessionWrites",
    "add_indexed_keys",
    "find_or_insert_part",
    "insert_session",
    "insert_users",
    "remove_indexed_key",
    "require_users",
    "update_session",
]


@dataclass(frozen=True, slots=True)
class KeyStatements:
    """What adding an indexed key runs beyond the shared statements: the sessions whose
    metadata has the key (``name``, or ``path``: ``$."name"``; rows of id and metadata),
    and inserting one entry (rows made by ``entry`` from name, value and session id)."""

    sessions_with_key: str
    insert_entry: str
    entry: Callable[[str, str, str], tuple[Any, ...]]


class SessionWrites:
    """A backend's statements of the session writes, beside its shared ``statements``
    (positional parameters):

    - ``insert_session``: a session, of parameters ``session_row(new)``;
    - ``keys``: how one metadata index entry is inserted;
    - rendered in the dialect: ``missing_users``, the ids of a list (one parameter,
      ``dialect.strings``) that name no stored user; ``insert_user``, a user
      (`user_values`) unless stored; ``select_parent`` and ``lock_parent``, a session's
      owner_id and part_of by id, the second under the row lock the write keeps;
      ``update_session``: title, metadata, expires_at, new stamp, id, expected stamp (the
      changed row back where the dialect has RETURNING, else how many rows changed);
      ``delete_entries``: a session's metadata index entries (its id).
    """

    def __init__(
        self,
        statements: Statements,
        insert_session: str,
        session_row: Callable[[spi.NewSession], tuple[Any, ...]],
        keys: KeyStatements,
    ) -> None:
        dialect, m = statements.dialect, statements.dialect.marker
        self.statements = statements
        self.insert_session = insert_session
        self.session_row = session_row
        self.keys = keys
        self.missing_users = (
            f"SELECT wanted.value FROM {dialect.strings_table(m, 'wanted')}"
            " WHERE NOT EXISTS (SELECT 1 FROM users u WHERE u.id = wanted.value)"
        )
        self.insert_user = statements.insert_user_if_absent
        self.select_parent = f"SELECT owner_id, part_of FROM sessions WHERE id = {m}"
        self.lock_parent = self.select_parent + dialect.for_update
        self.update_session = (
            f"UPDATE sessions SET title = {m}, metadata = {m}, expires_at = {m}, stamp = {m}"
            f" WHERE id = {m} AND stamp = {m}"
        ) + (f" RETURNING {SESSION_COLUMNS}" if dialect.returning else "")
        self.delete_entries = f"DELETE FROM session_metadata WHERE session_id = {m}"


# ---------------------------------------------------------------------------- steps


def _session_exists(w: SessionWrites, session_id: str) -> Steps[bool]:
    (count,) = yield Query(w.statements.session_exists, {"id": session_id})
    return int(count) > 0


def require_users(
    w: SessionWrites, users: tuple[User, ...], required: tuple[str, ...]
) -> Steps[None]:
    wanted = decisions.unconfirmed_users(users, required)
    if not wanted:
        return
    strings = w.statements.dialect.strings(wanted)
    found = {row[0] for row in (yield Query(w.missing_users, (strings,), "all"))}
    missing = [user_id for user_id in wanted if user_id in found]
    if missing:
        raise decisions.unknown_users(missing)


def insert_users(w: SessionWrites, users: tuple[User, ...]) -> Steps[None]:
    """Insert the users that are not stored; a stored user is never overwritten."""
    if users:
        yield Query(w.insert_user, [user_values(user) for user in users], "many")


def _share_indexed_keys(w: SessionWrites) -> Steps[None]:
    """Taken first in a write that indexes metadata, before any row lock a key add's
    backfill could wait on (see `convostore.backends.sql.statements`)."""
    if w.statements.share_indexed_keys is not None:
        yield Query(w.statements.share_indexed_keys, None, "count")


def _index_metadata(
    w: SessionWrites, session_id: str, candidates: tuple[tuple[str, str], ...]
) -> Steps[None]:
    """Index the candidate entries whose key the database indexes now: where writes run
    at once, the keys are read after `_share_indexed_keys`; where they run one at a
    time (no share), the entry statement itself keeps only an indexed key's entry."""
    entries: list[tuple[str, str]] = list(candidates)
    if candidates and w.statements.share_indexed_keys is not None:
        indexed = yield Query(w.statements.select_indexed_keys, None, "all")
        entries = decisions.kept_entries(candidates, (str(row[0]) for row in indexed))
    if entries:
        rows = [w.keys.entry(name, value, session_id) for name, value in entries]
        yield Query(w.keys.insert_entry, rows, "many")


def insert_session(w: SessionWrites, new: spi.NewSession, if_absent: bool) -> Steps[Session | None]:
    """`Backend.insert_session`: the checks in the order the contract gives them."""
    session = new.session
    if new.indexed_metadata:
        yield from _share_indexed_keys(w)
    if (yield from _session_exists(w, session.id)):
        decisions.refuse_existing(session, if_absent)
        return None
    yield from require_users(w, new.users_to_insert, new.required_user_ids)
    if session.part_of is not None:
        decisions.check_parent(session, (yield Query(w.select_parent, (session.part_of,))))
    yield from insert_users(w, new.users_to_insert)
    if not (yield Query(w.insert_session, w.session_row(new), "insert")):
        # Inserted by another transaction since the look above (where writes take row
        # locks): what was written goes with the transaction.
        decisions.refuse_existing(session, if_absent)
        raise RollbackAndReturn(None)
    yield from _index_metadata(w, session.id, new.indexed_metadata)
    return session


def find_or_insert_part(w: SessionWrites, new: spi.NewSession) -> Steps[Session]:
    """Under the parent's row lock (or the one write lock) no other part can appear
    between the look and the insert, so every caller settles on the earliest part."""
    if new.indexed_metadata:
        yield from _share_indexed_keys(w)
    new = owned_by_parent(new, (yield Query(w.lock_parent, (new.session.part_of,))))
    session = new.session
    parameters = {"part_of": session.part_of, "held_with": session.held_with}
    found = yield Query(w.statements.find_part, parameters)
    if found is not None:
        return w.statements.dialect.rows.session(found)
    inserted = yield from insert_session(w, new, False)
    assert inserted is not None  # Absent, or the look above would have found it.
    return inserted


def update_session(w: SessionWrites, changes: spi.SessionChanges) -> Steps[Session]:
    """`Backend.update_session`, guarded by the session's stamp."""
    dialect = w.statements.dialect
    # Always: the old metadata's entries go, and a key add must not backfill them meanwhile.
    yield from _share_indexed_keys(w)
    expires_at = None if changes.expires_at is None else dialect.time_param(changes.expires_at)
    parameters = (
        changes.title,
        changes.metadata_json,
        expires_at,
        changes.new_stamp,
        changes.session_id,
        changes.expected_stamp,
    )
    if dialect.returning:
        row = yield Query(w.update_session, parameters)
        changed = row is not None
    else:
        row, changed = None, (yield Query(w.update_session, parameters, "count")) > 0
    if not changed:
        exists = yield from _session_exists(w, changes.session_id)
        raise decisions.stale_or_missing(changes.session_id, exists)
    yield Query(w.delete_entries, (changes.session_id,), "count")
    yield from _index_metadata(w, changes.session_id, changes.indexed_metadata)
    if row is None:
        row = yield Query(w.statements.select_session, {"id": changes.session_id})
    return dialect.rows.session(row)


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
        if not (yield Query(statements.insert_indexed_key, {"name": name}, "count")):
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
