"""Calling a store from frameworks that run their own event loops.

A store's connections belong to the event loop it was connected on (its home loop).
LlamaIndex awaits a chat store's coroutines on loops it makes for one call, and calls
its blocking methods from inside a running loop; `LoopBridge` takes each call to the
home loop: directly when the caller is on it, through the loop's thread otherwise.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from convostore.errors import InvalidArgumentError, StoreError
from convostore.store import Store
from convostore.sync import SyncStore

__all__ = ["LoopBridge"]

T = TypeVar("T")

_ON_HOME_LOOP = (
    "a blocking method was called on the store's own event loop: use the async method, "
    "or give the adapter a convostore.sync store"
)
_HOME_LOOP_BLOCKED = (
    "the store's event loop is blocked in a blocking call (a framework's blocking method "
    "called on the store's own loop?): give the adapter a convostore.sync store"
)
# How long a call from another loop waits before it checks that the home loop is not
# blocked, and between checks.
PATIENCE = 0.5
_WAITS = {("threading.py", "wait"), ("_base.py", "result"), ("threading.py", "join")}
_HOME_LOOP_GONE = (
    "the store's event loop is not running: give the adapter a convostore.sync store "
    "to call it from other event loops"
)


class LoopBridge:
    """Runs a store's coroutines on the store's home loop, from any thread or loop.

    A `convostore.sync` store's home is its loop thread. An async store's home is the
    loop running when the bridge was made, else the first loop that awaits through it."""

    def __init__(self, store: Store | SyncStore) -> None:
        self._sync: SyncStore | None = None
        self._home: asyncio.AbstractEventLoop | None = None
        if isinstance(store, SyncStore):
            self._sync = store
            self._home = store.loop_thread.loop
            target = store.target
        else:
            target = store
            self._home = _running_loop()
        if not isinstance(target, Store):
            raise InvalidArgumentError("expected a convostore Store (or convostore.sync store)")
        self.store: Store = target

    async def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await ``coroutine`` on the home loop, from whichever loop is running."""
        current = asyncio.get_running_loop()
        home = self._home
        if home is None or (home.is_closed() and self._sync is None):
            self._home = home = current
        if home is current:
            return await coroutine
        if home.is_closed() or not home.is_running():
            coroutine.close()
            raise StoreError(_HOME_LOOP_GONE)
        abandoned = threading.Event()

        async def unless_abandoned() -> T:
            if abandoned.is_set():
                coroutine.close()
                raise asyncio.CancelledError
            return await coroutine

        future = asyncio.run_coroutine_threadsafe(unless_abandoned(), home)
        waiting = asyncio.wrap_future(future)
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=PATIENCE)
            if done:
                return waiting.result()
            if _blocked_in_a_callback(home):
                # It may wait for this very call, and never run it: say so, and make sure
                # the call does nothing when the loop gets to it.
                abandoned.set()
                future.cancel()
                raise StoreError(_HOME_LOOP_BLOCKED)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the home loop and wait for it (a blocking method)."""
        if self._sync is not None:
            return self._sync.run(coroutine)
        home = self._home
        current = _running_loop()
        if home is None or home.is_closed():
            if current is None:
                return asyncio.run(coroutine)
            coroutine.close()
            raise StoreError(_HOME_LOOP_GONE)
        if home is current:
            coroutine.close()
            raise StoreError(_ON_HOME_LOOP)
        if not home.is_running():
            if current is not None:
                coroutine.close()
                raise StoreError(_HOME_LOOP_GONE)
            return home.run_until_complete(coroutine)
        return asyncio.run_coroutine_threadsafe(coroutine, home).result()


def _blocked_in_a_callback(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop``'s thread is inside one of its callbacks, waiting on a thread or a
    future: a loop blocked so runs nothing else until that wait ends."""
    thread_id = getattr(loop, "_thread_id", None)
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None or (Path(frame.f_code.co_filename).name, frame.f_code.co_name) not in _WAITS:
        return False
    while frame is not None:
        if frame.f_code.co_name == "_run_once" and frame.f_locals.get("self") is loop:
            return True
        frame = frame.f_back
    return False


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
