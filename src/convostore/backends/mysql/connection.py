"""How a store's connections are opened and set up, how asyncmy runs statements and
transactions (`DRIVER`), and where its errors end.

Every connection is in autocommit mode, in utf8mb4, with times in UTC, strict SQL mode
(a value too long for its column is an error, never cut) and READ COMMITTED as its
isolation level. A primitive that is one statement is its own transaction. One of
several statements runs in `convostore.backends.sql.aio.in_transaction`: READ
COMMITTED, because every write serialises where it must on a row lock it takes first
(the session's row, FOR UPDATE) and then sees what committed before it; REPEATABLE
READ's gap locks would add deadlocks between appends to different sessions and nothing
a write needs. Reads of several statements run in `snapshot` (REPEATABLE READ, one
consistent snapshot).

InnoDB may still end a transaction as a deadlock victim or after a lock wait timeout:
such a transaction is run again (`MySQLDriver.retryable`), a bounded number of times,
then raises `ConflictError` (deadlock) or `BackendUnavailableError` (lock wait timeout).

On a Galera cluster (`ServerFacts.galera`) a transaction that loses certification to a
concurrent one of another node ends with the same deadlock error at commit, and is run
again the same way; so is a statement a node refused because it is not ready (joining,
or cut off from the primary component: error 1047), which ran nothing. A statement
that is a transaction of its own is run again on the same terms (`MySQLDriver`), where
the server's own ``wsrep_retry_autocommit`` did not already succeed. Each connection
reads with ``wsrep_sync_wait = 1``: a read sees every write any node acknowledged
before it began.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import asyncmy
from asyncmy import errors
from asyncmy.connection import Connection
from asyncmy.pool import Pool

from convostore.backends.migrations import version_tuple
from convostore.backends.mysql.url import MySQLTarget
from convostore.backends.sql.aio import CursorDriver
from convostore.errors import (
    BackendUnavailableError,
    ConflictError,
    InvalidArgumentError,
    StoreError,
)

__all__ = [
    "DRIVER",
    "Connection",
    "ServerFacts",
    "check_size",
    "connect_options",
    "is_connection_lost",
    "node_ready",
    "open_connection",
    "open_pool",
    "read_server_facts",
    "server_facts",
    "session_setup",
    "snapshot",
    "translate_error",
]

# Server error numbers convostore tells apart.
ER_LOCK_WAIT_TIMEOUT: Final = 1205
ER_LOCK_DEADLOCK: Final = 1213
ER_DUP_ENTRY: Final = 1062
ER_BAD_DB_ERROR: Final = 1049
# "WSREP has not yet prepared node for application use": a Galera node that is not
# Synced in the primary component refuses every statement, having run none.
ER_WSREP_NOT_READY: Final = 1047
# Errors after which a statement (or transaction) that raised them ran nothing and may
# be run again as it was.
_RUN_AGAIN: Final = frozenset({ER_LOCK_DEADLOCK, ER_WSREP_NOT_READY})
# How many times a statement that is its own transaction is run again after one.
_STATEMENT_RETRIES: Final = 5
_STATEMENT_RETRY_BASE_S: Final = 0.01
# Connection lost, refused, killed, server shutting down or gone away.
# A Galera node not ready (1047) is as good as lost: the store moves to another node.
_CONNECTION_LOST: Final = frozenset(
    {1053, 1077, 1927, 2002, 2003, 2006, 2013, 2055, 4031, ER_WSREP_NOT_READY}
)
# What the other errors convostore tells apart become: the error, and what its message adds.
_TRANSLATED: Final[dict[int | None, tuple[type[StoreError], str]]] = {
    ER_LOCK_DEADLOCK: (ConflictError, ": still deadlocked after the retries; try again"),
    ER_LOCK_WAIT_TIMEOUT: (BackendUnavailableError, ": a lock stayed held by another transaction"),
    **dict.fromkeys(
        (1044, 1045, 1142, 1143, 1227, 1370),
        (BackendUnavailableError, " (the user lacks a privilege convostore needs)"),
    ),
    # Values the column cannot hold: too long, out of range, wrong string for the charset.
    **dict.fromkeys((1264, 1366, 1406, 1367, 3140, 4025), (InvalidArgumentError, "")),
}
_SQL_MODE: Final = (
    "STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION"
)
# The session variable of the isolation level, by server family (MariaDB before 11.1
# knows only the older name, MySQL 8 only the newer).
_ISOLATION_VARIABLE: Final = {"mariadb": "tx_isolation", "mysql": "transaction_isolation"}
_REPEATABLE_READ: Final = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"
_SNAPSHOT: Final = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"


# The id collation by server family: code point order, no padding.
TEXT_COLLATIONS: Final = {"mariadb": "utf8mb4_nopad_bin", "mysql": "utf8mb4_0900_bin"}
SERVER_VERSION: Final = "SELECT VERSION(), @@max_allowed_packet"
# One row (wsrep_on, ON) on a MariaDB node of a Galera cluster; none on MySQL.
WSREP_ON: Final = "SHOW VARIABLES LIKE 'wsrep_on'"
# A Galera node's readiness: one row (wsrep_ready, ON) when it takes statements.
WSREP_READY: Final = "SHOW STATUS LIKE 'wsrep_ready'"


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What connect learned about the server: MariaDB or MySQL, its version, the
    collation ids and keys compare in, the largest statement it takes, and whether it
    is a node of a Galera cluster (wsrep on)."""

    family: str
    version: tuple[int, ...]
    collation: str
    max_packet: int = 16 * 1024 * 1024
    galera: bool = False


def server_facts(version_text: str, max_packet: int, galera: bool = False) -> ServerFacts:
    """The facts of a server from its ``VERSION()`` (``10.11.6-MariaDB-0+deb12u1`` or
    ``8.0.36``), its ``max_allowed_packet`` and whether wsrep is on."""
    family = "mariadb" if "mariadb" in version_text.lower() else "mysql"
    collation = TEXT_COLLATIONS[family]
    return ServerFacts(family, version_tuple(version_text), collation, max_packet, galera)


class MySQLDriver(CursorDriver[Connection]):
    # The driver's errors, and what a dropped socket raises below it.
    exceptions = (errors.MySQLError, OSError, asyncio.IncompleteReadError)

    def translate(self, error: BaseException, where: str) -> StoreError:
        return translate_error(error, where)

    def duplicate(self, error: Exception) -> bool:
        return isinstance(error, errors.IntegrityError) and error_code(error) == ER_DUP_ENTRY

    @contextlib.asynccontextmanager
    async def transaction(self, connection: Connection) -> AsyncIterator[None]:
        await connection.begin()
        try:
            yield
            await connection.commit()
        except BaseException as error:
            # A lost connection has no transaction left to roll back.
            if connection.connected and not is_connection_lost(error):
                await connection.rollback()
            raise

    def lost(self, error: BaseException) -> bool:
        return is_connection_lost(error)

    def retryable(self, error: BaseException) -> bool:
        return isinstance(error, errors.OperationalError) and error_code(error) in (
            ER_LOCK_DEADLOCK,
            ER_LOCK_WAIT_TIMEOUT,
            ER_WSREP_NOT_READY,
        )

    # A statement outside a transaction is a transaction of its own: a deadlock (on
    # Galera, a lost certification) or a node not ready ran nothing of it, so it is run
    # again, a bounded number of times. Inside one, `in_transaction` runs the whole again.

    async def fetch_one(self, connection: Any, statement: str, parameters: Any = None) -> Any:
        return await self._alone(super().fetch_one, connection, statement, parameters)

    async def fetch_all(self, connection: Any, statement: str, parameters: Any = None) -> list[Any]:
        rows: list[Any] = await self._alone(super().fetch_all, connection, statement, parameters)
        return rows

    async def execute(self, connection: Any, statement: str, parameters: Any = None) -> int:
        changed: int = await self._alone(super().execute, connection, statement, parameters)
        return changed

    async def _alone(
        self,
        run: Callable[[Any, str, Any], Awaitable[Any]],
        connection: Connection,
        statement: str,
        parameters: Any,
    ) -> Any:
        if connection.get_transaction_status():
            return await run(connection, statement, parameters)
        for attempt in range(_STATEMENT_RETRIES + 1):
            try:
                return await run(connection, statement, parameters)
            except errors.OperationalError as error:
                if attempt == _STATEMENT_RETRIES or error_code(error) not in _RUN_AGAIN:
                    raise
            await asyncio.sleep(_STATEMENT_RETRY_BASE_S * 2**attempt * (0.5 + random.random()))
        raise AssertionError("unreachable")  # pragma: no cover


DRIVER: Final = MySQLDriver()
fetch_one = DRIVER.fetch_one
fetch_all = DRIVER.fetch_all
execute = DRIVER.execute
# What a statement's text costs beyond its values, with room to spare.
_STATEMENT_MARGIN: Final = 64 * 1024


def check_size(parameters: Iterable[Any], limit: int, what: str) -> None:
    """`InvalidArgumentError` for values that make a statement larger than the server
    accepts (its ``max_allowed_packet``), which it would answer by dropping the
    connection. Text is counted at its worst (four bytes a character: an escaped one
    takes two), and exactly only when that is too much: its UTF-8 bytes, and one more
    for each the driver escapes."""
    texts = [value for value in parameters if isinstance(value, str | bytes)]
    room = limit - _STATEMENT_MARGIN
    if sum(map(len, texts)) * 4 <= room:
        return
    size = sum(map(_escaped_size, texts))
    if size > room:
        raise InvalidArgumentError(
            f"{what} is too large for this server: about {size} bytes, and its "
            f"max_allowed_packet is {limit}"
        )


# The bytes the driver writes as two in a statement's text (a backslash before each).
_ESCAPED_BYTES: Final = tuple(bytes([b]) for b in b"\\'\"\n\r\x00\x1a")


def _escaped_size(value: str | bytes) -> int:
    """How many bytes ``value`` takes in a statement's text, without its quotes."""
    data = value.encode() if isinstance(value, str) else value
    return len(data) + sum(data.count(b) for b in _ESCAPED_BYTES)


def session_setup(facts: ServerFacts) -> str:
    """The statement every connection of a store runs first (its ``init_command``)."""
    isolation = _ISOLATION_VARIABLE[facts.family]
    # Causal reads on Galera: a node first applies what the cluster committed before.
    causal = "SESSION wsrep_sync_wait = 1, " if facts.galera else ""
    return (
        f"SET SESSION sql_mode = '{_SQL_MODE}', SESSION time_zone = '+00:00', "
        f"SESSION {isolation} = 'READ-COMMITTED', {causal}"
        f"NAMES utf8mb4 COLLATE {facts.collation}"
    )


def connect_options(target: MySQLTarget, database: str | None) -> dict[str, Any]:
    """asyncmy's connect arguments for ``target`` (``database`` None: no default one)."""
    options: dict[str, Any] = {
        "user": target.user,
        "password": target.password or "",
        "database": database,
        "charset": "utf8mb4",
        "autocommit": True,
        "connect_timeout": max(1, round(target.connect_timeout)),
        "ssl": target.ssl_context(),
    }
    if target.unix_socket is not None:
        options["unix_socket"] = target.unix_socket
    else:
        options["host"] = target.host
        options["port"] = target.port
    return options


async def open_connection(target: MySQLTarget, database: str | None) -> Connection:
    """One connection outside the pool (for connect's migration)."""
    connection: Connection = await asyncmy.connect(**connect_options(target, database))
    return connection


async def read_server_facts(connection: Connection) -> ServerFacts:
    row = await DRIVER.fetch_one(connection, SERVER_VERSION)
    wsrep = await DRIVER.fetch_one(connection, WSREP_ON)
    galera = wsrep is not None and str(wsrep[1]).upper() == "ON"
    return server_facts(str(row[0]), int(row[1]), galera)


async def node_ready(connection: Connection) -> bool:
    """Whether the server takes statements: always, but for a Galera node that is not
    Synced in the primary component (``wsrep_ready`` OFF)."""
    row = await DRIVER.fetch_one(connection, WSREP_READY)
    return row is None or str(row[1]).upper() == "ON"


async def open_pool(target: MySQLTarget, facts: ServerFacts) -> Pool:
    """The store's pool, its first connections open and set up."""
    options = connect_options(target, target.database)
    options["init_command"] = session_setup(facts)
    pool: Pool = await asyncmy.create_pool(
        minsize=target.pool_min_size,
        maxsize=target.pool_max_size,
        # Connections idle for an hour are replaced, well before the server's
        # wait_timeout (8 hours by default) closes them.
        pool_recycle=3600,
        **options,
    )
    return pool


@contextlib.asynccontextmanager
async def snapshot(connection: Connection) -> AsyncIterator[None]:
    """The block in one read-only consistent snapshot."""
    cursor = connection.cursor()
    await cursor.execute(_REPEATABLE_READ)
    await cursor.execute(_SNAPSHOT)
    try:
        yield
    finally:
        if connection.connected:
            await connection.rollback()


def error_code(error: BaseException) -> int | None:
    """The server's (or the client's) error number, where the error has one."""
    if error.args and isinstance(error.args[0], int):
        return error.args[0]
    return None


def is_connection_lost(error: BaseException) -> bool:
    """Whether the error means the connection it came from is unusable."""
    if isinstance(error, errors.InterfaceError | ConnectionError | asyncio.IncompleteReadError):
        return True
    return isinstance(error, errors.OperationalError) and error_code(error) in _CONNECTION_LOST


def translate_error(error: BaseException, where: str) -> StoreError:
    """The convostore error to raise (``from error``) for a driver error:
    `BackendUnavailableError` when the server cannot be used (lost connection, shutdown,
    missing privilege, lock wait timeout after the retries), `ConflictError` for a
    deadlock after the retries, `InvalidArgumentError` for a value a column cannot
    hold, else `StoreError`."""
    code = error_code(error)
    message = error.args[1] if len(error.args) > 1 else str(error) or type(error).__name__
    detail = f"{where}: {message}" + ("" if code is None else f" ({code})")
    if is_connection_lost(error) or isinstance(error, OSError | asyncio.TimeoutError):
        return BackendUnavailableError(f"{detail}: the server cannot be reached")
    default = InvalidArgumentError if isinstance(error, errors.DataError) else StoreError
    kind, note = _TRANSLATED.get(code, (default, ""))
    return kind(detail + note)
