"""The sockets of a store dropped without `close`, closed without its event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

__all__ = ["abort_transports"]


def abort_transports(transports: Iterable[asyncio.Transport | None]) -> None:
    """Close the socket of each of ``transports`` (the asyncio transports of a dropped
    store's connections) now, whether its event loop still runs or not. A running loop
    stops polling it at once; a closed one holds it still, and neither the loop nor the
    driver closes a socket without a running loop, so the socket itself is closed here
    (read through asyncio's wrapper, plain or under TLS)."""
    for transport in transports:
        if transport is None:
            continue
        with contextlib.suppress(RuntimeError):  # The loop is closed: nothing to tell it.
            transport.abort()
        raw = getattr(transport.get_extra_info("socket"), "_sock", None)
        if raw is not None:
            raw.close()
