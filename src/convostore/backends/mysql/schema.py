"""The schema as versioned migrations, and what runs at connect to bring a database to it.

``MIGRATIONS[i]`` takes a database from version i to i + 1; each applied version is a
row of ``convostore_schema``. Connect runs them under a named lock (``GET_LOCK``) per
database, so stores connecting at once migrate one after another, and refuses a schema
a newer convostore wrote. MySQL commits each DDL statement by itself, so every statement
is written to be run again safely after an interrupted migration.

Types: every table is InnoDB in utf8mb4 (all of Unicode, emoji included), whatever the
server's or the database's defaults. Ids compare by code point with no trailing-space
padding: ``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin`` on MySQL 8 (the one
identifier that varies, from `TEXT_COLLATIONS`). Times are BIGINT microseconds since the
epoch, JSON is LONGTEXT (kept as written: MySQL's JSON type reorders keys), a vector is
a BLOB of little-endian float32 values.

Text search runs on a FULLTEXT index of ``search_tokens``: the words every backend
indexes (`convostore.embedding.text_tokens`), each written with `TOKEN_PREFIX` in front,
so no word is shorter than InnoDB's minimum token size (3 by default) or equal to a
stopword; the index is created with stopwords off as well.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

from convostore.backends.sql.migrate import VersionTable

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "TEXT_COLLATIONS",
    "TOKEN_PREFIX",
    "ServerFacts",
]

# Put before every indexed word: two characters lift a one-letter word to InnoDB's
# default minimum token size of three, and no stopword starts with them.
TOKEN_PREFIX: Final = "qz"
# The id collation by server family: code point order, no padding.
TEXT_COLLATIONS: Final = {"mariadb": "utf8mb4_nopad_bin", "mysql": "utf8mb4_0900_bin"}
_TABLE: Final = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC"

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """CREATE TABLE IF NOT EXISTS users (
            id VARCHAR(255) NOT NULL PRIMARY KEY,
            display_name LONGTEXT NOT NULL,
            username LONGTEXT NULL,
            email LONGTEXT NULL,
            kind VARCHAR(16) NOT NULL,
            metadata LONGTEXT NOT NULL
        )"""
        + _TABLE,
        # Listings page by keyset on these indexes, so page n reads what page 1 reads.
        # ``is_part`` (whether part_of is set, which never changes) stands in for the
        # partial indexes MySQL does not have.
        """CREATE TABLE IF NOT EXISTS sessions (
            id VARCHAR(255) NOT NULL PRIMARY KEY,
            owner_id VARCHAR(255) NULL,
            title LONGTEXT NULL,
            kind VARCHAR(255) NOT NULL,
            part_of VARCHAR(255) NULL,
            held_with VARCHAR(255) NULL,
            created_at BIGINT NOT NULL,
            last_activity_at BIGINT NOT NULL,
            expires_at BIGINT NULL,
            metadata LONGTEXT NOT NULL,
            version BIGINT NOT NULL DEFAULT 0,
            last_seq BIGINT NOT NULL DEFAULT 0,
            stamp VARCHAR(64) NOT NULL,
            message_count BIGINT NOT NULL DEFAULT 0,
            started_by VARCHAR(255) NULL,
            is_part TINYINT NOT NULL,
            KEY sessions_by_created (owner_id, is_part, id),
            KEY sessions_by_activity (owner_id, is_part, last_activity_at, id),
            KEY sessions_kind_by_created (owner_id, is_part, kind, id),
            KEY sessions_kind_by_activity (owner_id, is_part, kind, last_activity_at, id),
            KEY sessions_all_by_created (owner_id, id),
            KEY sessions_all_by_activity (owner_id, last_activity_at, id),
            KEY sessions_parts (part_of, held_with, id),
            KEY sessions_expiry (expires_at),
            CONSTRAINT sessions_part_of FOREIGN KEY (part_of) REFERENCES sessions (id)
                ON DELETE CASCADE
        )"""
        + _TABLE,
        # Clustered by (session, seq): a log reads as one range of the primary key.
        # ``row_id`` numbers rows for search hits and the vector cache.
        """CREATE TABLE IF NOT EXISTS events (
            session_id VARCHAR(255) NOT NULL,
            seq BIGINT NOT NULL,
            row_id BIGINT NOT NULL AUTO_INCREMENT,
            id VARCHAR(255) NOT NULL,
            type VARCHAR(64) NOT NULL,
            created_at BIGINT NOT NULL,
            branch LONGTEXT NULL,
            metadata LONGTEXT NOT NULL,
            payload LONGTEXT NULL,
            synthetic TINYINT NOT NULL,
            role VARCHAR(16) NULL,
            content LONGTEXT NULL,
            content_folded LONGTEXT NULL,
            search_tokens LONGTEXT NULL,
            author_id VARCHAR(255) NULL,
            recipient_ids LONGTEXT NULL,
            in_reply_to LONGTEXT NULL,
            tool_calls LONGTEXT NULL,
            tool_call_id LONGTEXT NULL,
            attachments LONGTEXT NULL,
            data LONGTEXT NULL,
            assets LONGTEXT NULL,
            narration LONGTEXT NULL,
            embedding LONGBLOB NULL,
            embedding_model VARCHAR(255) NULL,
            stamp VARCHAR(64) NULL,
            turn_start TINYINT AS (type = 'MESSAGE' AND role = 'user' AND branch IS NULL
                AND synthetic = 0) STORED,
            PRIMARY KEY (session_id, seq),
            UNIQUE KEY events_by_id (id),
            UNIQUE KEY events_by_row (row_id),
            KEY events_by_type (session_id, type, seq),
            KEY events_turn_starts (session_id, turn_start, seq),
            KEY events_by_author (session_id, author_id, seq),
            KEY events_by_model (embedding_model, row_id),
            FULLTEXT KEY events_search (search_tokens),
            CONSTRAINT events_session FOREIGN KEY (session_id) REFERENCES sessions (id)
                ON DELETE CASCADE
        )"""
        + _TABLE,
        """CREATE TABLE IF NOT EXISTS indexed_metadata_keys (
            name VARCHAR(64) NOT NULL PRIMARY KEY
        )"""
        + _TABLE,
        # The JDBC seed's metadata index: (name, the value's first 512 characters) keeps
        # the key under InnoDB's 3072-byte limit; the whole value is compared on the
        # rows the index finds.
        """CREATE TABLE IF NOT EXISTS session_metadata (
            session_id VARCHAR(255) NOT NULL,
            name VARCHAR(64) NOT NULL,
            value_prefix VARCHAR(512) NOT NULL,
            value LONGTEXT NOT NULL,
            PRIMARY KEY (session_id, name),
            KEY session_metadata_lookup (name, value_prefix),
            CONSTRAINT session_metadata_session FOREIGN KEY (session_id)
                REFERENCES sessions (id) ON DELETE CASCADE
        )"""
        + _TABLE,
        # The vector index declared from the store's embedder: one row.
        """CREATE TABLE IF NOT EXISTS vector_index (
            id TINYINT NOT NULL PRIMARY KEY,
            dimensions INT NOT NULL,
            metric VARCHAR(16) NOT NULL,
            model VARCHAR(255) NOT NULL
        )"""
        + _TABLE,
    ),
    (
        # Which declaration MariaDB's own vector index was built for, once its backfill
        # is complete (see `native_vectors`; servers without one leave it empty).
        """CREATE TABLE IF NOT EXISTS native_vector_state (
            id TINYINT NOT NULL PRIMARY KEY,
            dimensions INT NOT NULL,
            metric VARCHAR(16) NOT NULL,
            model VARCHAR(255) NOT NULL
        )"""
        + _TABLE,
    ),
    (
        # The change feed of the vector cache, in commit order (see `vector_feed`): the
        # last position handed out, under whose row lock each write that touches a
        # vector takes the next; and the changes at each position (a row's: its row_id,
        # session_id ''; a deleted session's: row_id 0).
        """CREATE TABLE IF NOT EXISTS vector_feed (
            id TINYINT NOT NULL PRIMARY KEY,
            position BIGINT NOT NULL,
            pruned BIGINT NOT NULL
        )"""
        + _TABLE,
        "INSERT IGNORE INTO vector_feed (id, position, pruned) VALUES (1, 0, 0)",
        """CREATE TABLE IF NOT EXISTS vector_changes (
            position BIGINT NOT NULL,
            row_id BIGINT NOT NULL,
            session_id VARCHAR(255) NOT NULL,
            PRIMARY KEY (position, row_id, session_id)
        )"""
        + _TABLE,
        # One row: every write to MariaDB's graph holds it shared until it commits, and
        # a build of the graph waits for it exclusively (see `native_vectors`).
        "CREATE TABLE IF NOT EXISTS native_vector_guard (id TINYINT NOT NULL PRIMARY KEY)" + _TABLE,
        "INSERT IGNORE INTO native_vector_guard (id) VALUES (1)",
    ),
)

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this code writes and reads."""

# The versions applied (see `convostore.backends.sql.migrate`).
VERSION_TABLE: Final = VersionTable(
    exists=(
        "SELECT count(*) FROM information_schema.tables"
        " WHERE table_schema = DATABASE() AND table_name = 'convostore_schema'"
    ),
    recorded="SELECT coalesce(max(version), 0) FROM convostore_schema",
    create=(
        "CREATE TABLE IF NOT EXISTS convostore_schema (version INT NOT NULL PRIMARY KEY,"
        " applied_at BIGINT NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    ),
    record=(
        "INSERT INTO convostore_schema (version, applied_at) VALUES (%(version)s, %(applied_at)s)"
    ),
)
# A named lock is the server's, not the database's: its name holds a digest of the
# database's name (at most 64 characters). Waits up to the given seconds.
TAKE_MIGRATION_LOCK: Final = "SELECT GET_LOCK(%s, %s)"
RELEASE_MIGRATION_LOCK: Final = "SELECT RELEASE_LOCK(%s)"
STOPWORDS_OFF: Final = "SET SESSION innodb_ft_enable_stopword = 0"
SERVER_VERSION: Final = "SELECT VERSION(), @@max_allowed_packet"

# Characters of a metadata value the index holds.
VALUE_PREFIX_LENGTH: Final = 512


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What connect learned about the server: MariaDB or MySQL, its version, and the
    collation ids and keys compare in."""

    family: str
    version: tuple[int, ...]
    collation: str
    max_packet: int = 16 * 1024 * 1024


def server_facts(version_text: str, max_packet: int) -> ServerFacts:
    """The facts of a server from its ``VERSION()`` (``10.11.6-MariaDB-0+deb12u1`` or
    ``8.0.36``) and its ``max_allowed_packet``."""
    family = "mariadb" if "mariadb" in version_text.lower() else "mysql"
    return ServerFacts(family, version_tuple(version_text), TEXT_COLLATIONS[family], max_packet)


def version_tuple(version: str) -> tuple[int, ...]:
    """``"10.11.6-MariaDB"`` as (10, 11, 6); what is not a number ends it."""
    numbers: list[int] = []
    for part in version.split("-", 1)[0].split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


def migration_lock_name(database: str) -> str:
    return "convostore:" + hashlib.sha256(database.encode()).hexdigest()[:40]
