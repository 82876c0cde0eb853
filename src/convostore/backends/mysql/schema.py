"""The schema as versioned migrations, and what runs at connect to bring a database to it
(`prepare_database`).

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

import contextlib
import hashlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Final

from asyncmy import errors

from convostore.backends.migrations import pending
from convostore.backends.mysql.connection import (
    DRIVER,
    ER_BAD_DB_ERROR,
    Connection,
    ServerFacts,
    error_code,
    open_connection,
    read_server_facts,
)
from convostore.backends.mysql.url import MySQLTarget
from convostore.backends.sql import tables
from convostore.backends.sql.aio import drive
from convostore.backends.sql.migrate import VersionTable, migrate, pending_migrations
from convostore.backends.sql.tables import Column, Table, Type
from convostore.errors import BackendUnavailableError

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "TOKEN_PREFIX",
    "migration_lock",
    "prepare_database",
    "read_pending_migrations",
]

# Put before every indexed word: two characters lift a one-letter word to InnoDB's
# default minimum token size of three, and no stopword starts with them.
TOKEN_PREFIX: Final = "qz"
DDL: Final = tables.DDL(
    tables.MYSQL,
    types={
        Type.ID: "VARCHAR({size})", Type.LABEL: "VARCHAR({size})", Type.TEXT: "LONGTEXT",
        Type.JSON: "LONGTEXT", Type.TIME: "BIGINT", Type.BIGINT: "BIGINT", Type.INT: "INT",
        Type.FLAG: "TINYINT", Type.VECTOR: "LONGBLOB", Type.ONE: "TINYINT",
    },
    options=" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC",
    if_not_exists=True,
    inline=True,
)  # fmt: skip
_ONE_ROW: Final = Column("id", Type.ONE)
_BIGINT: Final = Type.BIGINT
# The change feed of the vector cache, in commit order (see `vector_feed`): the last
# position handed out, under whose row lock each write that touches a vector takes the
# next; and the changes at each position (a row's: its row_id, session_id ''; a deleted
# session's: row_id 0).
_VECTOR_FEED: Final = Table(
    "vector_feed", (_ONE_ROW, Column("position", _BIGINT), Column("pruned", _BIGINT)), "id"
)
_VECTOR_CHANGES: Final = Table(
    "vector_changes",
    (Column("position", _BIGINT), Column("row_id", _BIGINT), Column("session_id", Type.ID)),
    "position, row_id, session_id",
)
# One row: every write to MariaDB's graph holds it shared until it commits, and a build
# of the graph waits for it exclusively (see `native_vectors`).
_NATIVE_VECTOR_GUARD: Final = Table("native_vector_guard", (_ONE_ROW,), "id")

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    DDL.create(tables.TABLES),
    # Which declaration MariaDB's own vector index was built for, once its backfill is
    # complete (see `native_vectors`; servers without one leave it empty).
    DDL.create([replace(tables.VECTOR_INDEX, name="native_vector_state")]),
    (
        *DDL.create([_VECTOR_FEED]),
        "INSERT IGNORE INTO vector_feed (id, position, pruned) VALUES (1, 0, 0)",
        *DDL.create([_VECTOR_CHANGES, _NATIVE_VECTOR_GUARD]),
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
# How long a store waits for another one's migration, in seconds.
MIGRATION_LOCK_WAIT_S: Final = 300
STOPWORDS_OFF: Final = "SET SESSION innodb_ft_enable_stopword = 0"
# The database's defaults, for tables made by hand later; convostore's own tables
# name utf8mb4 themselves.
CREATE_DATABASE: Final = (
    "CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE {collation}"
)

# Characters of a metadata value the index holds.
VALUE_PREFIX_LENGTH: Final = 512


async def prepare_database(target: MySQLTarget) -> ServerFacts:
    """Create the database if it is absent and migrate it to `SCHEMA_VERSION`; the
    server's facts."""
    connection = await _connect_creating(target)
    try:
        facts = await read_server_facts(connection)
        migrations = [[s.format(collation=facts.collation) for s in step] for step in MIGRATIONS]
        async with migration_lock(connection, target):
            # FULLTEXT indexes made by this connection index every word: none is a stopword.
            steps = migrate(VERSION_TABLE, migrations, target.where, (STOPWORDS_OFF,))
            await drive(DRIVER, connection, steps)
        return facts
    finally:
        connection.close()


@contextlib.asynccontextmanager
async def migration_lock(connection: Connection, target: MySQLTarget) -> AsyncIterator[None]:
    """The database's migration lock, held by ``connection`` (schema changes run under
    it, one store at a time)."""
    name = "convostore:" + hashlib.sha256(target.database.encode()).hexdigest()[:40]
    wait = (name, MIGRATION_LOCK_WAIT_S)
    if (await DRIVER.fetch_one(connection, TAKE_MIGRATION_LOCK, wait))[0] != 1:
        raise BackendUnavailableError(
            f"{target.where}: another store held the migration lock for {MIGRATION_LOCK_WAIT_S} s"
        )
    try:
        yield
    finally:
        if connection.connected:
            await DRIVER.fetch_one(connection, RELEASE_MIGRATION_LOCK, (name,))


async def read_pending_migrations(target: MySQLTarget) -> list[str]:
    """The migrations `prepare_database` would apply, read without writing or locking:
    a database that does not exist yet has them all pending."""
    connection = await _connect_if_present(target)
    if connection is None:
        return pending(0, MIGRATIONS)
    try:
        steps = pending_migrations(VERSION_TABLE, MIGRATIONS, target.where)
        return await drive(DRIVER, connection, steps)
    finally:
        connection.close()


async def _connect_if_present(target: MySQLTarget) -> Connection | None:
    """A connection to the target's database, or None where it does not exist."""
    try:
        return await open_connection(target, target.database)
    except errors.OperationalError as error:
        if error_code(error) != ER_BAD_DB_ERROR:
            raise
    return None


async def _connect_creating(target: MySQLTarget) -> Connection:
    if (present := await _connect_if_present(target)) is not None:
        return present
    connection = await open_connection(target, None)
    try:
        facts = await read_server_facts(connection)
        # The name matched DATABASE_NAME: letters, digits and underscores only.
        statement = CREATE_DATABASE.format(name=target.database, collation=facts.collation)
        await DRIVER.execute(connection, statement)
    finally:
        connection.close()
    return await open_connection(target, target.database)
