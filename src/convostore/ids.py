"""UUIDv7 ids: time-ordered, and strictly increasing within one process.

Layout (RFC 9562): 48 bits of Unix milliseconds, the version nibble 7, then 74 bits
that are random for the first id of a millisecond and, for the following ids in the
same millisecond, the previous value plus a random increment. When that would
overflow, the timestamp borrows the next millisecond, so ids never go backwards.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid

__all__ = ["is_uuid7", "new_id", "uuid7_time_ms"]

_RANDOM_BITS = 74
_RANDOM_MAX = (1 << _RANDOM_BITS) - 1
_RAND_B_BITS = 62
_RAND_B_MASK = (1 << _RAND_B_BITS) - 1

_lock = threading.Lock()
_last_ms = 0
_last_random = 0


def new_id() -> str:
    """A new UUIDv7 in canonical lowercase form, greater than every id made before it here."""
    global _last_ms, _last_random
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            ms = now_ms
            # Start low in the range so many ids of one millisecond fit before a borrow.
            random_part = secrets.randbits(_RANDOM_BITS - 2)
        else:
            ms = _last_ms
            random_part = _last_random + 1 + secrets.randbits(32)
            if random_part > _RANDOM_MAX:
                ms += 1
                random_part = secrets.randbits(_RANDOM_BITS - 2)
        _last_ms, _last_random = ms, random_part
    rand_a = random_part >> _RAND_B_BITS
    rand_b = random_part & _RAND_B_MASK
    value = (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    return str(uuid.UUID(int=value))


def is_uuid7(value: str) -> bool:
    """True for a canonical lowercase UUIDv7 string."""
    try:
        parsed = uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return False
    return parsed.version == 7 and str(parsed) == value


def uuid7_time_ms(value: str) -> int:
    """The Unix millisecond timestamp carried by a UUIDv7."""
    return uuid.UUID(value).int >> 80
