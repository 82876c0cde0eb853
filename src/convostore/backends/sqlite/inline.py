"""Running a bounded operation on the caller's own thread, and when to stop doing so.

A thread hop to a worker and back costs more here than a small write's statements or a
window read's (about 100-150 µs against 30). So a small write runs inline when the
writer is idle (`worker.ConnectionWorker.transact`, on the writer's connection), and a
small read runs inline on a read-only connection of its own; each is an
`InlineConnection`. Either blocks the caller's event loop while it
runs, so each is paced (`Pacer`): once half of the last `PACED` took over
`INLINE_LIMIT_S`, the next `INLINE_PAUSE` go through the threads again, doubling while
the operation that probes after a pause is slow too, up to `INLINE_PAUSE_MAX`. A rare
slow one (the disk busy for a moment) does not stop them: through a thread it would have
kept its caller waiting as long.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from convostore.backends.sqlite.connection import NO_BUSY_WAIT, WriteLockBusy, lock_held
from convostore.backends.sqlite.errors import store_error

__all__ = ["INLINE_LIMIT_S", "INLINE_PAUSE", "InlineConnection", "Pacer"]

INLINE_LIMIT_S: Final = 0.001
INLINE_PAUSE: Final = 64
INLINE_PAUSE_MAX: Final = 1024
PACED: Final = 16


class Pacer:
    """Whether the next bounded operation may run inline, from how long the last ones
    took (see the module's notes). Used from event loop threads without a lock: a lost
    update only shifts a pause by one operation."""

    def __init__(self) -> None:
        self._skip = 0
        self._pause = INLINE_PAUSE
        self._slow = 0  # a bit per operation of the last PACED, 1 for a slow one
        self._probing = False

    @property
    def paused(self) -> int:
        """How many operations go through the threads before the next inline probe."""
        return self._skip

    def allows(self) -> bool:
        """Whether this operation may run inline (one skipped turn is used up if not)."""
        if self._skip:
            self._skip -= 1
            return False
        return True

    def record(self, elapsed_s: float) -> None:
        """How long an operation that ran inline took."""
        slow = elapsed_s > INLINE_LIMIT_S
        if self._probing:
            # The first inline operation after a pause is judged on its own.
            self._probing = slow
            if slow:
                self._stop()
            else:
                self._slow, self._pause = 0, INLINE_PAUSE
            return
        self._slow = ((self._slow << 1) | slow) & ((1 << PACED) - 1)
        if 2 * self._slow.bit_count() >= PACED:
            self._probing = True
            self._stop()

    def _stop(self) -> None:
        self._skip = self._pause
        self._pause = min(2 * self._pause, INLINE_PAUSE_MAX)


class InlineConnection:
    """A connection that bounded operations use on the caller's thread, one at a time
    under `lock` (an operation that finds it held, or the connection closed, is not run
    and goes through the threads). The connection rests with no busy timeout, so an
    operation never waits here for another connection's lock: one that meets it (a
    `WriteLockBusy`, or a busy or locked result) is not run either. A writer's thread
    uses the same connection under the same lock (see `worker.ConnectionWorker`)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.pacer = Pacer()
        self.lock = threading.Lock()
        self.ran = 0
        self._connection: sqlite3.Connection | None = None

    def open(self, connection: sqlite3.Connection) -> None:
        """Take ``connection`` (opened to be shared between threads)."""
        connection.execute(NO_BUSY_WAIT)
        self._connection = connection

    def forget(self) -> None:
        """Stop using the connection (its owner closes it; the caller holds `lock`)."""
        self._connection = None

    def close(self) -> None:
        """Close the connection; later operations go through the threads. Harmless
        twice."""
        with self.lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
        """(True, ``fn(connection, *args)``) if it ran here; (False, None), with nothing
        done, if it could not run now. The caller asks `pacer` first."""
        if not self.lock.acquire(blocking=False):
            return False, None
        try:
            connection = self._connection
            if connection is None:
                return False, None
            started, met_a_lock = time.perf_counter(), False
            try:
                result = fn(connection, *args)
            except WriteLockBusy:
                met_a_lock = True
                return False, None
            except sqlite3.OperationalError as error:
                if lock_held(error):
                    met_a_lock = True
                    return False, None
                raise store_error(error, self.where) from error
            except (sqlite3.Error, UnicodeEncodeError) as error:
                raise store_error(error, self.where) from error
            finally:
                if not met_a_lock:  # Nothing ran: nothing to pace.
                    self.pacer.record(time.perf_counter() - started)
        finally:
            self.lock.release()
        self.ran += 1
        return True, result
