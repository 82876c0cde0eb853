"""The store's lifecycle: opening a store on the backend a URL names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from convostore._urls import redacted
from convostore.backends.registry import backend_for, pending_migrations
from convostore.backends.spi import VectorIndexSpec
from convostore.embedding import Embedder
from convostore.store import Store, check_indexed_keys, filtering

__all__ = ["open_store", "pending_migrations"]


async def open_store(
    url: str,
    *,
    indexed_metadata: Iterable[str] = (),
    embedder: Embedder | None = None,
    **options: Any,
) -> Store:
    """Connect the backend that ``url``'s scheme names, run what every backend runs
    after connecting (`Backend.after_connect`), and put a `Store` on it."""
    keys = check_indexed_keys(indexed_metadata)
    chosen = None if embedder is None else filtering(embedder)
    backend = await backend_for(url).open(url, **options)
    try:
        connected = await backend.after_connect(
            keys, None if chosen is None else VectorIndexSpec.of(chosen)
        )
    except BaseException:
        await backend.close()
        raise
    store = Store(backend, connected, embedder=chosen)
    store.url = redacted(url)
    return store
