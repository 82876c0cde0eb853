"""UUIDv7 ids: time-ordered, and strictly increasing within one process; and random
stamps.

Layout (RFC 9562): 48 bits of Unix milliseconds, the version nibble 7, then 74 bits
that are random for the first id of a millisecond and, for the following ids in the
same millisecond, the previous value plus a random increment. When that would
overflow, the timestamp borrows the next millisecond, so ids never go backwards.

Random bits come from the operating system's generator (`os.urandom`), read
`_POOL_BYTES` at a time rather than by one system call per id: an append makes an id
and two stamps. A child process forgets its parent's unread bytes.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Final

__all__ = ["is_uuid7", "new_id", "new_stamp", "random_hex", "uuid7_time_ms"]

_POOL_BYTES: Final = 4096

_RANDOM_BITS = 74
_RANDOM_MAX = (1 << _RANDOM_BITS) - 1
_RAND_B_BITS = 62
_RAND_B_MASK = (1 << _RAND_B_BITS) - 1

_lock = threading.Lock()
_last_ms = 0
_last_random = 0
_pool = b""
_taken = 0


def _random_bytes(count: int) -> bytes:
    """``count`` random bytes from the pool (the caller holds ``_lock``)."""
    global _pool, _taken
    if _taken + count > len(_pool):
        _pool, _taken = os.urandom(_POOL_BYTES), 0
    start, _taken = _taken, _taken + count
    return _pool[start:_taken]


def _random_bits(bits: int) -> int:
    return int.from_bytes(_random_bytes((bits + 7) // 8), "big") >> (-bits % 8)


def _forget_pool() -> None:
    global _pool, _taken
    _pool, _taken = b"", 0


os.register_at_fork(after_in_child=_forget_pool)


def random_hex(count: int) -> str:
    """``count`` random bytes as lowercase hex."""
    with _lock:
        return _random_bytes(count).hex()


def new_stamp() -> str:
    """A new optimistic-concurrency stamp: opaque, random. Only the store makes them;
    a backend writes the stamp it is given."""
    return random_hex(8)


def new_id() -> str:
    """A new UUIDv7 in canonical lowercase form, greater than every id made before it here."""
    global _last_ms, _last_random
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            ms = now_ms
            # Start low in the range so many ids of one millisecond fit before a borrow.
            random_part = _random_bits(_RANDOM_BITS - 2)
        else:
            ms = _last_ms
            random_part = _last_random + 1 + _random_bits(32)
            if random_part > _RANDOM_MAX:
                ms += 1
                random_part = _random_bits(_RANDOM_BITS - 2)
        _last_ms, _last_random = ms, random_part
    rand_a = random_part >> _RAND_B_BITS
    rand_b = random_part & _RAND_B_MASK
    value = (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


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
