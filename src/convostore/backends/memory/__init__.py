"""`memory://`: the in-memory backend, the reference every other backend is held to.

`backend` holds its primitives, `indexes` what it keeps per session and the indexes over
its sessions, `view` the log and its active view, read without copying.
"""

from __future__ import annotations

from convostore.backends.memory.backend import MemoryBackend

__all__ = ["MemoryBackend"]
