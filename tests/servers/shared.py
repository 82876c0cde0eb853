"""What every throwaway test server shares: its error, a server named by URL instead of
started here, and the one server a test session starts on first use.

    servers = SharedServer("CONVOSTORE_TEST_POSTGRESQL_URL", PostgresServer)
    server = servers.get()      # started once; ServerUnavailable, the same every call
    servers.stop()
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

__all__ = ["ExternalServer", "ServerUnavailable", "SharedServer"]


class ServerUnavailable(Exception):
    """The server cannot be started here; the message says why."""


class ExternalServer:
    """A server someone else runs, named by its URL: never started or stopped here.
    ``url(name)`` names one database (or graph) on it; ``default`` is the name used when
    none is given (None: the URL as it was given)."""

    def __init__(self, url: str, default: str | None = None) -> None:
        self._url = url
        self._default = default

    def url(self, name: str | None = None) -> str:
        name = name or self._default
        if name is None:
            return self._url
        return urlunsplit(urlsplit(self._url)._replace(path=f"/{name}"))

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None


class _Server(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


S = TypeVar("S", bound=_Server)


class SharedServer(Generic[S]):
    """The session's server: the URL in ``variable`` if set, else one server made by
    ``make`` and started on first `get` (stopped by `stop`, or at exit). A failure to
    start is remembered and raised again by every later `get`."""

    def __init__(self, variable: str, make: Callable[[], S], default: str | None = None):
        self._variable = variable
        self._make = make
        self._default = default
        self._server: S | ExternalServer | None = None
        self._failure: ServerUnavailable | None = None

    def get(self) -> S | ExternalServer:
        if self._server is not None:
            return self._server
        if self._failure is not None:
            raise self._failure
        external = os.environ.get(self._variable)
        if external:
            self._server = ExternalServer(external, self._default)
            return self._server
        server = self._make()
        try:
            server.start()
        except ServerUnavailable as failure:
            self._failure = failure
            raise
        atexit.register(server.stop)
        self._server = server
        return server

    def stop(self) -> None:
        if self._server is not None:
            with contextlib.suppress(ServerUnavailable):
                self._server.stop()
            self._server = None
