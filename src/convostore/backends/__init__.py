"""Backends: one package (or module) per database, each a `Backend` subclass
(`convostore.backends.interface`), found by URL scheme (`convostore.backends.registry`)
and imported only when a URL names it. `backends.spi` holds the types a backend
exchanges with the store, `backends.sql` what SQL backends share.

Importing this package imports nothing else: the interface's names and
`pending_migrations` (`convostore.backends.registry`) are imported at first use. The
store's lifecycle (`open_store`) is `convostore.store.lifecycle`, above the backends.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from convostore.backends.interface import Backend, Capabilities
    from convostore.backends.registry import pending_migrations

__all__ = ["DEFAULT_URL", "Backend", "Capabilities", "pending_migrations"]

DEFAULT_URL = "sqlite:///convostore.db"

_LAZY = {
    "Backend": "convostore.backends.interface",
    "Capabilities": "convostore.backends.interface",
    "pending_migrations": "convostore.backends.registry",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'convostore.backends' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
