"""JSON as every backend stores it: strict (no NaN), compact, order kept."""

from __future__ import annotations

import json
from typing import Any

import orjson

from convostore.errors import InvalidArgumentError


def dumps(value: Any, name: str) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"{name} is not JSON-serialisable: {error}") from error
    return check_text(text, name)


def check_text(text: str, name: str) -> str:
    """``text`` if every backend can store it: a lone surrogate is not Unicode text, and
    a NUL character ends a string in some databases' text types."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{name} holds a lone surrogate, not Unicode text") from None
    if "\x00" in text:
        raise InvalidArgumentError(f"{name} holds a NUL character, which text cannot hold")
    return text


def loads(text: str) -> Any:
    """Stored JSON back as values. orjson reads it several times faster than json (this
    runs for every non-empty JSON column of every row read); it refuses integers beyond
    64 bits, which json wrote and reads back exactly."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def normalized(value: Any, name: str) -> tuple[Any, str]:
    """``value`` as it will read back (tuples become lists, keys strings), and its JSON."""
    text = dumps(value, name)
    return json.loads(text), text


def index_value(value: Any) -> str:
    """How a metadata value is compared by `Store.find_sessions_by_metadata`: a string
    as itself, anything else as its compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
