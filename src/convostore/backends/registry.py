"""URL scheme -> backend class, each imported only when a URL names it.

The schemes of this package's backends are in `BUILTIN`, as ``"module:Class"``; a
planned backend's scheme is listed there too, so it is reserved, and it loads as soon
as its package is present (``convostore.backends.mysql`` exposing ``MySQLBackend``,
``convostore.backends.falkordb`` exposing ``FalkorDBBackend``, ...). A third-party
backend registers its schemes through the entry-point group ``convostore.backends``
(name: the scheme; value: ``"module:Class"``, a `Backend` subclass), or in-process
with `register_backend`. A built-in backend that is present wins over an entry point.
"""

from __future__ import annotations

import importlib
import importlib.util
from importlib.metadata import entry_points
from typing import Any

from convostore.backends.interface import Backend
from convostore.errors import BackendUnavailableError, InvalidArgumentError

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "backend_for",
    "pending_migrations",
    "register_backend",
    "require_driver",
    "scheme_of",
]

ENTRY_POINT_GROUP = "convostore.backends"

BUILTIN: dict[str, str] = {
    "memory": "convostore.backends.memory:MemoryBackend",
    "sqlite": "convostore.backends.sqlite:SQLiteBackend",
    "postgresql": "convostore.backends.postgresql:PostgreSQLBackend",
    "postgres": "convostore.backends.postgresql:PostgreSQLBackend",
    "mysql": "convostore.backends.mysql:MySQLBackend",
    "mariadb": "convostore.backends.mysql:MySQLBackend",
    "falkordb": "convostore.backends.falkordb:FalkorDBBackend",
    "falkordbs": "convostore.backends.falkordb:FalkorDBBackend",
    "neo4j": "convostore.backends.neo4j:Neo4jBackend",
    "bolt": "convostore.backends.neo4j:Neo4jBackend",
    "memgraph": "convostore.backends.memgraph:MemgraphBackend",
    "redis": "convostore.backends.redis:RedisBackend",
    "rediss": "convostore.backends.redis:RedisBackend",
    "valkey": "convostore.backends.redis:RedisBackend",
    "valkeys": "convostore.backends.redis:RedisBackend",
}

_registered: dict[str, type[Backend]] = {}


def scheme_of(url: str) -> str:
    """The URL's scheme, lowercase; a URL without ``://`` is a SQLite path."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgumentError("a store URL must be a non-blank string")
    scheme, separator, _ = url.partition("://")
    return scheme.lower() if separator else "sqlite"


def require_driver(backend: str, extra: str, *modules: str) -> None:
    """Import ``modules`` (a backend's driver) now, or raise `BackendUnavailableError`
    naming the extra that installs them."""
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError as missing:
        raise BackendUnavailableError(
            f"the {backend} backend needs {', '.join(modules)}: pip install 'convostore[{extra}]'"
        ) from missing


def register_backend(scheme: str, backend: type[Backend]) -> None:
    """Serve ``scheme`` with ``backend`` in this process (after the built-in backends
    that are present, before entry points)."""
    if not isinstance(backend, type) or not issubclass(backend, Backend):
        raise InvalidArgumentError("register_backend takes a Backend subclass")
    _registered[scheme.lower()] = backend


def backend_for(url: str) -> type[Backend]:
    """The backend class for ``url``'s scheme, importing its module now. A driver the
    backend needs and lacks raises `BackendUnavailableError` naming the extra; a reserved
    scheme whose backend is not installed raises it too."""
    scheme = scheme_of(url)
    # "postgresql+psycopg", "mysql+asyncmy": the part before "+" names the backend.
    for name in dict.fromkeys((scheme, scheme.partition("+")[0])):
        found = _builtin(name) or _registered.get(name) or _entry_point(name)
        if found is not None:
            return found
    base = scheme.partition("+")[0]
    if base in BUILTIN:
        raise BackendUnavailableError(
            f"the {base!r} backend is not in this installation of convostore"
        )
    raise InvalidArgumentError(f"unknown store URL scheme {scheme!r} in {url!r}")


async def pending_migrations(url: str, **options: Any) -> list[str]:
    """The schema migrations connecting to ``url`` would apply, one line each, oldest
    first; [] when the schema is current. Changes nothing (see
    `Backend.pending_migrations`)."""
    return await backend_for(url).pending_migrations(url, **options)


def _builtin(scheme: str) -> type[Backend] | None:
    target = BUILTIN.get(scheme)
    if target is None:
        return None
    module_name = target.partition(":")[0]
    if importlib.util.find_spec(module_name) is None:
        return None
    return _load(target, f"built-in backend for {scheme!r}")


def _entry_point(scheme: str) -> type[Backend] | None:
    for entry in entry_points(group=ENTRY_POINT_GROUP, name=scheme):
        return _load(entry.value, f"entry point {entry.name!r} of {ENTRY_POINT_GROUP!r}")
    return None


def _load(target: str, what: str) -> type[Backend]:
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except BackendUnavailableError:
        raise
    except ImportError as error:
        raise BackendUnavailableError(f"cannot import the {what} ({target}): {error}") from error
    loaded = getattr(module, attribute, None)
    if not isinstance(loaded, type) or not issubclass(loaded, Backend):
        raise BackendUnavailableError(f"the {what} ({target}) is not a Backend subclass")
    return loaded
