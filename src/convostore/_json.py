"""JSON as every backend stores it: strict (no NaN), compact, order kept, nested at most
`MAX_JSON_DEPTH` deep."""

from __future__ import annotations

import json
from typing import Any, Final

import orjson

from convostore.errors import InvalidArgumentError

MAX_JSON_DEPTH: Final = 100
"""How deep a JSON value may nest (objects and arrays): deeper values are refused with
`InvalidArgumentError`, so every backend and every JSON parser reads back what it
stores without exhausting its stack."""


_CONTAINERS: Final = (dict, list, tuple)


def dumps(value: Any, name: str) -> str:
    check_depth(value, name)
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as error:
        raise InvalidArgumentError(f"{name} is not JSON-serialisable: {error}") from error
    return check_text(text, name)


def check_depth(value: Any, name: str) -> None:
    """Refuse ``value`` if its objects and arrays nest deeper than `MAX_JSON_DEPTH`;
    walked without recursion, so a cycle or a value a million levels deep is refused
    as surely as one of 101."""
    level: dict[int, Any] = {id(value): value} if isinstance(value, _CONTAINERS) else {}
    for _ in range(MAX_JSON_DEPTH):
        if not level:
            return
        inner: dict[int, Any] = {}
        for item in level.values():
            for child in item.values() if isinstance(item, dict) else item:
                if isinstance(child, _CONTAINERS):
                    inner[id(child)] = child
        level = inner
    if not level:
        return
    raise InvalidArgumentError(f"{name} nests deeper than {MAX_JSON_DEPTH} levels")


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


def index_value(value: Any, name: str = "metadata value") -> str:
    """How a metadata value is compared by `Store.find_sessions_by_metadata`: a string
    as itself, anything else as its compact JSON (a value JSON cannot hold, such as NaN,
    is refused with `InvalidArgumentError`)."""
    if isinstance(value, str):
        return check_text(value, name)
    return dumps(value, name)


def indexable(value: Any) -> str | None:
    """`index_value` of a value read from (or normalised for) stored metadata, or None
    when it cannot be indexed (a string holding a NUL character)."""
    text = value if isinstance(value, str) else dumps(value, "metadata value")
    return None if "\x00" in text else text
