"""What every throwaway test server shares: its error, a free loopback port, the
lifecycle of a server process in a temporary directory (`ServerProcess`), a server named
by URL instead of started here, and the one server a test session starts on first use.

    servers = SharedServer("CONVOSTORE_TEST_POSTGRESQL_URL", PostgresServer)
    server = servers.get()      # started once; ServerUnavailable, the same every call
    servers.stop()
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Generic, Protocol, Self, TypeVar
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "ExternalServer",
    "ServerProcess",
    "ServerUnavailable",
    "SharedServer",
    "free_port",
    "installed_files",
    "log_tail",
    "on_a_free_port",
    "run_tool",
]


class ServerUnavailable(Exception):
    """The server cannot be started here; the message says why."""


def installed_files(package: str, *names: str, module: str | None = None) -> list[Path]:
    """The files ``names`` (paths in the directory of its ``module``: by default the
    name with underscores) of the installed PyPI package ``package``, or
    `ServerUnavailable` saying which is missing."""
    spec = importlib.util.find_spec(module or package.replace("-", "_"))
    if spec is None or spec.origin is None:
        raise ServerUnavailable(
            f"the PyPI package {package} is not installed: pip install {package}"
        )
    files = [Path(spec.origin).parent / name for name in names]
    missing = [str(path) for path in files if not path.exists()]
    if missing:
        raise ServerUnavailable(f"{package} has no {', '.join(missing)}")
    return files


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def on_a_free_port(
    launch: Callable[[int], None],
    attempts: int = 3,
    retry: type[ServerUnavailable] = ServerUnavailable,
) -> int:
    """Run ``launch(port)`` on a free port, on another when it raises ``retry`` (another
    process may take a port between the probe and the start); the port."""
    for attempt in itertools.count(1):
        port = free_port()
        try:
            launch(port)
            return port
        except retry:
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


class ServerProcess:
    """One server process with its files in a temporary ``directory`` (None until it is
    first started), on a loopback ``port``; used as a context manager (started on entry,
    stopped on exit). The lifecycle every test server shares:

    - `start`: the first time, a new directory, `_prepare` (a data directory, say) and a
      free port (another one when the server exits at once, as when something took the
      port meanwhile); after `kill` the same directory and port again. The server's
      output goes to `log_file`; it is ready when it prints ``ready_line`` (or when
      `_ready` says so), else `ServerUnavailable` with its log's tail after
      ``start_timeout`` seconds. A first start that fails leaves nothing behind.
    - `stop`: ``stop_signal``, SIGKILL after ``stop_timeout`` seconds, then the
      directory is deleted. Stopping twice is harmless.
    - `kill`: ``kill_signal`` (SIGKILL), as a crash would; the files stay for `start`.
    - `restart`: stop (or kill, ``crash=True``) and start again, same port and files.

    A subclass gives `_command` (the command line for ``port`` and ``directory``) and
    ``name``; ``run_as`` runs the process as that system user (its own group only).
    """

    name: ClassVar[str] = "server"
    ready_line: ClassVar[str | None] = None
    start_timeout: ClassVar[float] = 60.0
    stop_timeout: ClassVar[float] = 30.0
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM
    kill_signal: ClassVar[signal.Signals] = signal.SIGKILL
    log_lines: ClassVar[int] = 20
    directory: Path | None = None

    def __init__(self) -> None:
        self.port = 0
        self.directory: Path | None = None
        self.run_as: str | None = None
        self.started_in: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._process is not None:
            return
        if self.directory is not None:
            self._launch()
            return
        self.directory = Path(tempfile.mkdtemp(prefix=f"convostore-{self.name}-"))
        try:
            self._prepare()

            def launch(port: int) -> None:
                self.port = port
                self._launch()

            on_a_free_port(launch, retry=_ExitedAtStart)
        except BaseException:
            self._kill()
            self._remove_directory()
            raise

    def stop(self) -> None:
        self._end(self.stop_signal)
        self._remove_directory()

    def kill(self) -> None:
        """End the server at once, as a crash would; its files stay for `start`."""
        self._kill()

    def restart(self, *, crash: bool = False) -> None:
        """Stop the server (``crash``: kill it) and start it again on the same port, with
        the same files."""
        self._end(self.kill_signal if crash else self.stop_signal)
        self._launch()

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

    @property
    def running(self) -> bool:
        return self._process is not None

    @property
    def pid(self) -> int:
        assert self._process is not None, "the server is not running"
        return self._process.pid

    @property
    def log_file(self) -> Path:
        """Where the server's output goes (appended to at each start)."""
        return self._file("server.log")

    # ---------------------------------------------------------------- for subclasses

    def _command(self) -> list[str]:
        """The command line that runs the server on ``port`` in ``directory``."""
        raise NotImplementedError

    def _prepare(self) -> None:
        """Make what a first start needs in the new ``directory`` (nothing by default)."""

    def _ready(self) -> bool:
        """Whether the server is ready: by default, it printed ``ready_line`` since it
        was launched."""
        assert self.ready_line is not None, f"{type(self).__name__} says nothing of ready"
        with self.log_file.open("rb") as log:
            log.seek(self._log_offset)
            return self.ready_line.encode() in log.read()

    def _environment(self) -> dict[str, str] | None:
        """The server's environment (None: this process's)."""
        return None

    # ---------------------------------------------------------------- internals

    def _launch(self) -> None:
        """Start the process on ``port`` in ``directory`` and wait until it is ready."""
        assert self.directory is not None
        began = time.monotonic()
        user = pwd.getpwnam(self.run_as) if self.run_as is not None else None
        with self.log_file.open("ab") as log:
            self._log_offset = log.tell()
            self._process = subprocess.Popen(
                self._command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.directory, env=self._environment(),
                user=None if user is None else user.pw_uid,
                group=None if user is None else user.pw_gid,
                extra_groups=None if user is None else [],
            )  # fmt: skip
        deadline = began + self.start_timeout
        while not self._ready():
            if self._process.poll() is not None:
                self._process = None
                raise _ExitedAtStart(f"{self.name} exited at start{self._log_tail()}")
            if time.monotonic() > deadline:
                self._kill()
                raise ServerUnavailable(
                    f"{self.name} did not start in {self.start_timeout:.0f} s{self._log_tail()}"
                )
            time.sleep(0.05)
        self.started_in = time.monotonic() - began

    def _kill(self) -> None:
        self._end(self.kill_signal)

    def _end(self, how: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        # A frozen (SIGSTOP) server gets the signal only once it runs again.
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)
            process.send_signal(how)
        try:
            process.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _log_tail(self) -> str:
        return log_tail(None if self.directory is None else self.log_file, self.log_lines)

    def _file(self, name: str) -> Path:
        assert self.directory is not None, "the server is not started"
        return self.directory / name

    def _remove_directory(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


class _ExitedAtStart(ServerUnavailable):
    """The server ended as it started (another process may have taken its port)."""


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
