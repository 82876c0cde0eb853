"""What the URLs of every graph backend take alike: the bounds of its connection pool."""

from __future__ import annotations

from typing import Final

from convostore.backends.urls import Parse, seconds, whole

__all__ = ["POOL_OPTIONS"]

# ``pool_max_size`` (connections opened at most), ``pool_timeout`` (seconds an
# operation waits for a free one) and ``connect_timeout`` (seconds to open one).
POOL_OPTIONS: Final[dict[str, Parse]] = {
    "pool_max_size": whole(1, 1000),
    "pool_timeout": seconds,
    "connect_timeout": seconds,
}
