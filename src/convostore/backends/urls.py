"""What every backend's URL parser shares: query options read once each, whole numbers
and seconds checked against their range, passwords kept out of messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, TypeVar
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit, urlunsplit

from convostore.errors import InvalidArgumentError

__all__ = [
    "POOL_OPTIONS",
    "Parse",
    "check_pool",
    "one_of",
    "optional_text",
    "query_options",
    "redacted",
    "seconds",
    "server_address",
    "split",
    "target_of",
    "tls_options",
    "whole",
    "whole_number",
    "with_options",
]

# How one option's text becomes its value: (option name, text) -> value.
Parse = Callable[[str, str], Any]
T = TypeVar("T")
_MAX_POOL_SIZE: Final = 1000


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


def whole(lowest: int, highest: int) -> Parse:
    return lambda name, value: whole_number(name, value, lowest, highest)


def one_of(choices: Mapping[str, Any]) -> Parse:
    """One of ``choices``' names, in any case, as its value."""

    def parse(name: str, value: str) -> Any:
        if value.lower() not in choices:
            raise InvalidArgumentError(f"{name} must be one of {sorted(choices)}, not {value!r}")
        return choices[value.lower()]

    return parse


def optional_text(name: str, value: str) -> str | None:
    return value or None


# The options of a backend's pool of connections (checked together by `check_pool`).
POOL_OPTIONS: Final[dict[str, Parse]] = {
    "pool_min_size": whole(0, _MAX_POOL_SIZE),
    "pool_max_size": whole(1, _MAX_POOL_SIZE),
    "pool_timeout": seconds,
}


def with_options(
    target: T,
    query: str,
    parsers: Mapping[str, Parse],
    what: str,
    passed_on: list[tuple[str, str]] | None = None,
) -> T:
    """``target`` (a dataclass) with each option of ``query`` (`query_options`) set on the
    field of its name, parsed by ``parsers[name]``. An option with no parser goes to
    ``passed_on``, or without one is `InvalidArgumentError` (``what``: "the MySQL URL")."""
    for name, value in query_options(query, what):
        parse = parsers.get(name)
        if parse is not None:
            target = replace(target, **{name: parse(name, value)})  # type: ignore[type-var]
        elif passed_on is not None:
            passed_on.append((name, value))
        else:
            raise InvalidArgumentError(f"unknown option {name!r} in {what}")
    return target


def split(url: str, schemes: Sequence[str], name: str) -> SplitResult:
    """The parts of ``url``, whose scheme must be one of ``schemes`` (``name``: the
    database's, for the message)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in schemes:
        raise InvalidArgumentError(f"not a {name} URL: {redacted(url)!r}")
    return parts


def server_address(
    parts: SplitResult, default_port: int, name: str
) -> tuple[str, int, str | None, str | None]:
    """The host (``localhost`` if none), port, user and password of a server's URL, the
    user and password unquoted (None where the URL gives none, or an empty user)."""
    try:
        port = parts.port or default_port
    except ValueError as error:
        raise InvalidArgumentError(f"bad port in the {name} URL: {error}") from None
    user = unquote(parts.username) if parts.username else None
    password = None if parts.password is None else unquote(parts.password)
    return parts.hostname or "localhost", port, user, password


# redis-py's TLS options, which the Redis and FalkorDB URLs pass on as they are.
_TLS_OPTIONS: Final = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")
_CERT_REQS: Final = ("required", "optional", "none")


def tls_options(given: list[tuple[str, str]], tls: bool, what: str, tls_url: str) -> dict[str, str]:
    """The TLS options (redis-py's ``ssl_*``) among the options ``given`` that no parser
    took; any other is `InvalidArgumentError`, and so is any of them without ``tls``
    (``what``: "the Redis URL"; ``tls_url``: the URL they need, "a TLS (rediss://) URL")."""
    ssl: dict[str, str] = {}
    for name, value in given:
        if name not in _TLS_OPTIONS:
            raise InvalidArgumentError(f"unknown option {name!r} in {what}")
        if not tls:
            raise InvalidArgumentError(f"{name} needs {tls_url}")
        if name == "ssl_cert_reqs" and value not in _CERT_REQS:
            raise InvalidArgumentError(f"ssl_cert_reqs must be one of {_CERT_REQS}")
        ssl[name] = value
    return ssl


def check_pool(min_size: int, max_size: int) -> None:
    if max_size < max(1, min_size):
        raise InvalidArgumentError("pool_max_size must be at least 1 and at least pool_min_size")


def target_of(parse: Callable[[str], T], url: str, options: Mapping[str, Any], name: str) -> T:
    """``parse(url)``, where a backend takes no store options beside its URL (``name``:
    the database's, for the message)."""
    if options:
        raise InvalidArgumentError(f"unknown {name} store options: {sorted(options)}")
    return parse(url)


def redacted(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
