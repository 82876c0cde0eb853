"""A throwaway MariaDB server, from Debian's ``mariadb-server`` package.

`MariaDBServer` creates a data directory with ``mariadb-install-db`` in a new temporary
directory and runs ``mariadbd --no-defaults`` on it: a free loopback port only, its
socket and logs in that directory, as the system user ``mysql`` (the package's) when run
as root. Nothing of the machine's own MariaDB configuration or data is read or touched.

`shared_server` is what the test session uses: one server, started on first use and
stopped at the end of the session (or at exit). ``CONVOSTORE_TEST_MYSQL_URL`` points the
tests at an existing MySQL or MariaDB server instead, whose URL must name a user that
may create and drop databases. `shared_server_11` is the same for MariaDB 11.8 (native
vectors), run from the copy ``scripts/fetch_mariadb.sh`` unpacks into the virtual
environment (``CONVOSTORE_TEST_MARIADB11_URL`` names an existing one instead).

    with MariaDBServer() as server:
        print(server.url("chat"))       # mysql://root@127.0.0.1:PORT/chat
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import sys
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlsplit

from tests.servers.shared import (
    ExternalServer,
    ServerProcess,
    ServerUnavailable,
    SharedServer,
    run_tool,
)

__all__ = [
    "SERVER_URL_VARIABLE",
    "ExternalServer",
    "MariaDBServer",
    "ServerUnavailable",
    "TestServer",
    "create_database_at_defaults",
    "shared_server",
    "shared_server_11",
    "stop_shared_server",
    "stop_shared_server_11",
]

SERVER_URL_VARIABLE: Final = "CONVOSTORE_TEST_MYSQL_URL"
SERVER_11_URL_VARIABLE: Final = "CONVOSTORE_TEST_MARIADB11_URL"
# Where scripts/fetch_mariadb.sh unpacks MariaDB 11.8: the running virtual environment.
MARIADB_11_HOME: Final = Path(sys.prefix) / "mariadb-11.8"
SYSTEM_USER: Final = "mysql"
# Where Debian's packages put the programs; PATH is searched first.
_PROGRAM_DIRECTORIES: Final = ("/usr/sbin", "/usr/bin")
# Durability traded for speed: a test server's data is thrown away with it. The server's
# own default character set (latin1 on MariaDB 10.11) is kept on purpose: convostore
# must ask for utf8mb4 itself.
FAST_SETTINGS: Final = {"innodb-flush-log-at-trx-commit": "2", "innodb-doublewrite": "0"}
COMMON_SETTINGS: Final = {
    "bind-address": "127.0.0.1",
    "skip-name-resolve": "ON",
    "max-connections": "500",
    "innodb-buffer-pool-size": "256M",
    "innodb-log-file-size": "64M",
    "skip-log-bin": "ON",
    "performance-schema": "OFF",
    # The most new words the FULLTEXT cache holds before it is written out: while it is,
    # the messages in it are not found for a moment (README, "Text search").
    "innodb-ft-cache-size": "80000000",
}
_START_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 60.0
_COMMAND_TIMEOUT_S = 180


def _program(name: str) -> str:
    found = shutil.which(name) or next(
        (
            str(Path(directory) / name)
            for directory in _PROGRAM_DIRECTORIES
            if (Path(directory) / name).exists()
        ),
        None,
    )
    if found is None:
        raise ServerUnavailable(
            f"{name} is not installed: apt-get install mariadb-server (scripts/setup.sh does)"
        )
    return found


class MariaDBServer(ServerProcess):
    """One MariaDB server in a temporary directory, on a free loopback port (its
    lifecycle: `ServerProcess`; `restart` with ``crash=True`` kills it first, as a power
    cut to the process would).

    ``durable=False`` (for tests) flushes the log once a second rather than at every
    commit; a benchmark keeps the defaults so its figures are those of a real server.
    ``settings`` adds or overrides server options (names as on mariadbd's command line).
    ``home`` runs the server unpacked there by scripts/fetch_mariadb.sh instead of the
    system's.
    """

    name = "mariadb"
    start_timeout = _START_TIMEOUT_S
    stop_timeout = _STOP_TIMEOUT_S
    log_lines = 8

    def __init__(
        self,
        *,
        durable: bool = False,
        settings: dict[str, str] | None = None,
        home: Path | None = None,
    ) -> None:
        super().__init__()
        self.settings = {**COMMON_SETTINGS, **({} if durable else FAST_SETTINGS)}
        self.home = home
        if home is not None:
            # Its own messages, and no plugin of the system's older server.
            messages = home / "root" / "usr" / "share" / "mariadb"
            self.settings.update(
                {"lc-messages-dir": str(messages), "plugin-dir": str(home / "plugin")}
            )
        self.settings.update(settings or {})
        self._as_user: list[str] = []

    # ---------------------------------------------------------------- addresses

    @property
    def data(self) -> Path:
        return self._file("data")

    @property
    def socket_path(self) -> Path:
        return self._file("mariadbd.sock")

    @property
    def log_file(self) -> Path:
        return self._file("error.log")

    def url(self, database: str = "mysql", user: str = "root") -> str:
        """The URL of ``database`` on this server, as ``user`` (root has no password)."""
        assert self.directory is not None, "the server is not started"
        return f"mysql://{user}@127.0.0.1:{self.port}/{database}"

    # ---------------------------------------------------------------- internals

    def _prepare(self) -> None:
        """The data directory, made by mariadb-install-db (as the system user ``mysql``
        when run as root)."""
        install_db, *install_options = self._install_db()
        self._mariadbd()
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(SYSTEM_USER)
            except KeyError:
                raise ServerUnavailable(
                    f"no system user {SYSTEM_USER!r} to run mariadbd as (the mariadb-server "
                    "package creates it)"
                ) from None
            self._as_user = [f"--user={SYSTEM_USER}"]
            assert self.directory is not None
            shutil.chown(self.directory, SYSTEM_USER, SYSTEM_USER)
        run_tool(
            [install_db, "--no-defaults", *install_options, f"--datadir={self.data}",
             *self._as_user,
             "--auth-root-authentication-method=normal", "--skip-test-db",
             "--skip-name-resolve",
             # The bootstrap's temporary tables too (see `_command`).
             f"--tmpdir={self.directory}"],
            timeout=_COMMAND_TIMEOUT_S, cwd=self.directory,
        )  # fmt: skip

    def _install_db(self) -> list[str]:
        if self.home is None:
            return [_program("mariadb-install-db")]
        # --force: the unpacked copy has no resolveip, and names are not resolved anyway.
        script = self.home / "root" / "usr" / "bin" / "mariadb-install-db"
        return [str(script), f"--basedir={self.home / 'base'}", "--force"]

    def _mariadbd(self) -> str:
        if self.home is None:
            return _program("mariadbd")
        wrapper = self.home / "base" / "sbin" / "mariadbd"
        if not wrapper.exists():
            raise ServerUnavailable(
                f"no MariaDB 11.8 in {self.home}: run scripts/fetch_mariadb.sh "
                "(scripts/setup.sh does)"
            )
        return str(wrapper)

    def _command(self) -> list[str]:
        assert self.directory is not None
        options = [f"--{name}={value}" for name, value in self.settings.items()]
        return [
            self._mariadbd(), "--no-defaults", f"--datadir={self.data}",
            f"--port={self.port}", f"--socket={self.socket_path}",
            f"--pid-file={self.directory / 'mariadbd.pid'}", f"--log-error={self.log_file}",
            # Its temporary tables beside its data: a shared /tmp is cleaned by others.
            f"--tmpdir={self.directory}",
            *self._as_user, *options,
        ]  # fmt: skip

    def _ready(self) -> bool:
        """Whether the server is ready: its socket exists and it sends a handshake."""
        if not self.socket_path.exists():
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as probe:
                return len(probe.recv(4)) == 4
        except OSError:
            return False


TestServer = MariaDBServer | ExternalServer

_shared = SharedServer(SERVER_URL_VARIABLE, MariaDBServer)

# The session's server (see `SharedServer`): the URL in ``SERVER_URL_VARIABLE`` if set,
# else one server of this module started on first call, and stopped by the second.
shared_server = _shared.get
stop_shared_server = _shared.stop

_shared_11 = SharedServer(SERVER_11_URL_VARIABLE, lambda: MariaDBServer(home=MARIADB_11_HOME))


def shared_server_11() -> TestServer:
    """The session's MariaDB 11.8 (see `SharedServer`): ``CONVOSTORE_TEST_MARIADB11_URL``
    if set, else one `MariaDBServer` of ``MARIADB_11_HOME`` started on first call."""
    return _shared_11.get()


def stop_shared_server_11() -> None:
    _shared_11.stop()


def create_database_at_defaults(url: str) -> None:
    """Create the database ``url`` names as an administrator would, at the server's own
    default character set (latin1 on MariaDB 10.11), so that a store connecting to it
    must ask for utf8mb4 itself in every statement, not only in its tables."""
    import asyncio
    import threading

    import asyncmy

    parts = urlsplit(url)
    name = parts.path.strip("/")

    async def create() -> None:
        connection = await asyncmy.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
        )
        try:
            async with connection.cursor() as cursor:
                await cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        finally:
            connection.close()

    # The caller may be inside a running event loop (a fixture of an async test).
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(create())
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
