"""Threads that own SQLite connections, and the boundary where sqlite3 errors end.

A sqlite3 connection must be used by one thread at a time, and each of its calls
blocks. A `ConnectionWorker` gives each of its threads one connection for life and runs
the plain functions handed to it there: `run` costs one hop to a worker thread and one
back through the event loop, whatever the function does.

`transact` runs a write in a transaction of its own, as it seems to its caller; the
writes queued together share one transaction and one fsync (group commit, see
`connection.in_group_transaction`), and each caller hears back only once the group's
commit is durable.

A writer (one thread) may also write inline: a small write (its caller says so) that
finds nothing else queued or running, and no other task about to write, runs on the
caller's own thread under the connection's lock, paced as `inline` says. A small write
that finds other tasks ready lets them go first, once: the writes they start meanwhile
are gathered and handed to the thread with it, as one group. A write whose
lock another process holds goes through the thread, which may wait for it; and the WAL
is checkpointed every `INLINE_CHECKPOINT_EVERY` inline writes, on a thread of the
readers' (`checkpoint_on`) where there are any, so that the checkpoint SQLite would
otherwise run at the end of some commit stalls neither the loop nor the writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any, Final, Protocol, TypeVar, TypeVarTuple

from convostore.backends.sqlite.connection import (
    MAX_GROUP,
    NO_BUSY_WAIT,
    Batches,
    Outcome,
    in_group_transaction,
    inline_write,
)
from convostore.backends.sqlite.errors import store_error, translate_error
from convostore.backends.sqlite.inline import InlineConnection
from convostore.errors import StoreClosedError

__all__ = ["AfterCommit", "ConnectionWorker", "translate_error"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_log = logging.getLogger(__name__)

# Inline writes between two checkpoints on the thread: with a few pages a write, under
# the 1,000 pages at which SQLite would checkpoint at the end of a commit.
INLINE_CHECKPOINT_EVERY: Final = 128
CHECKPOINT: Final = "PRAGMA wal_checkpoint(PASSIVE)"


class AfterCommit(Protocol):
    """Work a writer does on its thread after a commit, when `due` says so (it must not
    raise)."""

    def due(self) -> bool: ...

    def __call__(self, connection: sqlite3.Connection) -> None: ...


# (the future to settle, its loop, the function, its arguments, whether it is a write
# that may share a transaction); no function means stop, and a stop with no future is
# one nobody waits for; a function with no future is run and its outcome dropped.
_Job = tuple[
    "asyncio.Future[Any] | None",
    "asyncio.AbstractEventLoop | None",
    "Callable[..., Any] | None",
    tuple[Any, ...],
    bool,
]


class ConnectionWorker:
    """Threads that each own one connection and run the functions handed to them.

    The threads share one queue, so an idle thread takes the next job. A function runs
    as ``fn(connection, *args)``; what it raises reaches the caller of `run`, with
    sqlite3 errors translated to convostore's. ``after_commit``, if given, runs on the
    thread after each group of writes is committed and answered, and after an inline
    write, when it is due. With ``inline`` (one thread only), `transact` may write on
    the caller's thread (see the module's notes).
    """

    def __init__(
        self,
        name: str,
        where: str,
        open_connection: Callable[[], sqlite3.Connection],
        threads: int,
        after_commit: AfterCommit | None = None,
        *,
        inline: bool = False,
        batches: Batches | None = None,
    ) -> None:
        if inline and threads != 1:
            raise ValueError("only a worker of one thread can write inline")
        self.name = name
        self._after_commit = after_commit
        # The batch forms of write functions a group commit runs at once (see
        # `in_group_transaction`).
        self._batches = batches
        self.where = where
        self._open_connection = open_connection
        self._size = threads
        self._jobs: SimpleQueue[_Job] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._running = 0
        self._accepting = False
        # Inline writes: the connection (while open) and the lock every use of it holds,
        # the statement that gives it back its busy timeout, and the pacing.
        self._inline = InlineConnection(where) if inline else None
        self._restore_wait = ""
        self._arrivals = 0
        # While a write lets the ready tasks go first: its loop, and the writes gathered.
        self._gathering: tuple[asyncio.AbstractEventLoop, list[_Job]] | None = None
        self._since_checkpoint = 0
        self._checkpointer: ConnectionWorker | None = None

    async def start(self) -> None:
        """Start the threads, each opening its connection; raise if any cannot."""
        loop = asyncio.get_running_loop()
        opened: list[asyncio.Future[None]] = [loop.create_future() for _ in range(self._size)]
        for number, future in enumerate(opened, start=1):
            thread = threading.Thread(
                target=self._serve,
                args=(loop, future),
                name=f"{self.name}-{number}",
                # A store left open must not keep the interpreter from exiting.
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()
        outcomes = await asyncio.gather(*opened, return_exceptions=True)
        self._running = sum(1 for outcome in outcomes if not isinstance(outcome, BaseException))
        self._accepting = True
        failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failure is not None:
            await self.stop()
            if isinstance(failure, sqlite3.Error):
                raise translate_error(failure, self.where) from failure
            raise failure

    async def run(self, fn: Callable[[sqlite3.Connection, *Ts], T], *args: *Ts) -> T:
        """``fn(connection, *args)`` on one of the threads."""
        return await self._submit(fn, args, False)

    async def transact(
        self, fn: Callable[[sqlite3.Connection, *Ts], T], *args: *Ts, small: bool = False
    ) -> T:
        """``fn(connection, *args)`` as one transaction, all of it or none, answered once
        it is committed and durable; writes queued at the same time commit together. A
        ``small`` write (a bounded one: a few rows, no scan) may run inline."""
        inline = self._inline if small and self._accepting else None
        gathering = self._gathering
        if inline is not None and gathering is not None:
            loop, gathered = gathering
            if loop is asyncio.get_running_loop():
                # Another write is letting the ready tasks go first: this one is one of
                # them, and goes to the thread in the group it gathers. A write from
                # another event loop runs on another thread, where the group may be
                # handed over while it joins: it goes its own way.
                self._arrivals += 1
                return await self._join(fn, args, gathered)
        if inline is not None and inline.pacer.allows() and self._jobs.empty():
            arrival = self._arrivals = self._arrivals + 1
            if _others_ready():
                # The tasks ready to run go first: the writes they start meanwhile are
                # handed to the thread together, with this one, as one group.
                gathered = []
                self._gathering = (asyncio.get_running_loop(), gathered)
                try:
                    await asyncio.sleep(0)
                finally:
                    self._gathering = None
                    self._hand_over(gathered)
            if self._arrivals == arrival and self._jobs.empty():
                ran, result = inline.run(inline_write, (fn, args))
                if ran:
                    self._after_inline_write()
                    return result  # type: ignore[no-any-return]
        return await self._submit(fn, args, True)

    def checkpoint_on(self, other: ConnectionWorker) -> None:
        """Run the checkpoints that follow inline writes on ``other``'s threads (the
        readers'): a checkpoint takes no write lock, so writes go on while it copies
        pages and waits for its fsyncs, which on the writer's own thread would hold
        them up."""
        self._checkpointer = other

    def post(self, fn: Callable[[sqlite3.Connection], object]) -> None:
        """Queue ``fn(connection)`` for one of the threads, nobody waiting for it (what
        it raises is logged); nothing once the worker stops."""
        if self._accepting:
            self._jobs.put((None, None, fn, (), False))

    @property
    def inline_writes(self) -> int:
        """How many writes ran inline (for tests and benchmarks)."""
        return 0 if self._inline is None else self._inline.ran

    def _after_inline_write(self) -> None:
        """What the thread does after a commit, queued for it after an inline one."""
        self._since_checkpoint += 1
        if self._since_checkpoint >= INLINE_CHECKPOINT_EVERY:
            self._since_checkpoint = 0
            (self._checkpointer or self).post(_checkpoint)
        after_commit = self._after_commit
        if after_commit is not None and after_commit.due():
            self.post(after_commit)

    def _hand_over(self, gathered: list[_Job]) -> None:
        """Queue the gathered writes one after another (the thread takes them as one
        group); if the worker stopped meanwhile, fail them as any later write fails."""
        if self._accepting:
            for job in gathered:
                self._jobs.put(job)
            return
        closed = StoreClosedError(f"{self.where}: the store is closed")
        for future, *_ in gathered:
            if future is not None:
                _fail(future, closed)

    async def _submit(self, fn: Callable[..., T], args: tuple[Any, ...], write: bool) -> T:
        future, job = self._job(fn, args, write)
        self._jobs.put(job)
        return await self._answer(future)

    async def _join(self, fn: Callable[..., T], args: tuple[Any, ...], gathered: list[_Job]) -> T:
        """Add a write to the ones another write gathers (see `transact`) and wait for it."""
        future, job = self._job(fn, args, True)
        gathered.append(job)
        return await self._answer(future)

    def _job(
        self, fn: Callable[..., T], args: tuple[Any, ...], write: bool
    ) -> tuple[asyncio.Future[T], _Job]:
        if not self._accepting:
            raise StoreClosedError(f"{self.where}: the store is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        return future, (future, loop, fn, args, write)

    async def _answer(self, future: asyncio.Future[T]) -> T:
        try:
            return await future
        except (sqlite3.Error, UnicodeEncodeError) as error:
            raise store_error(error, self.where) from error

    async def stop(self) -> None:
        """Finish the jobs queued so far, close each connection in its own thread, end
        the threads. Stopping twice is harmless."""
        if not self._accepting:
            return
        self._accepting = False
        loop = asyncio.get_running_loop()
        closed: list[asyncio.Future[None]] = [loop.create_future() for _ in range(self._running)]
        for future in closed:
            self._jobs.put((future, loop, None, (), False))
        await asyncio.gather(*closed, return_exceptions=True)
        for thread in self._threads:
            thread.join()  # Each has settled its future as its last act: this is brief.

    def abandon(self) -> None:
        """Stop the threads without an event loop, for a store collected unclosed: each
        thread closes its connection and ends. Nothing waits for them."""
        if not self._accepting:
            return
        self._accepting = False
        for _ in range(self._running):
            self._jobs.put((None, None, None, (), False))

    def _serve(self, loop: asyncio.AbstractEventLoop, opened: asyncio.Future[None]) -> None:
        try:
            connection = self._open_connection()
            if self._inline is not None:
                # At rest the connection never waits for a lock, as an inline write
                # must not; the thread gives it its busy timeout back for each job.
                (busy_timeout,) = connection.execute("PRAGMA busy_timeout").fetchone()
                self._restore_wait = f"PRAGMA busy_timeout = {int(busy_timeout)}"
                self._inline.open(connection)
        except Exception as error:
            _reply(loop, _fail, opened, error)
            return
        _reply(loop, _succeed, opened, None)
        # Only an inline writer shares its connection with other threads.
        lock: contextlib.AbstractContextManager[Any] = (
            contextlib.nullcontext() if self._inline is None else self._inline.lock
        )
        jobs = self._jobs
        held: _Job | None = None
        while True:
            job = jobs.get() if held is None else held
            held = None
            with lock:
                if self._inline is not None and job[2] is not None:
                    connection.execute(self._restore_wait)
                    try:
                        held = self._serve_one(connection, job)
                    finally:
                        connection.execute(NO_BUSY_WAIT)
                else:
                    held = self._serve_one(connection, job)
            if job[2] is None:
                return

    def _serve_one(self, connection: sqlite3.Connection, job: _Job) -> _Job | None:
        """Run ``job``, with the writes queued behind it if it is a write; the job taken
        from the queue meanwhile that must run next, if any."""
        future, job_loop, fn, args, write = job
        if fn is None:
            if self._inline is not None:
                self._inline.forget()
            try:
                connection.close()
            finally:
                if future is not None and job_loop is not None:
                    _reply(job_loop, _succeed, future, None)
            return None
        if future is None or job_loop is None:
            try:
                fn(connection, *args)
            except Exception:
                _log.exception("%s: work after a commit failed", self.where)
            return None
        if write:
            group, held = [job], None
            # Only what is queued already: a lone write never waits for company.
            while len(group) < MAX_GROUP:
                try:
                    queued = self._jobs.get_nowait()
                except Empty:
                    break
                if queued[4] and queued[2] is not None:
                    group.append(queued)
                else:
                    held = queued  # runs next, after the group, as it was queued
                    break
            _commit_group(connection, group, self._batches)
            after_commit = self._after_commit
            if after_commit is not None and after_commit.due():
                after_commit(connection)
            return held
        # Read across threads without a lock: at worst a job cancelled at this very
        # moment still runs, and _succeed drops its result.
        if future.cancelled():
            return None
        try:
            result = fn(connection, *args)
        except Exception as error:
            _reply(job_loop, _fail, future, error)
        else:
            _reply(job_loop, _succeed, future, result)
        return None


def _others_ready() -> bool:
    """Whether another callback of the running loop is ready to run (and so might start
    a write before this one's inline write ends). Read from asyncio's own loop, whose
    ready queue is a private field; any other loop is taken to have one."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    return ready is None or len(ready) > 0


def _checkpoint(connection: sqlite3.Connection) -> None:
    connection.execute(CHECKPOINT).fetchall()


def _commit_group(
    connection: sqlite3.Connection, group: list[_Job], batches: Batches | None
) -> None:
    """Run the writes of ``group`` whose callers still wait, in one transaction, then
    answer each caller, with one wake-up per event loop."""
    # A write job always has its future and loop: only a stop may come without them.
    live = [
        (future, loop, fn, args)
        for future, loop, fn, args, _ in group
        if fn is not None and future is not None and loop is not None and not future.cancelled()
    ]
    if not live:
        return
    outcomes = in_group_transaction(connection, [(fn, args) for _, _, fn, args in live], batches)
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Outcome]]] = {}
    for (future, job_loop, _, _), outcome in zip(live, outcomes, strict=True):
        by_loop.setdefault(job_loop, []).append((future, outcome))
    for loop, settled in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_all, settled)
        except RuntimeError:
            continue  # The loop is closed: nobody awaits these futures any more.


def _settle_all(settled: list[tuple[asyncio.Future[Any], Outcome]]) -> None:
    for future, (ok, value) in settled:
        if ok:
            _succeed(future, value)
        else:
            _fail(future, value)


def _reply(
    loop: asyncio.AbstractEventLoop,
    settle: Callable[[asyncio.Future[Any], Any], None],
    future: asyncio.Future[Any],
    value: Any,
) -> None:
    try:
        loop.call_soon_threadsafe(settle, future, value)
    except RuntimeError:
        return  # The loop is closed: nobody awaits this future any more.


def _succeed(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
