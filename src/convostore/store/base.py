"""What every part of `convostore.Store` stands on: the backend it is composed over, its
lifecycle (close, callbacks, a store dropped without close), users and database stats."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self

from convostore.backends.interface import Backend, Capabilities, Connected, DatabaseStats
from convostore.embedding import (
    Embedder,
    EmbeddingFailed,
    RoleFilteringEmbedder,
    VectorIndexSpec,
)
from convostore.errors import InvalidArgumentError, StoreClosedError
from convostore.model import User
from convostore.prepare import check_id, check_user

__all__ = ["StoreBase", "filtering"]


class StoreBase:
    """The store's state and lifecycle; `convostore.store.Store` adds the operations."""

    def __init__(
        self, backend: Backend, connected: Connected, *, embedder: Embedder | None = None
    ) -> None:
        """A store over a connected ``backend``; `convostore.connect` makes one."""
        self.backend = backend
        self.indexed_metadata: frozenset[str] = connected.indexed_metadata
        self._closed = False
        self._before_close: list[Callable[[], Awaitable[None]]] = []
        self._embedding_failure_listeners: list[Callable[[EmbeddingFailed], None]] = []
        self.embedder: Embedder | None = None if embedder is None else filtering(embedder)
        self.vector_index: VectorIndexSpec | None = connected.vector_index
        self.vector_index_drift: str | None = connected.vector_index_drift
        # A store collected without close() releases what its backend holds, and warns.
        self._dropped = weakref.finalize(
            self, _dropped_unclosed, type(backend).__name__, backend.release_when_dropped()
        )

    @property
    def capabilities(self) -> Capabilities:
        """What the backend offers beyond the contract (see `Capabilities`)."""
        return self.backend.capabilities

    # ---------------------------------------------------------------- lifecycle

    url: str = ""
    """The URL the store was opened with, without its password."""

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<Store {type(self.backend).__name__} {self.url or '(no URL)'}{state}>"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self!r} is closed: open a new store to do more work")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Run the before-close callbacks (conversations flush what is pending), then
        release the backend's connections. Closing twice is harmless; any other call
        after close raises `StoreClosedError`."""
        if self._closed:
            return
        try:
            for callback in list(self._before_close):
                await callback()
        finally:
            self._closed = True
            self._dropped.detach()
            await self.backend.close()

    def before_close(self, callback: Callable[[], Awaitable[None]]) -> Callable[[], None]:
        """Have `close` await ``callback`` before releasing the backend; returns a
        function that removes it."""
        self._before_close.append(callback)
        return lambda: _discard(self._before_close, callback)

    def on_embedding_failed(
        self, listener: Callable[[EmbeddingFailed], None]
    ) -> Callable[[], None]:
        """Call ``listener`` whenever a message is stored without the vector its
        embedder should have given it; returns a function that removes it."""
        self._embedding_failure_listeners.append(listener)
        return lambda: _discard(self._embedding_failure_listeners, listener)

    async def stats(self) -> DatabaseStats:
        """What the whole database holds, every owner's sessions included: users,
        sessions, events, messages, messages with a vector, and its size on disk in
        bytes (None where nothing is on disk)."""
        return await self.backend.stats()

    # ---------------------------------------------------------------- users

    async def put_user(self, user: User) -> User:
        """Insert the user, or overwrite the stored one with the same id."""
        self._check_open()
        user = check_user(user)
        await self.backend.put_user(user)
        return user

    async def get_user(self, user_id: str) -> User | None:
        """The stored user, or None."""
        self._check_open()
        return await self.backend.get_user(check_id(user_id, "user_id"))


def filtering(embedder: Embedder) -> Embedder:
    """The embedder as the store uses it: with a message filter (the default one
    unless the embedder brings its own ``should_embed``)."""
    if not isinstance(embedder, Embedder):
        raise InvalidArgumentError("an embedder needs name, dimensions and async embed(texts)")
    if callable(getattr(embedder, "should_embed", None)):
        return embedder
    return RoleFilteringEmbedder(embedder)


def _discard(items: list[Any], item: Any) -> None:
    if item in items:
        items.remove(item)


def _dropped_unclosed(kind: str, release: Callable[[], None] | None) -> None:
    if release is not None:
        release()
    warnings.warn(
        f"a store on {kind} was collected without close(): close stores (or use async "
        "with) to release their connections when you are done",
        ResourceWarning,
        stacklevel=1,
    )
