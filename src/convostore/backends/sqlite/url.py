"""SQLite URLs: where the database is and how it is opened."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from convostore.backends.urls import query_options
from convostore.errors import InvalidArgumentError

__all__ = ["DEFAULT_PATH", "MEMORY_PATH", "SYNCHRONOUS_LEVELS", "SQLiteTarget", "parse_sqlite_url"]

DEFAULT_PATH: Final = "convostore.db"
MEMORY_PATH: Final = ":memory:"
SYNCHRONOUS_LEVELS: Final = ("FULL", "NORMAL", "EXTRA")
_MAX_BUSY_TIMEOUT_MS = 2**31 - 1


@dataclass(frozen=True, slots=True)
class SQLiteTarget:
    """Where a store's database is, and how its connections are set up.

    ``synchronous`` FULL (the default) makes every committed write durable across a power
    loss; NORMAL skips the sync per commit and may lose the last commits, never the
    database's consistency.
    """

    path: str
    synchronous: str = "FULL"
    busy_timeout_ms: int = 5000

    @property
    def in_memory(self) -> bool:
        return self.path == MEMORY_PATH


def parse_sqlite_url(url: str) -> SQLiteTarget:
    """The target of a URL: ``sqlite:///relative.db``, ``sqlite:////absolute.db``,
    ``sqlite://`` or ``sqlite:///`` (``./convostore.db``), ``sqlite:///:memory:``, each
    with ``?synchronous=full|normal|extra`` and ``?busy_timeout=<ms>``; or a bare path,
    taken whole (with no options)."""
    if "\x00" in url:
        raise InvalidArgumentError("a SQLite URL holds a NUL character, which no path can hold")
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            "a SQLite URL holds a lone surrogate, not Unicode text"
        ) from None
    scheme, separator, rest = url.partition("://")
    if not separator:
        return SQLiteTarget(url)
    if scheme.lower() != "sqlite":
        raise InvalidArgumentError(f"not a SQLite URL: {url!r}")
    location, _, query = rest.partition("?")
    if location and not location.startswith("/"):
        raise InvalidArgumentError(
            "a SQLite URL names no host: use sqlite:///relative/path.db or "
            f"sqlite:////absolute/path.db, not {url!r}"
        )
    target = SQLiteTarget(location[1:] or DEFAULT_PATH)
    for name, value in query_options(query, f"the SQLite URL {url!r}"):
        if name == "synchronous":
            level = value.upper()
            if level not in SYNCHRONOUS_LEVELS:
                raise InvalidArgumentError(
                    f"synchronous must be full, normal or extra, not {value!r}"
                )
            target = replace(target, synchronous=level)
        elif name == "busy_timeout":
            if not (value.isascii() and value.isdigit()) or int(value) > _MAX_BUSY_TIMEOUT_MS:
                raise InvalidArgumentError(
                    f"busy_timeout must be a whole number of milliseconds, not {value!r}"
                )
            target = replace(target, busy_timeout_ms=int(value))
        else:
            raise InvalidArgumentError(
                f"unknown SQLite URL option {name!r}; the options are synchronous and busy_timeout"
            )
    return target
