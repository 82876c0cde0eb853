"""What every throwaway test server shares: its error, a free loopback port, a process
in a temporary directory used as a context manager, a server named by URL instead of
started here, and the one server a test session starts on first use.

    servers = SharedServer("CONVOSTORE_TEST_POSTGRESQL_URL", PostgresServer)
    server = servers.get()      # started once; ServerUnavailable, the same every call
    servers.stop()
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import itertools
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Generic, Protocol, Self, TypeVar
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "ExternalServer",
    "ServerProcess",
    "ServerUnavailable",
    "SharedServer",
    "free_port",
    "log_tail",
    "on_a_free_port",
    "run_tool",
]


class ServerUnavailable(Exception):
    """The server cannot be started here; the message says why."""


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def on_a_free_port(launch: Callable[[int], None], attempts: int = 3) -> int:
    """Run ``launch(port)`` on a free port, on another when it raises `ServerUnavailable`
    (another process may take a port between the probe and the start); the port."""
    for attempt in itertools.count(1):
        port = free_port()
        try:
            launch(port)
            return port
        except ServerUnavailable:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def run_tool(
    command: Sequence[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: Callable[[], str] = lambda: "",
) -> None:
    """Run one of a server's tools to the end; when it cannot run or fails,
    `ServerUnavailable` with what it printed and ``log()`` (the server log's tail)."""
    try:
        subprocess.run(
            list(command), check=True, capture_output=True, text=True, env=env,
            timeout=timeout, cwd=cwd,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        output = ""
        if isinstance(error, subprocess.CalledProcessError):
            output = (error.stderr or error.stdout or "").strip()[-2000:]
        raise ServerUnavailable(
            f"{Path(command[0]).name} failed: {error}" + (f": {output}" if output else "") + log()
        ) from error


def log_tail(path: Path | None, count: int) -> str:
    """The last ``count`` lines of a server's log, to end an error message with."""
    if path is None or not path.exists():
        return ""
    lines = path.read_text(errors="replace").splitlines()[-count:]
    return "\nserver log:\n" + "\n".join(lines) if lines else ""


class ServerProcess(abc.ABC):
    """A server process whose files live in a temporary ``directory`` (None until it is
    started), used as a context manager: started on entry, stopped on exit."""

    directory: Path | None = None

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _file(self, name: str) -> Path:
        assert self.directory is not None, "the server is not started"
        return self.directory / name

    def _remove_directory(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


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
