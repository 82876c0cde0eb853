"""Opaque keyset cursors for session listings.

A cursor is Base64URL (no padding) of a small versioned JSON document that records the
order that issued it and the sort key of the last item of its page. It is refused, as
`InvalidCursorError` whose cause says why, when blank, malformed, of an unknown
version, or presented under the other order.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from convostore.errors import InvalidCursorError
from convostore.model import SessionOrder

__all__ = ["CURSOR_VERSION", "Keyset", "decode_cursor", "encode_cursor"]

CURSOR_VERSION = 1


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


def decode_cursor(cursor: str, order: SessionOrder) -> Keyset:
    """The keyset of ``cursor``, which must have been issued under ``order``."""
    try:
        keyset = _parse(cursor)
    except ValueError as why:
        raise InvalidCursorError() from why
    if keyset.order is not order:
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
    if order is SessionOrder.LAST_ACTIVITY:
        at = document.get("at")
        if not isinstance(at, int) or isinstance(at, bool):
            raise ValueError("the cursor carries no activity time")
        return Keyset(order, session_id, at)
    return Keyset(order, session_id)
