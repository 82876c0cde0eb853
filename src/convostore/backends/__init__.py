"""Backends, one module per database, imported lazily by URL scheme."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from convostore._urls import redacted
from convostore.errors import InvalidArgumentError
from convostore.store import Store

__all__ = ["DEFAULT_URL", "open_store"]

DEFAULT_URL = "sqlite:///convostore.db"

_PLANNED = {
    "mysql": "MySQL/MariaDB",
    "mariadb": "MySQL/MariaDB",
    "neo4j": "Neo4j",
    "bolt": "Neo4j",
    "memgraph": "Memgraph",
}


async def open_store(url: str, *, indexed_metadata: Iterable[str], **options: Any) -> Store:
    """Connect the backend that ``url``'s scheme names."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgumentError("a store URL must be a non-blank string")
    store = await _open_backend(url, indexed_metadata=indexed_metadata, **options)
    store.url = redacted(url)
    return store


async def _open_backend(url: str, *, indexed_metadata: Iterable[str], **options: Any) -> Store:
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower() if sep else "sqlite"
    if scheme == "memory":
        from convostore.backends.memory import MemoryStore

        memory = MemoryStore(indexed_metadata=indexed_metadata, **options)
        await memory._after_connect()
        return memory
    if scheme == "sqlite":
        from convostore.backends.sqlite import SQLiteStore

        store: Store = await SQLiteStore.open(url, indexed_metadata=indexed_metadata, **options)
        return store
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        from convostore.backends.postgresql import PostgreSQLStore

        return await PostgreSQLStore.open(url, indexed_metadata=indexed_metadata, **options)
    if scheme in ("falkordb", "falkordbs"):
        from convostore.backends.falkordb import FalkorDBStore

        return await FalkorDBStore.open(url, indexed_metadata=indexed_metadata, **options)
    if scheme.split("+")[0] in _PLANNED:
        from convostore.errors import BackendUnavailableError

        raise BackendUnavailableError(
            f"the {_PLANNED[scheme.split('+')[0]]} backend is not in this release of convostore"
        )
    raise InvalidArgumentError(f"unknown store URL scheme {scheme!r} in {url!r}")
