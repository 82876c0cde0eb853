"""Opaque keyset cursors for session listings.

A cursor is Base64URL (no padding) of a small versioned JSON document that records the
order that issued it and the sort key of the last item of its page. Cursors come from
clients, so one is accepted only exactly as `encode_cursor` wrote it: anything forged,
truncated, extended or re-encoded, blank, of an unknown version, or presented under the
other order is refused as `InvalidCursorError`, whose cause says why.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from convostore._time import to_micros
from convostore.errors import InvalidCursorError
from convostore.model import SessionOrder

__all__ = ["CURSOR_VERSION", "Keyset", "decode_cursor", "encode_cursor"]

CURSOR_VERSION = 1
MAX_ID_LENGTH = 255
# The instants a datetime can hold, in microseconds since the epoch: no stored time lies
# outside them.
_MIN_MICROS = to_micros(datetime.min.replace(tzinfo=UTC))
_MAX_MICROS = to_micros(datetime.max.replace(tzinfo=UTC))


@dataclass(frozen=True, slots=True)
class Keyset:
    """The position after which the next page starts: the last item's sort key.

    ``last_activity_us`` is set only under `SessionOrder.LAST_ACTIVITY`.
    """

    order: SessionOrder
    session_id: str
    last_activity_us: int | None = None


def encode_cursor(keyset: Keyset) -> str:
    document: dict[str, object] = {
        "v": CURSOR_VERSION,
        "o": keyset.order.value,
        "id": keyset.session_id,
    }
    if keyset.order is SessionOrder.LAST_ACTIVITY:
        document["at"] = keyset.last_activity_us
    raw = json.dumps(document, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(cursor: str, order: SessionOrder | None = None) -> Keyset:
    """The keyset of ``cursor``, which must have been issued under ``order`` (under
    either order when None)."""
    try:
        keyset = _parse(cursor)
        if encode_cursor(keyset) != cursor:
            raise ValueError("the cursor was altered: it is not as the store wrote it")
    except ValueError as why:
        raise InvalidCursorError() from why
    if order is not None and keyset.order is not order:
        raise InvalidCursorError() from ValueError(
            f"the cursor was issued under order {keyset.order.value!r}, not {order.value!r}"
        )
    return keyset


def _parse(cursor: str) -> Keyset:
    if not isinstance(cursor, str):
        raise ValueError(f"a cursor is a string, not {type(cursor).__name__}")
    if not cursor.strip():
        raise ValueError("the cursor is blank")
    if len(cursor) > 1024:
        raise ValueError("the cursor is too long")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        document = json.loads(raw)
    except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError("the cursor is not Base64URL of a cursor document") from error
    if not isinstance(document, dict):
        raise ValueError("the cursor document is not an object")
    version = document.get("v")
    if type(version) is not int or version != CURSOR_VERSION:
        raise ValueError(f"unknown cursor version {document.get('v')!r}")
    try:
        order = SessionOrder(str(document.get("o")))
    except ValueError as error:
        raise ValueError(f"unknown order {document.get('o')!r} in the cursor") from error
    session_id = document.get("id")
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("the cursor names no session")
    if len(session_id) > MAX_ID_LENGTH or not _is_text(session_id):
        raise ValueError("the cursor's session id is not a session id")
    if order is SessionOrder.LAST_ACTIVITY:
        at = document.get("at")
        if not isinstance(at, int) or isinstance(at, bool):
            raise ValueError("the cursor carries no activity time")
        if not _MIN_MICROS <= at <= _MAX_MICROS:
            raise ValueError("the cursor's activity time is out of range")
        return Keyset(order, session_id, at)
    return Keyset(order, session_id)


def _is_text(value: str) -> bool:
    """Whether every backend can hold ``value``: Unicode (no lone surrogate), no NUL."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value
