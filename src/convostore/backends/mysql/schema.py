"""The schema as versioned migrations, and what runs at connect to bring a database to it
(`prepare_database`).

``MIGRATIONS[i]`` takes a database from version i to i + 1; each applied version is a
row of ``convostore_schema``. Connect runs them under a named lock (``GET_LOCK``) per
database, so stores connecting at once migrate one after another, and refuses a schema
a newer convostore wrote. MySQL commits each DDL statement by itself, so every statement
is written to be run again safely after an interrupted migration. A database already at
`SCHEMA_VERSION` is opened without the lock.

On a Galera cluster a named lock is one node's only, so the lock is a row instead
(`cluster_lock`): taken by an UPDATE that finds it free, which commits on one node
only if no other node's taking of it was certified first (certification orders every
write of the cluster); held as a lease, renewed by a second connection while the
migration runs, so a store that dies holding it stops holding it within
`LEASE_S`; given back by an UPDATE of the holder's own.

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

import asyncio
import contextlib
import hashlib
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Final

from asyncmy import errors

from convostore.backends.migrations import pending
from convostore.backends.mysql.connection import (
    DRIVER,
    ER_BAD_DB_ERROR,
    ER_LOCK_DEADLOCK,
    WSREP_ON,
    Connection,
    ServerFacts,
    error_code,
    open_connection,
    read_server_facts,
)
from convostore.backends.mysql.url import MySQLTarget
from convostore.backends.sql import tables
from convostore.backends.sql.aio import drive
from convostore.backends.sql.migrate import (
    VersionTable,
    checked_version,
    migrate,
    pending_migrations,
)
from convostore.backends.sql.tables import Column, Table, Type
from convostore.errors import BackendUnavailableError

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "TOKEN_PREFIX",
    "cluster_lock",
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

# The migration lock of a Galera cluster (`cluster_lock`): one row, free when its
# holder is empty or its lease (seconds since the epoch, by the clock of the node that
# wrote it) has passed. Its own table, made before the schema: the lock guards the
# schema's creation too.
CLUSTER_LOCK_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS convostore_migration_lock (id TINYINT NOT NULL PRIMARY KEY,"
    " holder VARCHAR(64) NOT NULL, lease_until DOUBLE NOT NULL) ENGINE=InnoDB"
)
CLUSTER_LOCK_ROW: Final = (
    "INSERT IGNORE INTO convostore_migration_lock (id, holder, lease_until) VALUES (1, '', 0)"
)
TAKE_CLUSTER_LOCK: Final = (
    "UPDATE convostore_migration_lock SET holder = %s, lease_until = UNIX_TIMESTAMP(NOW(6)) + %s"
    " WHERE id = 1 AND (holder = '' OR lease_until < UNIX_TIMESTAMP(NOW(6)))"
)
RENEW_CLUSTER_LOCK: Final = (
    "UPDATE convostore_migration_lock SET lease_until = UNIX_TIMESTAMP(NOW(6)) + %s"
    " WHERE id = 1 AND holder = %s"
)
RELEASE_CLUSTER_LOCK: Final = (
    "UPDATE convostore_migration_lock SET holder = '', lease_until = 0 WHERE id = 1 AND holder = %s"
)
# Seconds a holder's lease lasts, and how often the holder renews it: a store that died
# holding the lock keeps others waiting this long at most.
LEASE_S: Final = 30.0
RENEW_EVERY_S: Final = 5.0
CAUSAL_READS: Final = "SET SESSION wsrep_sync_wait = 1"
# How often a store waiting for the lock tries it again.
CLUSTER_LOCK_POLL_S: Final = 0.05
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
        if await _up_to_date(connection, target):
            return facts
        async with migration_lock(connection, target, galera=facts.galera):
            # FULLTEXT indexes made by this connection index every word: none is a stopword.
            steps = migrate(VERSION_TABLE, migrations, target.where, (STOPWORDS_OFF,))
            await drive(DRIVER, connection, steps)
        return facts
    finally:
        connection.close()


async def _up_to_date(connection: Connection, target: MySQLTarget) -> bool:
    """Whether the database is at `SCHEMA_VERSION` (a newer one is refused)."""
    steps = checked_version(VERSION_TABLE, SCHEMA_VERSION, target.where)
    return await drive(DRIVER, connection, steps) == SCHEMA_VERSION


@contextlib.asynccontextmanager
async def migration_lock(
    connection: Connection, target: MySQLTarget, *, galera: bool | None = None
) -> AsyncIterator[None]:
    """The database's migration lock, held by ``connection`` (schema changes run under
    it, one store at a time): a named lock on one server, `cluster_lock` on a Galera
    node (``galera``; None: asked of the server)."""
    if galera is None:
        wsrep = await DRIVER.fetch_one(connection, WSREP_ON)
        galera = wsrep is not None and str(wsrep[1]).upper() == "ON"
    if galera:
        async with cluster_lock(connection, target):
            yield
        return
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


@contextlib.asynccontextmanager
async def cluster_lock(connection: Connection, target: MySQLTarget) -> AsyncIterator[None]:
    """The migration lock of a database on a Galera cluster, held by ``connection``'s
    store, waited for at most `MIGRATION_LOCK_WAIT_S` (`BackendUnavailableError`). Once
    its taking commits, this node has committed every write certified before it (Galera
    commits in the cluster's order): the block reads the schema its last holder left."""
    holder = secrets.token_hex(16)
    # And reads on this connection wait for the node to apply what the cluster committed.
    await DRIVER.execute(connection, CAUSAL_READS)
    await DRIVER.execute(connection, CLUSTER_LOCK_TABLE)
    await DRIVER.execute(connection, CLUSTER_LOCK_ROW)
    deadline = time.monotonic() + MIGRATION_LOCK_WAIT_S
    while not await _took(connection, holder):
        if time.monotonic() > deadline:
            raise BackendUnavailableError(
                f"{target.where}: another store held the migration lock for "
                f"{MIGRATION_LOCK_WAIT_S} s"
            )
        await asyncio.sleep(CLUSTER_LOCK_POLL_S)
    lost: list[str] = []
    # Told to stop, never cancelled: asyncmy may swallow a cancellation while it connects.
    done = asyncio.Event()
    renewing = asyncio.create_task(_renew(target, holder, lost, done))
    try:
        yield
    finally:
        done.set()
        await renewing
        if connection.connected:
            await DRIVER.execute(connection, RELEASE_CLUSTER_LOCK, (holder,))
    if lost:
        raise BackendUnavailableError(f"{target.where}: the migration lock was lost: {lost[0]}")


async def _took(connection: Connection, holder: str) -> bool:
    """One try at the cluster lock: taken when the UPDATE changed its row. A deadlock is
    another node's taking certified first (the server may already have run the UPDATE
    again, by ``wsrep_retry_autocommit``, and found the lock held)."""
    try:
        return await DRIVER.execute(connection, TAKE_CLUSTER_LOCK, (holder, LEASE_S)) == 1
    except errors.OperationalError as error:
        if error_code(error) != ER_LOCK_DEADLOCK:
            raise
    return False


async def _renew(target: MySQLTarget, holder: str, lost: list[str], done: asyncio.Event) -> None:
    """Renew ``holder``'s lease every `RENEW_EVERY_S` until ``done``, on a connection of
    its own (the holder's runs the migration), opened at the first renewal (most
    migrations end before it); what went wrong goes to ``lost``."""
    connection: Connection | None = None
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), RENEW_EVERY_S)
                return
            if connection is None:
                connection = await open_connection(target, target.database)
            renewed = await DRIVER.execute(connection, RENEW_CLUSTER_LOCK, (LEASE_S, holder))
            if renewed != 1:
                lost.append("its lease ran out and another store took it")
                return
    except (errors.MySQLError, OSError) as error:
        lost.append(f"the lease could not be renewed: {error}")
    finally:
        if connection is not None:
            connection.close()


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
