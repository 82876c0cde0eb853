"""The Redis / Valkey backend: ``redis://``, ``redis+cluster://`` and their TLS and
Valkey forms (see `convostore.backends.redis.url`)."""

from convostore.backends.registry import require_driver

require_driver("Redis", "redis", "redis.asyncio")

from convostore.backends.redis.backend import RedisBackend  # noqa: E402

__all__ = ["RedisBackend"]
