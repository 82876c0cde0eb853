"""What the generated sync facade (`convostore.sync`) runs on: an event loop in a
thread, and the base classes that call into it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from convostore.errors import StoreError
from convostore.store import Store

__all__ = ["LoopThread", "SyncProxy", "SyncStoreBase"]

T = TypeVar("T")
Target = TypeVar("Target")

CLOSED = "this sync store is closed"


class LoopThread:
    """An event loop in a daemon thread, shared by a sync store and what it returns."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="convostore-sync", daemon=True
        )
        self._thread.start()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for its result."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise StoreError(
                "a sync facade was called from its own event loop thread (from a "
                "listener, say): use the async API there"
            )
        with self._lock:
            if self._stopped:
                coroutine.close()
                raise StoreError(CLOSED)
            future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result()

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        """The items of ``iterator``, each awaited on the loop."""

        async def step() -> tuple[bool, T | None]:
            try:
                return True, await anext(iterator)
            except StopAsyncIteration:
                return False, None

        while True:
            more, item = self.run(step())
            if not more:
                return
            yield item  # type: ignore[misc]

    def stop(self) -> None:
        """Stop and close the loop; later calls raise `StoreError`. Stopping twice is
        harmless."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class SyncProxy(Generic[Target]):
    """Blocking access to an async object: its coroutine methods run on the loop."""

    __slots__ = ("_loop_thread", "_target")

    def __init__(self, target: Target, loop_thread: LoopThread) -> None:
        self._target = target
        self._loop_thread = loop_thread

    @property
    def target(self) -> Target:
        """The wrapped async object (to use from async code running on its loop)."""
        return self._target

    @property
    def loop_thread(self) -> LoopThread:
        """The thread whose event loop runs the wrapped object."""
        return self._loop_thread

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine (of the wrapped object, say) on this facade's loop and wait."""
        return self._loop_thread.run(coroutine)

    _run = run

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._target!r}>"


class SyncStoreBase(SyncProxy[Store]):
    """What a sync store adds to its generated methods: closing, and ``with``."""

    __slots__ = ()

    @property
    def closed(self) -> bool:
        """True once `close` has been called."""
        return self._loop_thread.stopped

    def close(self) -> None:
        """Close the store (conversations flush first), then stop its loop thread.
        Closing twice is harmless."""
        if self._loop_thread.stopped:
            return
        try:
            self._run(self._target.close())
        finally:
            self._loop_thread.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
