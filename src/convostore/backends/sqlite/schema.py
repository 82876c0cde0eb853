"""The schema as versioned migrations, and what runs at connect to bring a database to it.

``MIGRATIONS[i]`` takes a database from version i to i + 1; each applied version is a
row of ``convostore_schema``. Times are INTEGER microseconds since the epoch, JSON is
TEXT, an embedding is a BLOB of little-endian float32 values.
"""

from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from typing import Final

from convostore.backends.migrations import pending
from convostore.backends.sql import tables, writes
from convostore.backends.sql.migrate import (
    VersionTable,
    checked_version,
    migrate,
    pending_migrations,
)
from convostore.backends.sql.steps import drive
from convostore.backends.sql.tables import Column, Table, Type
from convostore.backends.sqlite.connection import TOKENS_FUNCTION, in_write_transaction
from convostore.backends.sqlite.statements import STATEMENTS, WRITES
from convostore.backends.sqlite.url import SQLiteTarget

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "prepare_database", "read_pending_migrations"]

# Every change a vector cache must follow, in commit order, from whichever connection or
# process makes it: the rowid of each event whose vector appears, changes (its vector,
# model, role, type or session) or goes. A cache remembers the last change it applied
# and reads the rest (`convostore.backends.sqlite.search`). Writes are serialised, so ids
# (AUTOINCREMENT: never reused) grow in commit order and a snapshot sees a prefix. The
# log keeps the last VECTOR_CHANGES_KEPT changes: every 4,096th change drops the older
# ones and records the id dropped through, and a cache that is behind it rebuilds. The
# generation counter of version 3 now moves only when a session changes owner.
VECTOR_CHANGES_KEPT: Final = 262_144
# Written to be harmless when run again (a database taken back to an older version by
# hand keeps this version's tables).
VECTOR_CHANGES_MIGRATION: Final = (
    """CREATE TABLE IF NOT EXISTS vector_changes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        event_rowid INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS vector_changes_pruned (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        through INTEGER NOT NULL
    )""",
    "INSERT OR IGNORE INTO vector_changes_pruned (id, through) VALUES (1, 0)",
    "DROP TRIGGER IF EXISTS events_vector_update",
    "DROP TRIGGER IF EXISTS events_vector_delete",
    """CREATE TRIGGER IF NOT EXISTS events_vector_insert AFTER INSERT ON events
        WHEN NEW.embedding IS NOT NULL
    BEGIN
        INSERT INTO vector_changes (event_rowid) VALUES (NEW.rowid);
    END""",
    """CREATE TRIGGER IF NOT EXISTS events_vector_update
        AFTER UPDATE OF type, session_id, role, embedding, embedding_model ON events
        WHEN OLD.embedding IS NOT NULL OR NEW.embedding IS NOT NULL
    BEGIN
        INSERT INTO vector_changes (event_rowid) VALUES (NEW.rowid);
    END""",
    """CREATE TRIGGER IF NOT EXISTS events_vector_delete AFTER DELETE ON events
        WHEN OLD.embedding IS NOT NULL
    BEGIN
        INSERT INTO vector_changes (event_rowid) VALUES (OLD.rowid);
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS vector_changes_prune AFTER INSERT ON vector_changes
        WHEN NEW.id % 4096 = 0 AND NEW.id > {VECTOR_CHANGES_KEPT}
    BEGIN
        DELETE FROM vector_changes WHERE id <= NEW.id - {VECTOR_CHANGES_KEPT};
        UPDATE vector_changes_pruned SET through = NEW.id - {VECTOR_CHANGES_KEPT} WHERE id = 1;
    END""",
    # The caches built before this version followed the generation counter alone.
    "UPDATE vector_generation SET generation = generation + 1 WHERE id = 1",
)

DDL: Final = tables.DDL(
    tables.SQLITE,
    types={
        Type.ID: "TEXT", Type.LABEL: "TEXT", Type.TEXT: "TEXT", Type.JSON: "TEXT",
        Type.TIME: "INTEGER", Type.BIGINT: "INTEGER", Type.INT: "INTEGER", Type.FLAG: "INTEGER",
        Type.VECTOR: "BLOB", Type.ONE: "INTEGER CHECK ({name} = 1)",
    },
    without_rowid=True,
)  # fmt: skip
_ONE_ROW: Final = Column("id", Type.ONE)
_BIGINT: Final = Type.BIGINT
# Counting a user's sessions reads a few rows here instead of their sessions.
_OWNER_SESSION_COUNTS: Final = Table("owner_session_counts", (
    Column("owner_id", Type.ID), Column("kind", Type.LABEL), Column("is_part", Type.FLAG),
    Column("sessions", _BIGINT),
), "owner_id, kind, is_part", clustered=True)  # fmt: skip

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        # The vector index record came with text search, in version 2.
        *DDL.create(t for t in tables.TABLES if t is not tables.VECTOR_INDEX),
        """CREATE TRIGGER events_add_participant AFTER INSERT ON events
            WHEN NEW.author_id IS NOT NULL
        BEGIN
            INSERT INTO participants (session_id, user_id, first_seq)
                VALUES (NEW.session_id, NEW.author_id, NEW.seq)
                ON CONFLICT DO NOTHING;
        END""",
        *DDL.create([_OWNER_SESSION_COUNTS]),
        """CREATE TRIGGER sessions_count_insert AFTER INSERT ON sessions
            WHEN NEW.owner_id IS NOT NULL
        BEGIN
            INSERT INTO owner_session_counts (owner_id, kind, is_part, sessions)
                VALUES (NEW.owner_id, NEW.kind, NEW.part_of IS NOT NULL, 1)
                ON CONFLICT DO UPDATE SET sessions = sessions + 1;
        END""",
        """CREATE TRIGGER sessions_count_delete AFTER DELETE ON sessions
            WHEN OLD.owner_id IS NOT NULL
        BEGIN
            UPDATE owner_session_counts SET sessions = sessions - 1
                WHERE owner_id = OLD.owner_id AND kind = OLD.kind
                AND is_part = (OLD.part_of IS NOT NULL);
        END""",
    ),
    (
        # Text search: an FTS5 index of message content, kept by triggers. Content is
        # never updated in place, so an insert and a delete trigger keep it exact.
        """CREATE VIRTUAL TABLE events_fts USING fts5 (
            content, content = 'events', content_rowid = 'rowid',
            tokenize = 'unicode61 remove_diacritics 2'
        )""",
        """CREATE TRIGGER events_fts_insert AFTER INSERT ON events
            WHEN NEW.type = 'MESSAGE'
        BEGIN
            INSERT INTO events_fts (rowid, content) VALUES (NEW.rowid, NEW.content);
        END""",
        """CREATE TRIGGER events_fts_delete AFTER DELETE ON events
            WHEN OLD.type = 'MESSAGE'
        BEGIN
            INSERT INTO events_fts (events_fts, rowid, content)
                VALUES ('delete', OLD.rowid, OLD.content);
        END""",
        """INSERT INTO events_fts (rowid, content)
            SELECT rowid, content FROM events WHERE type = 'MESSAGE'""",
        *DDL.create([tables.VECTOR_INDEX]),
        # Vector search reads the vectors of one model.
        """CREATE INDEX events_by_model ON events (embedding_model)
            WHERE type = 'MESSAGE' AND embedding IS NOT NULL""",
    ),
    (
        # What lets a store keep the vectors in memory and stay exact: every change to
        # events other than an insert moves this counter, in the same transaction, from
        # whichever connection or process makes it. Between two moves the table only
        # grows, and rowids only grow with it (a rowid can be reused only after a
        # delete), so the rows above the largest rowid a cache has seen are all that is
        # new. Any delete counts, with a vector or not, for that reason.
        *DDL.create([Table("vector_generation", (_ONE_ROW, Column("generation", _BIGINT)), "id")]),
        "INSERT INTO vector_generation (id, generation) VALUES (1, 0)",
        """CREATE TRIGGER events_vector_update
            AFTER UPDATE OF type, session_id, role, embedding, embedding_model ON events
            WHEN OLD.embedding IS NOT NULL OR NEW.embedding IS NOT NULL
        BEGIN
            UPDATE vector_generation SET generation = generation + 1 WHERE id = 1;
        END""",
        """CREATE TRIGGER events_vector_delete AFTER DELETE ON events
        BEGIN
            UPDATE vector_generation SET generation = generation + 1 WHERE id = 1;
        END""",
        # A cache holds each vector's owner: it is not expected to change, but if it
        # does, the caches are rebuilt rather than wrong.
        """CREATE TRIGGER sessions_owner_update AFTER UPDATE OF owner_id ON sessions
        BEGIN
            UPDATE vector_generation SET generation = generation + 1 WHERE id = 1;
        END""",
    ),
    (
        # Text search on the words every backend matches: the FTS5 index holds each
        # message's `text_tokens` (case folded in full, so "Straße" is "strasse";
        # compatibility forms decomposed, so "ﬁnal" is "final"; accents dropped), which
        # convostore's function gives, separated by spaces. The ascii tokenizer splits
        # them on those spaces alone: every other character of a token is a token
        # character to it, so the index holds exactly those words. Contentless: the
        # words are derived from the content, never read back, and a delete gives them
        # again from the old content.
        "DROP TRIGGER events_fts_insert",
        "DROP TRIGGER events_fts_delete",
        "DROP TABLE events_fts",
        """CREATE VIRTUAL TABLE events_fts USING fts5 (
            words, content = '', tokenize = 'ascii'
        )""",
        f"""CREATE TRIGGER events_fts_insert AFTER INSERT ON events
            WHEN NEW.type = 'MESSAGE'
        BEGIN
            INSERT INTO events_fts (rowid, words)
                VALUES (NEW.rowid, {TOKENS_FUNCTION}(NEW.content));
        END""",
        f"""CREATE TRIGGER events_fts_delete AFTER DELETE ON events
            WHEN OLD.type = 'MESSAGE'
        BEGIN
            INSERT INTO events_fts (events_fts, rowid, words)
                VALUES ('delete', OLD.rowid, {TOKENS_FUNCTION}(OLD.content));
        END""",
        f"""INSERT INTO events_fts (rowid, words)
            SELECT rowid, {TOKENS_FUNCTION}(content) FROM events WHERE type = 'MESSAGE'""",
    ),
    VECTOR_CHANGES_MIGRATION,
    (
        # The text index fed in batches, not by a trigger on every append: indexing in
        # the append's transaction wrote a new FTS5 segment (about 4 pages) and cost
        # more CPU than the rest of the append. Every message whose rowid is at most
        # `indexed_through` is in the index, and every rowid in the index is a message
        # at most there; the rows above it are indexed by the writer in batches and by
        # every search before it runs (`text_index`). A delete keeps both true: it takes
        # an indexed message out of the index, then lowers the mark to the highest
        # rowid left, below which the next insert's rowid (max + 1) can never fall.
        # From this version on every events row is inserted with a stamp of its own and
        # every UPDATE of events sets a new one: `event_cache` tells rows apart by it.
        *DDL.create(
            [Table("text_index_state", (_ONE_ROW, Column("indexed_through", _BIGINT)), "id")]
        ),
        # Every message is indexed here: the old trigger indexed each one.
        """INSERT INTO text_index_state (id, indexed_through)
            VALUES (1, (SELECT coalesce(max(rowid), 0) FROM events))""",
        "DROP TRIGGER events_fts_insert",
        "DROP TRIGGER events_fts_delete",
        f"""CREATE TRIGGER events_fts_delete AFTER DELETE ON events
        BEGIN
            INSERT INTO events_fts (events_fts, rowid, words)
                SELECT 'delete', OLD.rowid, {TOKENS_FUNCTION}(OLD.content)
                WHERE OLD.type = 'MESSAGE'
                AND OLD.rowid <= (SELECT indexed_through FROM text_index_state WHERE id = 1);
            UPDATE text_index_state SET indexed_through = (
                SELECT coalesce(max(rowid), 0) FROM events
            ) WHERE id = 1 AND indexed_through > (SELECT coalesce(max(rowid), 0) FROM events);
        END""",
        # Every append moves its session's last_activity_at, so each index holding it
        # is written by every append: three were a third of an append's pages. The
        # listings of top-level sessions by activity now walk the owner's index of all
        # sessions by activity and skip the parts (and other kinds) row by row, as a
        # listing of parts by kind already did (`statements.DIALECT`).
        "DROP INDEX sessions_top_by_activity",
        "DROP INDEX sessions_top_kind_by_activity",
    ),
)

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this code writes and reads."""

# The versions applied (see `convostore.backends.sql.migrate`).
VERSION_TABLE: Final = VersionTable(
    exists="SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'convostore_schema'",
    recorded="SELECT coalesce(max(version), 0) FROM convostore_schema",
    create="""CREATE TABLE IF NOT EXISTS convostore_schema (
        version INTEGER PRIMARY KEY,
        applied_at INTEGER NOT NULL
    )""",
    record="INSERT INTO convostore_schema (version, applied_at) VALUES (:version, :applied_at)",
)
JOURNAL_MODE: Final = "PRAGMA journal_mode"
JOURNAL_MODE_WAL: Final = "PRAGMA journal_mode = WAL"
# Switching to WAL takes an exclusive lock without waiting on the busy handler; with
# several processes connecting at once it is retried for this long.
WAL_SWITCH_PATIENCE_S: Final = 10.0


def prepare_database(connection: sqlite3.Connection, target: SQLiteTarget) -> None:
    """Migrate the schema to `SCHEMA_VERSION`.

    A database of a newer version raises `SchemaVersionError` before anything, not even
    the journal mode, is written to it.
    """
    drive(connection, checked_version(VERSION_TABLE, SCHEMA_VERSION, _where(target)))
    if not target.in_memory:
        _use_wal(connection)
    # Under the write lock, so processes connecting at once migrate one after another.
    in_write_transaction(connection, _migrate, (target,))


def read_pending_migrations(target: SQLiteTarget) -> list[str]:
    """The migrations `prepare_database` would apply, read without writing: the file is
    opened read-only, and a missing one has them all pending."""
    if target.in_memory or not os.path.exists(target.path):
        return pending(0, MIGRATIONS)
    connection = sqlite3.connect(f"file:{urllib.parse.quote(target.path)}?mode=ro", uri=True)
    try:
        return drive(connection, pending_migrations(VERSION_TABLE, MIGRATIONS, _where(target)))
    finally:
        connection.close()


def _use_wal(connection: sqlite3.Connection) -> None:
    """Put the database in WAL mode (a property of the file, kept once set)."""
    deadline = time.monotonic() + WAL_SWITCH_PATIENCE_S
    while connection.execute(JOURNAL_MODE).fetchone()[0].lower() != "wal":
        try:
            connection.execute(JOURNAL_MODE_WAL).fetchone()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _where(target: SQLiteTarget) -> str:
    return f"the SQLite database {target.path!r}"


def _migrate(connection: sqlite3.Connection, target: SQLiteTarget) -> None:
    drive(connection, migrate(VERSION_TABLE, MIGRATIONS, _where(target)))


def write_indexed_keys(connection: sqlite3.Connection, keys: frozenset[str]) -> frozenset[str]:
    """`writes.add_indexed_keys` in the caller's write transaction."""
    return drive(connection, writes.add_indexed_keys(STATEMENTS, WRITES.keys, keys))


def write_unindexed_key(connection: sqlite3.Connection, key: str) -> bool:
    """`writes.remove_indexed_key` in the caller's write transaction."""
    return drive(connection, writes.remove_indexed_key(STATEMENTS, key))
