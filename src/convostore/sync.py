"""The sync facade: the async API with plain blocking methods, for scripts.

    with convostore.sync.connect("sqlite:///chat.db") as store:
        session = store.create_session("ada")

One event loop runs in a background thread for each facade; every coroutine method of
the wrapped object becomes a blocking call that runs there, async iterators become
plain iterators, and returned async API objects (a conversation, say) are wrapped the
same way. Nothing here repeats the API: it is derived from the async classes.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from types import TracebackType
from typing import Any, Self, TypeVar

from convostore.backends import DEFAULT_URL, open_store
from convostore.conversation import BaseConversationFactory, StoredConversation
from convostore.store import Store

__all__ = ["SyncProxy", "SyncStore", "connect"]

T = TypeVar("T")


class _LoopThread:
    """An event loop in a daemon thread, shared by a facade and what it returns."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="convostore-sync", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._in_loop_thread():
            coroutine.close()
            raise RuntimeError("a sync facade method was called from its own event loop")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def _in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread


class SyncProxy:
    """Blocking access to an async object: coroutine methods run on the loop thread."""

    # Async classes whose instances, when returned, are wrapped rather than handed out.
    wrapped_types: tuple[type, ...] = (Store, BaseConversationFactory, StoredConversation)

    def __init__(self, target: Any, loop_thread: _LoopThread) -> None:
        self._target = target
        self._loop_thread = loop_thread

    @property
    def target(self) -> Any:
        """The wrapped async object (to use from async code running on its loop)."""
        return self._target

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine (of the wrapped object, say) on this facade's loop and wait."""
        return self._loop_thread.run(coroutine)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if inspect.iscoroutinefunction(attribute):
            return self._blocking(attribute)
        if inspect.isasyncgenfunction(attribute):
            return self._iterating(attribute)
        if inspect.ismethod(attribute):
            return self._plain(attribute)
        return self.wrap(attribute)

    def _blocking(self, method: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.wrap(self._loop_thread.run(method(*args, **kwargs)))

        return call

    def _plain(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.wrap(method(*args, **kwargs))

        return call

    def _iterating(self, method: Callable[..., AsyncIterator[Any]]) -> Callable[..., Iterator[Any]]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Iterator[Any]:
            return self._iterate(method(*args, **kwargs))

        return call

    def _iterate(self, iterator: AsyncIterator[Any]) -> Iterator[Any]:
        async def step() -> tuple[bool, Any]:
            try:
                return True, await anext(iterator)
            except StopAsyncIteration:
                return False, None

        while True:
            more, item = self._loop_thread.run(step())
            if not more:
                return
            yield self.wrap(item)

    def wrap(self, value: Any) -> Any:
        """``value`` as sync code uses it: an async API object or async iterator is
        wrapped to run on this facade's loop; anything else is returned as it is."""
        if isinstance(value, self.wrapped_types):
            return SyncProxy(value, self._loop_thread)
        if isinstance(value, AsyncIterator):
            return self._iterate(value)
        return value


class SyncStore(SyncProxy):
    """A `Store` with plain methods; use it as a context manager or call `close`."""

    def close(self) -> None:
        """Close the store, then stop its loop thread."""
        try:
            self._loop_thread.run(self._target.close())
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


def connect(
    url: str = DEFAULT_URL, *, indexed_metadata: Iterable[str] = (), **options: Any
) -> SyncStore:
    """`convostore.connect`, with a blocking API."""
    loop_thread = _LoopThread()
    try:
        store = loop_thread.run(open_store(url, indexed_metadata=indexed_metadata, **options))
    except BaseException:
        loop_thread.stop()
        raise
    return SyncStore(store, loop_thread)
