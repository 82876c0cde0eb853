"""The statements every SQL backend runs alike, written once and rendered per dialect.

Column lists are joined from the field names below; statements whose WHERE clause
depends on the request (listings, counts) are joined from fixed fragments only, one
string per combination, so the set of statements is bounded and each is prepared once
per connection. No value is ever formatted into SQL: a dialect renders only parameter
markers (and the casts a database needs) and index hints from a fixed list.

The tables and their columns are `convostore.backends.sql.tables`.

The metadata index follows the keys of ``indexed_metadata_keys`` as they are when a
write commits, not as the writing store last read them (another store may have added or
dropped a key since). So:

- a session write (insert, or update of its metadata) gets candidate entries, one per
  indexable top-level key (`convostore.prepare.indexed_pairs`), and keeps those whose
  key the table holds, read in its own transaction after ``share_indexed_keys``
  (`convostore.backends.sql.decisions.kept_entries`, or a join in the statement);
- a key add runs ``lock_indexed_keys``, records the key, then backfills it from the
  sessions committed by then; a key drop runs ``lock_indexed_keys``, deletes the key,
  then its entries.

With the dialect's two locks (`Dialect`), a write either commits before the key change
reads the sessions (and is backfilled, or its entries deleted) or reads the keys after
the change committed: no session is left out of the index, nor kept in it for a key no
longer indexed.
"""

from __future__ import annotations

from typing import Final

from convostore.backends.sql import tables
from convostore.backends.sql.dialect import Dialect
from convostore.model import SessionOrder

__all__ = [
    "EVENT_FIELDS",
    "LISTING_INDEXES",
    "SESSION_FIELDS",
    "USER_FIELDS",
    "Statements",
    "columns",
]

USER_FIELDS: Final = tuple(column.name for column in tables.USERS.columns)
# The columns of events every SQL backend has, in their order.
EVENT_FIELDS: Final = tuple(c.name for c in tables.EVENTS.columns if c.only == tables.EVERY)
# fmt: off
SESSION_FIELDS: Final = (
    "id", "owner_id", "title", "kind", "part_of", "held_with", "created_at",
    "last_activity_at", "expires_at", "metadata", "version", "stamp",
)
# fmt: on

# The index a listing walks, by (order, include_parts, filtered by kind), for a dialect
# whose planner needs naming it (`Dialect.index_hint`): a listing's cost per page must
# not depend on the planner's guess. A listing of parts by kind walks the owner's whole
# index and filters kind per row.
LISTING_INDEXES: Final = {
    (SessionOrder.CREATED, False, False): "sessions_top_by_created",
    (SessionOrder.CREATED, False, True): "sessions_top_kind_by_created",
    (SessionOrder.CREATED, True, False): "sessions_by_created",
    (SessionOrder.CREATED, True, True): "sessions_by_created",
    (SessionOrder.LAST_ACTIVITY, False, False): "sessions_top_by_activity",
    (SessionOrder.LAST_ACTIVITY, False, True): "sessions_top_kind_by_activity",
    (SessionOrder.LAST_ACTIVITY, True, False): "sessions_by_activity",
    (SessionOrder.LAST_ACTIVITY, True, True): "sessions_by_activity",
}


def columns(fields: tuple[str, ...], alias: str = "") -> str:
    return ", ".join(alias + name for name in fields)


USER_COLUMNS: Final = columns(USER_FIELDS)
SESSION_COLUMNS: Final = columns(SESSION_FIELDS)
EVENT_COLUMNS: Final = columns(EVENT_FIELDS)
# A summary row: the session's columns, its message count, its owner's columns, then the
# columns of the author of its first message (users o and b joined to sessions s); read
# by `RowReader.summary`.
SUMMARY_COLUMNS: Final = (
    f"{columns(SESSION_FIELDS, 's.')}, s.message_count, "
    f"{columns(USER_FIELDS, 'o.')}, {columns(USER_FIELDS, 'b.')}"
)
SUMMARY_JOINS: Final = (
    " LEFT JOIN users o ON o.id = s.owner_id LEFT JOIN users b ON b.id = s.started_by"
)


class Statements:
    """The shared statements in one dialect; each attribute's comment names its
    parameters."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._listings: dict[tuple[bool, SessionOrder, bool, bool, bool], str] = {}
        self._counts: dict[tuple[bool, bool], str] = {}
        p = dialect.p
        # USER_FIELDS, positional: a user written whole, or only where none is stored.
        user = dialect.insert("users", USER_FIELDS)
        self.upsert_user = user + dialect.replace_existing("id", USER_FIELDS[1:])
        self.insert_user_if_absent = user + dialect.keep_existing("id")
        # id
        self.select_user = f"SELECT {USER_COLUMNS} FROM users WHERE id = {p('id')}"
        self.select_session = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = {p('id')}"
        self.session_exists = f"SELECT count(*) FROM sessions WHERE id = {p('id')}"
        self.session_version = f"SELECT version FROM sessions WHERE id = {p('id')}"
        deletes = dialect.deletes_lock_entries
        self.delete_session = f"{deletes}DELETE FROM sessions WHERE id = {p('id')}"
        # title, stamp, id
        self.set_title = (
            f"UPDATE sessions SET title = {p('title')}, stamp = {p('stamp')} WHERE id = {p('id')}"
        ) + (f" RETURNING {SESSION_COLUMNS}" if dialect.returning else "")
        # text, stamp, id, session_id
        self.set_narration = (
            f"UPDATE events SET narration = {p('text')}, stamp = {p('stamp')}"
            f" WHERE id = {p('id')} AND session_id = {p('session_id')} AND type = 'MESSAGE'"
        )
        # before. A part of an expired parent goes with its parent by cascade, so only
        # sessions deleted directly are counted. The expiry is checked in the delete
        # itself: a session whose expiry was moved on meanwhile survives.
        self.delete_expired = (
            f"{deletes}DELETE FROM sessions WHERE expires_at < {p('before', 'timestamptz')}"
            " AND NOT EXISTS (SELECT 1 FROM sessions parent WHERE parent.id = sessions.part_of"
            f" AND parent.expires_at < {p('before', 'timestamptz')})"
        )
        # part_of, held_with
        self.find_part = (
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE part_of = {p('part_of')}"
            f" AND held_with = {p('held_with')} ORDER BY id LIMIT 1"
        )
        # part_of
        self.list_parts = (
            f"SELECT {SUMMARY_COLUMNS} FROM sessions s{SUMMARY_JOINS}"
            f" WHERE s.part_of = {p('part_of')} ORDER BY s.id"
        )
        # session_id
        self.participants = (
            f"SELECT {columns(USER_FIELDS, 'u.')} FROM participants p"
            f" JOIN users u ON u.id = p.user_id WHERE p.session_id = {p('session_id')}"
            " ORDER BY p.first_seq"
        )
        # (none); see the module for the order these run in.
        self.share_indexed_keys = dialect.share_indexed_keys
        self.lock_indexed_keys = dialect.lock_indexed_keys
        # (none); name; name; name
        self.select_indexed_keys = "SELECT name FROM indexed_metadata_keys"
        self.insert_indexed_key = (
            f"INSERT INTO indexed_metadata_keys (name) VALUES ({p('name')})"
            + dialect.keep_existing("name")
        )
        self.delete_indexed_key = f"DELETE FROM indexed_metadata_keys WHERE name = {p('name')}"
        self.delete_key_entries = f"DELETE FROM session_metadata WHERE name = {p('name')}"
        # name, value
        self.sessions_by_metadata = (
            f"SELECT {columns(SESSION_FIELDS, 's.')} FROM session_metadata m"
            " JOIN sessions s ON s.id = m.session_id"
            f" WHERE m.name = {p('name')} AND {dialect.value_equals('m.value', p('value'))}"
            " ORDER BY m.session_id"
        )

        # (none). Counts over the whole database, and its size (see `DatabaseStats`).
        self.database_stats = (
            "SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM sessions),"
            " (SELECT count(*) FROM events),"
            " (SELECT count(*) FROM events WHERE type = 'MESSAGE'),"
            " (SELECT count(*) FROM events WHERE embedding IS NOT NULL),"
            f" ({dialect.database_size})"
        )

    def listing(
        self, summaries: bool, order: SessionOrder, include_parts: bool, by_kind: bool, paged: bool
    ) -> str:
        """A page of an owner's sessions (or summaries), strictly after a keyset when
        ``paged``. Parameters: owner_id, kind, after_id, after_at, limit."""
        key = (summaries, order, include_parts, by_kind, paged)
        statement = self._listings.get(key)
        if statement is None:
            statement = self._listings[key] = self._listing(*key)
        return statement

    def _listing(
        self, summaries: bool, order: SessionOrder, include_parts: bool, by_kind: bool, paged: bool
    ) -> str:
        p = self.dialect.p
        selected = SUMMARY_COLUMNS if summaries else columns(SESSION_FIELDS, "s.")
        hint = self.dialect.index_hint(LISTING_INDEXES[order, include_parts, by_kind])
        statement = f"SELECT {selected} FROM sessions s{hint}"
        if summaries:
            statement += SUMMARY_JOINS
        statement += f" WHERE s.owner_id = {p('owner_id')}"
        if not include_parts:
            statement += " AND s." + self.dialect.top_level
        if by_kind:
            statement += f" AND s.kind = {p('kind')}"
        if paged and order is SessionOrder.CREATED:
            statement += f" AND s.id < {p('after_id')}"
        elif paged:
            statement += " AND " + self.dialect.keyset_before(
                "s.last_activity_at", "s.id", p("after_at", "timestamptz"), p("after_id", "text")
            )
        if order is SessionOrder.CREATED:
            return statement + f" ORDER BY s.id DESC LIMIT {p('limit')}"
        return statement + f" ORDER BY s.last_activity_at DESC, s.id DESC LIMIT {p('limit')}"

    def count(self, include_parts: bool, by_kind: bool) -> str:
        """How many sessions a listing holds. Parameters: owner_id, kind."""
        statement = self._counts.get((include_parts, by_kind))
        if statement is None:
            statement = self._counts[include_parts, by_kind] = self._count(include_parts, by_kind)
        return statement

    def _count(self, include_parts: bool, by_kind: bool) -> str:
        own = self.dialect.count_sessions(include_parts, by_kind)
        if own is not None:
            return own
        p = self.dialect.p
        statement = f"SELECT count(*) FROM sessions WHERE owner_id = {p('owner_id')}"
        if not include_parts:
            statement += " AND " + self.dialect.top_level
        if by_kind:
            statement += f" AND kind = {p('kind')}"
        return statement
