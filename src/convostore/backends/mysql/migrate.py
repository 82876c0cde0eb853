"""What runs at connect: the database created if absent and the schema migrated under
a named lock; and the metadata keys indexed (added and backfilled, or removed)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Final

from asyncmy import errors

from convostore.backends.migrations import pending
from convostore.backends.mysql.connection import (
    ER_BAD_DB_ERROR,
    Connection,
    error_code,
    open_connection,
)
from convostore.backends.mysql.operations import execute, fetch_all, fetch_one
from convostore.backends.mysql.schema import (
    CREATE_SCHEMA_TABLE,
    DELETE_INDEXED_KEY,
    DELETE_KEY_ENTRIES,
    INSERT_INDEXED_KEY,
    MIGRATIONS,
    RECORD_MIGRATION,
    RECORDED_VERSION,
    RELEASE_MIGRATION_LOCK,
    SCHEMA_TABLE_EXISTS,
    SCHEMA_VERSION,
    SELECT_INDEXED_KEYS,
    SERVER_VERSION,
    SESSIONS_WITH_KEY,
    STOPWORDS_OFF,
    TAKE_MIGRATION_LOCK,
    VALUE_PREFIX_LENGTH,
    ServerFacts,
    applied_at,
    migration_lock_name,
    migration_statements,
    refuse_newer,
    server_facts,
)
from convostore.backends.mysql.statements import INSERT_METADATA_ENTRY, LOCK_INDEXED_KEYS
from convostore.backends.mysql.url import MySQLTarget
from convostore.backends.sql.decisions import backfill
from convostore.errors import BackendUnavailableError

__all__ = [
    "add_indexed_keys",
    "migration_lock",
    "prepare_database",
    "read_pending_migrations",
    "remove_indexed_key",
]

# How long a store waits for another one's migration, in seconds.
MIGRATION_LOCK_WAIT_S: Final = 300
# The database's defaults, for tables made by hand later; convostore's own tables
# name utf8mb4 themselves.
CREATE_DATABASE: Final = (
    "CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE {collation}"
)


async def prepare_database(target: MySQLTarget) -> ServerFacts:
    """Create the database if it is absent and migrate it to `SCHEMA_VERSION`; the
    server's facts."""
    connection = await _connect_creating(target)
    try:
        row = await fetch_one(connection, SERVER_VERSION)
        facts = server_facts(str(row[0]), int(row[1]))
        async with migration_lock(connection, target):
            await _migrate(connection, target, facts)
        return facts
    finally:
        connection.close()


@contextlib.asynccontextmanager
async def migration_lock(connection: Connection, target: MySQLTarget) -> AsyncIterator[None]:
    """The database's migration lock, held by ``connection`` (schema changes run under
    it, one store at a time)."""
    name = migration_lock_name(target.database)
    (taken,) = await fetch_one(connection, TAKE_MIGRATION_LOCK, (name, MIGRATION_LOCK_WAIT_S))
    if taken != 1:
        raise BackendUnavailableError(
            f"{target.where}: another store held the migration lock for {MIGRATION_LOCK_WAIT_S} s"
        )
    try:
        yield
    finally:
        if connection.connected:
            await fetch_one(connection, RELEASE_MIGRATION_LOCK, (name,))


async def read_pending_migrations(target: MySQLTarget) -> list[str]:
    """The migrations `prepare_database` would apply, read without writing or locking:
    a database that does not exist yet has them all pending."""
    try:
        connection = await open_connection(target, target.database)
    except errors.OperationalError as error:
        if error_code(error) != ER_BAD_DB_ERROR:
            raise
        return pending(0, MIGRATIONS)
    try:
        version = await _recorded_version(connection)
    finally:
        connection.close()
    refuse_newer(version, target.where)
    return pending(version, MIGRATIONS)


async def _connect_creating(target: MySQLTarget) -> Connection:
    try:
        return await open_connection(target, target.database)
    except errors.OperationalError as error:
        if error_code(error) != ER_BAD_DB_ERROR:
            raise
    connection = await open_connection(target, None)
    try:
        row = await fetch_one(connection, SERVER_VERSION)
        facts = server_facts(str(row[0]), int(row[1]))
        # The name matched DATABASE_NAME: letters, digits and underscores only.
        await execute(
            connection, CREATE_DATABASE.format(name=target.database, collation=facts.collation)
        )
    finally:
        connection.close()
    return await open_connection(target, target.database)


async def _recorded_version(connection: Connection) -> int:
    (exists,) = await fetch_one(connection, SCHEMA_TABLE_EXISTS)
    if not exists:
        return 0
    (version,) = await fetch_one(connection, RECORDED_VERSION)
    return int(version)


async def _migrate(connection: Connection, target: MySQLTarget, facts: ServerFacts) -> None:
    version = await _recorded_version(connection)
    refuse_newer(version, target.where)
    if version == SCHEMA_VERSION:
        return
    await execute(connection, CREATE_SCHEMA_TABLE.format(collation=facts.collation))
    # FULLTEXT indexes made by this connection index every word: none is a stopword.
    await execute(connection, STOPWORDS_OFF)
    for number in range(version + 1, SCHEMA_VERSION + 1):
        for statement in migration_statements(number, facts):
            await execute(connection, statement)
        await execute(connection, RECORD_MIGRATION, (number, applied_at()))


async def add_indexed_keys(connection: Connection, keys: frozenset[str]) -> frozenset[str]:
    """Index ``keys`` too, each new one recorded and backfilled in one transaction (the
    key's row lock makes a store connecting at the same moment wait, then skip it).
    Every key the database indexes."""
    indexed = {str(row[0]) for row in await fetch_all(connection, SELECT_INDEXED_KEYS)}
    for name in sorted(keys - indexed):
        await connection.begin()
        try:
            # Session writes in flight commit first; later ones wait for this one.
            await fetch_all(connection, LOCK_INDEXED_KEYS)
            added = await execute(connection, INSERT_INDEXED_KEY, (name,))
            if added:
                # Key names are [A-Za-z0-9_.:-]: quoted, each is one step of a JSON path.
                path = '$."' + name + '"'
                rows: list[Any] = await fetch_all(connection, SESSIONS_WITH_KEY, (path,))
                entries = [
                    (session_id, name, value[:VALUE_PREFIX_LENGTH], value)
                    for value, session_id in backfill(name, rows)
                ]
                if entries:
                    async with connection.cursor() as cursor:
                        await cursor.executemany(INSERT_METADATA_ENTRY, entries)
            await connection.commit()
        except BaseException:
            if connection.connected:
                await connection.rollback()
            raise
    return frozenset(indexed | keys)


async def remove_indexed_key(connection: Connection, key: str) -> bool:
    """Stop indexing ``key`` and delete its entries (in the caller's transaction), once
    every session write in flight has committed."""
    await fetch_all(connection, LOCK_INDEXED_KEYS)
    if not await execute(connection, DELETE_INDEXED_KEY, (key,)):
        return False
    await execute(connection, DELETE_KEY_ENTRIES, (key,))
    return True
