"""Backends: one package (or module) per database, each a `Backend` subclass
(`convostore.backends.interface`), found by URL scheme (`convostore.backends.registry`)
and imported only when a URL names it. `backends.sql` holds what SQL backends share."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from convostore._urls import redacted
from convostore.backends.interface import Backend, Capabilities
from convostore.backends.registry import backend_for
from convostore.embedding import Embedder, VectorIndexSpec

if TYPE_CHECKING:
    # convostore.store imports this package's interface: it is imported where used.
    from convostore.store import Store

__all__ = ["DEFAULT_URL", "Backend", "Capabilities", "open_store", "pending_migrations"]

DEFAULT_URL = "sqlite:///convostore.db"


async def open_store(
    url: str,
    *,
    indexed_metadata: Iterable[str] = (),
    embedder: Embedder | None = None,
    **options: Any,
) -> Store:
    """Connect the backend that ``url``'s scheme names, run what every backend runs
    after connecting (`Backend.after_connect`), and put a `Store` on it."""
    from convostore.store import Store, check_indexed_keys, filtering

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


async def pending_migrations(url: str, **options: Any) -> list[str]:
    """The schema migrations connecting to ``url`` would apply, one line each, oldest
    first; [] when the schema is current. Changes nothing (see
    `Backend.pending_migrations`)."""
    return await backend_for(url).pending_migrations(url, **options)
