"""Backends: one package (or module) per database, each a `Backend` subclass
(`convostore.backends.interface`), found by URL scheme (`convostore.backends.registry`)
and imported only when a URL names it. `backends.spi` holds the types a backend
exchanges with the store, `backends.sql` what SQL backends share.

Importing this package imports nothing else: `open_store` (the store's lifecycle, in
`convostore.store.lifecycle`) and the interface's names are imported at first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from convostore.backends.interface import Backend, Capabilities
    from convostore.store.lifecycle import open_store, pending_migrations

__all__ = ["DEFAULT_URL", "Backend", "Capabilities", "open_store", "pending_migrations"]

DEFAULT_URL = "sqlite:///convostore.db"

_LAZY = {
    "Backend": "convostore.backends.interface",
    "Capabilities": "convostore.backends.interface",
    "open_store": "convostore.store.lifecycle",
    "pending_migrations": "convostore.store.lifecycle",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'convostore.backends' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
