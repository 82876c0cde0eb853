"""The `Store` contract, written once, and what is built on it.

`Store` is the public async API. Its docstrings state what every backend guarantees.
Each public method validates and normalises its arguments here, then calls the
primitives of its `convostore.backends.interface.Backend`, each one transaction. A
backend never re-checks what this package checked.

The store is written by concern: `base` (the backend, lifecycle, users), `sessions`
(sessions, listings, parts, metadata lookups, expiry), `log` (appends, reads, narration,
compaction) and `search` (search and re-embedding).
"""

from __future__ import annotations

from convostore.backends.interface import Capabilities
from convostore.store.base import filtering
from convostore.store.log import LogOperations
from convostore.store.search import MAX_SEARCH_HITS, SearchOperations
from convostore.store.sessions import SessionOperations, check_indexed_keys

__all__ = ["MAX_SEARCH_HITS", "Capabilities", "Store", "check_indexed_keys", "filtering"]


class Store(SessionOperations, LogOperations, SearchOperations):
    """The conversation store: users, sessions, and one ordered log per session.

    Every backend guarantees what these docstrings say. Every write is one transaction:
    it applies whole or not at all. Every wrong call raises an error of
    `convostore.errors` and writes nothing. Times are timezone-aware UTC with
    microsecond precision.
    """
