"""How a store's connections are opened, and the transactions its functions run in."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, TypeVarTuple, cast

from convostore._text import text_tokens
from convostore.backends.sql.steps import RollbackAndReturn
from convostore.backends.sqlite.url import SQLiteTarget

__all__ = [
    "BLANK_FUNCTION",
    "CACHED_STATEMENTS",
    "CONTAINS_FUNCTION",
    "MAX_GROUP",
    "NO_BUSY_WAIT",
    "TOKENS_FUNCTION",
    "Batch",
    "Batches",
    "RollbackAndReturn",
    "WriteLockBusy",
    "in_group_transaction",
    "in_read_snapshot",
    "in_write_transaction",
    "inline_write",
    "lock_held",
    "open_connection",
]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

CONTAINS_FUNCTION: Final = "convostore_contains"
BLANK_FUNCTION: Final = "convostore_blank"
TOKENS_FUNCTION: Final = "convostore_tokens"

BEGIN: Final = "BEGIN"
BEGIN_IMMEDIATE: Final = "BEGIN IMMEDIATE"
COMMIT: Final = "COMMIT"
ROLLBACK: Final = "ROLLBACK"
SAVEPOINT: Final = "SAVEPOINT convostore_write"
RELEASE: Final = "RELEASE convostore_write"
ROLLBACK_TO: Final = "ROLLBACK TO convostore_write"
# The most writes one group commit holds: enough to share one fsync among a busy
# server's conversations, few enough that the first of them is not kept waiting long.
MAX_GROUP: Final = 128
# Every statement a store runs is one of a bounded set (filters are joined from fixed
# fragments; a group's appends moved on at once, one per group size), so with this
# many slots each is prepared once per connection.
CACHED_STATEMENTS: Final = 512 + MAX_GROUP
FOREIGN_KEYS_ON: Final = "PRAGMA foreign_keys = ON"
NO_BUSY_WAIT: Final = "PRAGMA busy_timeout = 0"
_LOCK_HELD: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
QUERY_ONLY: Final = "PRAGMA query_only = ON"
SYNCHRONOUS: Final = {
    "FULL": "PRAGMA synchronous = FULL",
    "NORMAL": "PRAGMA synchronous = NORMAL",
    "EXTRA": "PRAGMA synchronous = EXTRA",
}


def _as_is(value: bytes | int | None) -> bytes | int | None:
    return value


def bind_as_is() -> None:
    """Let the sqlite3 module bind None, bool and bytes values without a failed lookup.

    On Python 3.11 it looks for an adapter of every parameter that is not exactly an
    int, float, str or bytearray; finding none, it looks up ``__adapt__`` on its
    protocol type, which raises and clears an AttributeError each time: about 0.4 µs a
    value, and an append binds some fifteen NULLs. An adapter that returns the value as
    it is ends that search at the registry and binds what it always bound. One is
    registered only where none is, so an application's own adapter stays; Python 3.12
    and later skip the lookup by themselves.
    """
    for kind in (type(None), bool, bytes):
        sqlite3.adapters.setdefault((kind, sqlite3.PrepareProtocol), _as_is)


if sys.version_info < (3, 12):
    bind_as_is()


def contains(content: str | None, needle: str) -> bool:
    """The text filter exactly as `EventFilter.matches` has it: Python's case folding,
    and no wildcard characters."""
    return content is not None and needle.lower() in content.lower()


def blank(content: str | None) -> bool:
    """Whether a message has nothing to embed, as `str.strip` sees whitespace (SQL's
    trim() knows only the space)."""
    return content is None or not content.strip()


def tokens(content: str | None) -> str | None:
    """The words text search matches in ``content`` (`text_tokens`), space-separated:
    what the full-text index holds for a message."""
    return None if content is None else " ".join(text_tokens(content))


def open_connection(
    target: SQLiteTarget, *, reader: bool, shared: bool = False
) -> sqlite3.Connection:
    """A connection set up as every connection of a store is. Transactions are explicit
    (``isolation_level=None``); a reader's connection refuses to write. A ``shared``
    one is used by more than one thread, one at a time under a lock of its user's."""
    connection = sqlite3.connect(
        target.path,
        timeout=target.busy_timeout_ms / 1000,
        isolation_level=None,
        cached_statements=CACHED_STATEMENTS,
        check_same_thread=not shared,
    )
    try:
        connection.create_function(CONTAINS_FUNCTION, 2, contains, deterministic=True)
        connection.create_function(BLANK_FUNCTION, 1, blank, deterministic=True)
        connection.create_function(TOKENS_FUNCTION, 1, tokens, deterministic=True)
        connection.execute(FOREIGN_KEYS_ON)
        connection.execute(SYNCHRONOUS[target.synchronous])
        if reader:
            connection.execute(QUERY_ONLY)
    except BaseException:
        connection.close()
        raise
    return connection


def in_write_transaction(
    connection: sqlite3.Connection, fn: Callable[[sqlite3.Connection, *Ts], T], args: tuple[*Ts]
) -> T:
    """``fn`` inside BEGIN IMMEDIATE ... COMMIT: the write lock is taken first, so what
    ``fn`` reads stays true until it commits. Any error rolls all of it back."""
    connection.execute(BEGIN_IMMEDIATE)
    return _commit_begun(connection, fn, args)


def _commit_begun(
    connection: sqlite3.Connection, fn: Callable[[sqlite3.Connection, *Ts], T], args: tuple[*Ts]
) -> T:
    try:
        result = fn(connection, *args)
        connection.execute(COMMIT)
    except RollbackAndReturn as rollback:
        connection.execute(ROLLBACK)
        return cast(T, rollback.value)
    except BaseException:
        _rollback_quietly(connection)
        raise
    return result


class WriteLockBusy(Exception):
    """`inline_write` found the write lock held by another connection: nothing ran."""


def inline_write(
    connection: sqlite3.Connection, fn: Callable[[sqlite3.Connection, *Ts], T], args: tuple[*Ts]
) -> T:
    """`in_write_transaction` on a connection whose busy timeout is 0 (`NO_BUSY_WAIT`): it
    never waits for the write lock. If another connection (another process) holds it,
    `WriteLockBusy` is raised with nothing done, so the caller can hand the write to a
    thread that may wait. Once the lock is taken, nothing in a WAL transaction waits on
    another connection."""
    try:
        connection.execute(BEGIN_IMMEDIATE)
    except sqlite3.OperationalError as error:
        if lock_held(error):
            raise WriteLockBusy from error
        raise
    return _commit_begun(connection, fn, args)


def lock_held(error: sqlite3.OperationalError) -> bool:
    """Whether ``error`` says another connection holds a lock this one needs."""
    return getattr(error, "sqlite_errorcode", 0) & 0xFF in _LOCK_HELD


# A write of a group, and what came of it: (fn, args) in; (True, result) or (False, error)
# out.
Write = tuple[Callable[..., Any], tuple[Any, ...]]
Outcome = tuple[bool, Any]
# A write function's form that runs several of its writes at once: given the args of
# each, each one's result in order (see `in_group_transaction`).
Batch = Callable[[sqlite3.Connection, list[tuple[Any, ...]]], list[Any]]
Batches = Mapping[Callable[..., Any], Batch]


def in_group_transaction(
    connection: sqlite3.Connection, writes: list[Write], batches: Batches | None = None
) -> list[Outcome]:
    """Several writes in one BEGIN IMMEDIATE ... COMMIT: one fsync for all of them.

    They run one after another, each seeing the ones before it; writes of a function
    that ``batches`` gives a batch form, next to each other, run through that form at
    once, in fewer statements. Should one raise, everything is undone and the group
    runs again, each write inside its own savepoint, so a write that raises is undone
    alone and the others stand, as if each had its own transaction. (So a write must
    be safe to run again after a rollback: each is a function of the database.)

    Every outcome is known only once the commit is durable: a failed commit fails them
    all, and nothing of the group is visible before it. An error that ends the whole
    transaction (SQLite rolls back by itself on a full disk or an I/O error) fails the
    write that met it; the others run again in a new group.
    """
    if len(writes) == 1:
        fn, args = writes[0]
        try:
            return [(True, in_write_transaction(connection, fn, args))]
        except Exception as error:
            return [(False, error)]
    try:
        connection.execute(BEGIN_IMMEDIATE)
    except Exception as error:
        return [(False, error)] * len(writes)
    results = _all_at_once(connection, writes, batches or {})
    if results is not None:
        try:
            connection.execute(COMMIT)
        except Exception as error:
            _rollback_quietly(connection)
            return [(False, error)] * len(writes)
        return [(True, result) for result in results]
    return _one_savepoint_each(connection, writes)


def _all_at_once(
    connection: sqlite3.Connection, writes: list[Write], batches: Batches
) -> list[Any] | None:
    """Each write's result, all run in the open transaction, those of a batch form
    through it; or None, with the transaction rolled back, if one raised."""
    results: list[Any] = []
    try:
        start = 0
        while start < len(writes):
            fn = writes[start][0]
            end = start + 1
            batch = batches.get(fn)
            if batch is None:
                results.append(fn(connection, *writes[start][1]))
            else:
                while end < len(writes) and writes[end][0] is fn:
                    end += 1
                results.extend(batch(connection, [args for _, args in writes[start:end]]))
            if not connection.in_transaction:
                # SQLite ended the transaction itself: the writes run again one by one.
                return None
            start = end
    except Exception:
        _rollback_quietly(connection)
        return None
    except BaseException:
        _rollback_quietly(connection)
        raise
    return results


def _one_savepoint_each(connection: sqlite3.Connection, writes: list[Write]) -> list[Outcome]:
    outcomes: list[Outcome | None] = [None] * len(writes)
    pending = list(range(len(writes)))
    while pending:
        retry: list[int] = []
        try:
            connection.execute(BEGIN_IMMEDIATE)
        except Exception as error:
            for index in pending:
                outcomes[index] = (False, error)
            break
        done: list[int] = []
        lost = False
        for position, index in enumerate(pending):
            fn, args = writes[index]
            outcome = _in_savepoint(connection, fn, args)
            if connection.in_transaction:
                outcomes[index] = outcome
                done.append(index)
                continue
            # The transaction is gone with everything written in it so far.
            outcomes[index] = outcome if not outcome[0] else (False, _lost_transaction())
            retry = done + pending[position + 1 :]
            lost = True
            break
        if not lost:
            try:
                connection.execute(COMMIT)
            except Exception as error:
                _rollback_quietly(connection)
                for index in done:
                    outcomes[index] = (False, error)
        pending = retry
    return [(False, _lost_transaction()) if out is None else out for out in outcomes]


def _in_savepoint(
    connection: sqlite3.Connection, fn: Callable[..., Any], args: tuple[Any, ...]
) -> Outcome:
    connection.execute(SAVEPOINT)
    try:
        result = fn(connection, *args)
    except RollbackAndReturn as rollback:
        _undo_savepoint(connection)
        return (True, rollback.value)
    except Exception as error:
        _undo_savepoint(connection)
        return (False, error)
    connection.execute(RELEASE)
    return (True, result)


def _undo_savepoint(connection: sqlite3.Connection) -> None:
    if connection.in_transaction:
        try:
            connection.execute(ROLLBACK_TO)
            connection.execute(RELEASE)
        except sqlite3.Error:
            _rollback_quietly(connection)


def _lost_transaction() -> sqlite3.OperationalError:
    return sqlite3.OperationalError("the transaction was rolled back by the database")


def in_read_snapshot(
    connection: sqlite3.Connection, fn: Callable[[sqlite3.Connection, *Ts], T], args: tuple[*Ts]
) -> T:
    """``fn``'s queries inside one read transaction, so they see one snapshot."""
    connection.execute(BEGIN)
    try:
        result = fn(connection, *args)
    except BaseException:
        _rollback_quietly(connection)
        raise
    connection.execute(COMMIT)
    return result


def _rollback_quietly(connection: sqlite3.Connection) -> None:
    # SQLite ends the transaction itself on some errors (a full disk, an I/O error), and
    # a failing rollback must not hide the error that called for it.
    if connection.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            connection.execute(ROLLBACK)
