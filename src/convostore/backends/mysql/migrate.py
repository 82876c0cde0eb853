"""What runs at connect: the database created if absent and the schema migrated under
a named lock; and the metadata keys indexed (added and backfilled, or removed)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Final

from asyncmy import errors

from convostore.backends.migrations import pending
from convostore.backends.mysql.connection import (
    DRIVER,
    ER_BAD_DB_ERROR,
    Connection,
    error_code,
    open_connection,
)
from convostore.backends.mysql.schema import (
    MIGRATIONS,
    RELEASE_MIGRATION_LOCK,
    SERVER_VERSION,
    STOPWORDS_OFF,
    TAKE_MIGRATION_LOCK,
    VERSION_TABLE,
    ServerFacts,
    migration_lock_name,
    server_facts,
)
from convostore.backends.mysql.url import MySQLTarget
from convostore.backends.sql.aio import drive
from convostore.backends.sql.migrate import migrate, pending_migrations
from convostore.errors import BackendUnavailableError

__all__ = ["migration_lock", "prepare_database", "read_pending_migrations"]

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
        facts = await _server_facts(connection)
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
    name = migration_lock_name(target.database)
    (taken,) = await DRIVER.fetch_one(
        connection, TAKE_MIGRATION_LOCK, (name, MIGRATION_LOCK_WAIT_S)
    )
    if taken != 1:
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
    try:
        connection = await open_connection(target, target.database)
    except errors.OperationalError as error:
        if error_code(error) != ER_BAD_DB_ERROR:
            raise
        return pending(0, MIGRATIONS)
    try:
        steps = pending_migrations(VERSION_TABLE, MIGRATIONS, target.where)
        return await drive(DRIVER, connection, steps)
    finally:
        connection.close()


async def _server_facts(connection: Connection) -> ServerFacts:
    row = await DRIVER.fetch_one(connection, SERVER_VERSION)
    return server_facts(str(row[0]), int(row[1]))


async def _connect_creating(target: MySQLTarget) -> Connection:
    try:
        return await open_connection(target, target.database)
    except errors.OperationalError as error:
        if error_code(error) != ER_BAD_DB_ERROR:
            raise
    connection = await open_connection(target, None)
    try:
        facts = await _server_facts(connection)
        # The name matched DATABASE_NAME: letters, digits and underscores only.
        statement = CREATE_DATABASE.format(name=target.database, collation=facts.collation)
        await DRIVER.execute(connection, statement)
    finally:
        connection.close()
    return await open_connection(target, target.database)
