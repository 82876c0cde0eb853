"""Time as every backend keeps it: aware UTC datetimes, stored as integer microseconds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from convostore.errors import InvalidArgumentError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def utc_now() -> datetime:
    return datetime.now(UTC)


def require_aware(value: datetime, name: str) -> datetime:
    """``value`` in UTC; a naive datetime is refused, since its instant is unknown."""
    if not isinstance(value, datetime):
        raise InvalidArgumentError(f"{name} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgumentError(f"{name} must be timezone-aware (got a naive datetime)")
    return value.astimezone(UTC)


def to_micros(value: datetime) -> int:
    """Microseconds since the Unix epoch, exact (no float rounding)."""
    return (value - EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    # timedelta(days, seconds, microseconds) by position: the fastest exact form.
    return EPOCH + timedelta(0, 0, value)
