"""What every backend's URL parser shares: query options read once each, whole numbers
and seconds checked against their range, passwords kept out of messages."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit, urlunsplit

from convostore.errors import InvalidArgumentError

__all__ = ["query_options", "redacted", "seconds", "whole_number"]


def query_options(query: str, what: str) -> list[tuple[str, str]]:
    """The ``name=value`` options of a URL's query, in order; a malformed query or an
    option given twice is `InvalidArgumentError` (``what``: "the SQLite URL", ...)."""
    try:
        options = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as error:
        raise InvalidArgumentError(f"malformed query in {what}: {error}") from None
    seen: set[str] = set()
    for name, _ in options:
        if name in seen:
            raise InvalidArgumentError(f"option {name!r} given twice in {what}")
        seen.add(name)
    return options


def whole_number(name: str, value: str, lowest: int, highest: int) -> int:
    if not (value.isascii() and value.isdigit()) or not lowest <= int(value) <= highest:
        raise InvalidArgumentError(
            f"{name} must be a whole number from {lowest} to {highest}, not {value!r}"
        )
    return int(value)


def seconds(name: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 < number <= 3600:
        raise InvalidArgumentError(f"{name} must be a number of seconds up to 3600, not {value!r}")
    return number


def redacted(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
