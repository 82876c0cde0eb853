"""Keyset cursors: opaque, versioned Base64URL that records the order that issued it."""

from __future__ import annotations

import base64
import json
import re

import pytest

from convostore.cursors import CURSOR_VERSION, Keyset, decode_cursor, encode_cursor
from convostore.errors import InvalidArgumentError, InvalidCursorError, StoreError
from convostore.model import SessionOrder

BASE64URL = re.compile(r"[A-Za-z0-9_-]+")

KEYSETS = [
    Keyset(SessionOrder.CREATED, "0190f0a8-7c1e-7abc-8def-0123456789ab"),
    Keyset(SessionOrder.CREATED, "séance-✓-会话"),
    Keyset(SessionOrder.CREATED, "x" * 255),
    Keyset(SessionOrder.LAST_ACTIVITY, "s-1", 1_704_164_645_123_456),
    Keyset(SessionOrder.LAST_ACTIVITY, "s-2", 0),
    Keyset(SessionOrder.LAST_ACTIVITY, "s-3", -1),
    Keyset(SessionOrder.LAST_ACTIVITY, "s-4", 253_402_300_799_999_999),
]


def document(value: object) -> str:
    raw = json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@pytest.mark.parametrize("keyset", KEYSETS, ids=repr)
def test_round_trip(keyset: Keyset) -> None:
    cursor = encode_cursor(keyset)
    assert BASE64URL.fullmatch(cursor), cursor
    assert decode_cursor(cursor, keyset.order) == keyset


def test_cursor_is_versioned() -> None:
    cursor = encode_cursor(KEYSETS[0])
    raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    assert raw["v"] == CURSOR_VERSION


def assert_refused(cursor: object, order: SessionOrder) -> InvalidCursorError:
    with pytest.raises(InvalidCursorError) as caught:
        decode_cursor(cursor, order)  # type: ignore[arg-type]
    error = caught.value
    assert str(error) == "invalid session cursor"
    assert isinstance(error, ValueError)
    assert isinstance(error, InvalidArgumentError)
    assert isinstance(error, StoreError)
    assert error.__cause__ is not None
    assert str(error.__cause__)
    return error


@pytest.mark.parametrize("keyset", KEYSETS, ids=repr)
def test_refused_under_the_other_order(keyset: Keyset) -> None:
    other = next(o for o in SessionOrder if o is not keyset.order)
    error = assert_refused(encode_cursor(keyset), other)
    assert "order" in str(error.__cause__)


BAD = {
    "empty": "",
    "blank": "   ",
    "newline": "\n",
    "not-base64": "not a cursor!",
    "percent": "%%%%",
    "truncated": encode_cursor(KEYSETS[0])[:10],
    "not-json": base64.urlsafe_b64encode(b"\xff\xfe\x00").decode(),
    "json-array": document([1, "created", "x"]),
    "json-string": document("created"),
    "json-null": document(None),
    "no-version": document({"o": "created", "id": "x"}),
    "version-0": document({"v": 0, "o": "created", "id": "x"}),
    "version-2": document({"v": 2, "o": "created", "id": "x"}),
    "version-string": document({"v": "1", "o": "created", "id": "x"}),
    "version-null": document({"v": None, "o": "created", "id": "x"}),
    "version-true": document({"v": True, "o": "created", "id": "x"}),
    "unknown-order": document({"v": 1, "o": "sideways", "id": "x"}),
    "no-order": document({"v": 1, "id": "x"}),
    "no-id": document({"v": 1, "o": "created"}),
    "empty-id": document({"v": 1, "o": "created", "id": ""}),
    "id-not-a-string": document({"v": 1, "o": "created", "id": 5}),
    "activity-missing": document({"v": 1, "o": "last_activity", "id": "x"}),
    "activity-string": document({"v": 1, "o": "last_activity", "id": "x", "at": "5"}),
    "activity-bool": document({"v": 1, "o": "last_activity", "id": "x", "at": True}),
    "activity-float": document({"v": 1, "o": "last_activity", "id": "x", "at": 1.5}),
    "too-long": "A" * 5000,
}


@pytest.mark.parametrize("cursor", list(BAD.values()), ids=list(BAD))
def test_bad_cursors_are_refused_with_a_cause(cursor: str) -> None:
    for order in SessionOrder:
        assert_refused(cursor, order)


@pytest.mark.parametrize("cursor", [None, 5, b"abc", ["x"]], ids=repr)
def test_non_strings_are_refused(cursor: object) -> None:
    assert_refused(cursor, SessionOrder.CREATED)
