"""A throwaway Neo4j Community server: the embedded DBMS of Maven Central's
``org.neo4j:neo4j`` run by the small launcher in ``tests/servers/neo4j_launcher``
(``scripts/setup.sh`` resolves its jars once, into Maven's local repository, and compiles
it; `build_launcher` does the same when it is missing).

`Neo4jServer` runs the launcher on a free loopback port, with its files in a new
temporary directory and authentication on (user ``neo4j``, password `PASSWORD`). Neo4j
flushes its transaction log at each commit, so every acknowledged write survives a
crash. `kill` ends it as a crash would (SIGKILL); `start` again brings it back from its
files on the same port, recovering from the transaction log.

Neo4j Community serves one database (``neo4j``) beside ``system``: the tests give each
test an empty one by `wipe`, which deletes every node (the indexes and constraints stay:
a store's migration finds them done).

`shared_server` is what the test session uses: one server, started on first use and
stopped at the end of the session (or at exit). ``CONVOSTORE_TEST_NEO4J_URL`` points the
tests at an existing server instead (``neo4j://neo4j:password@host:port``).

    with Neo4jServer() as server:
        print(server.url())          # neo4j://neo4j:...@127.0.0.1:PORT/neo4j
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import os
import shutil
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from tests.servers.shared import (
    ExternalServer,
    ServerProcess,
    ServerUnavailable,
    SharedServer,
    run_tool,
)

__all__ = [
    "LAUNCHER",
    "PASSWORD",
    "SERVER_URL_VARIABLE",
    "Neo4jServer",
    "ServerUnavailable",
    "TestServer",
    "build_launcher",
    "shared_server",
    "stop_shared_server",
    "wipe",
]

SERVER_URL_VARIABLE: Final = "CONVOSTORE_TEST_NEO4J_URL"
PASSWORD: Final = "convostore-test"
LAUNCHER: Final = Path(__file__).parent / "neo4j_launcher"
_CLASSES: Final = LAUNCHER / "target" / "classes"
_CLASSPATH: Final = LAUNCHER / "target" / "classpath.txt"
_READY: Final = "convostore-neo4j ready"
# The JVM's heap (its most; the page cache, 256 MiB, is set by the launcher). Neo4j lets
# transactions take 70% of it: a 100 MB message takes several hundred MB.
_HEAP: Final = os.environ.get("CONVOSTORE_TEST_NEO4J_HEAP", "2g")


def java() -> str:
    """The ``java`` of JAVA_HOME, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).exists():
        raise ServerUnavailable("no java (Java 17 or newer) for the Neo4j test server")
    return found


def build_launcher() -> None:
    """Resolve the launcher's jars with Maven (offline when they are in the local
    repository already) and compile it, unless that was done. One process builds at a
    time (the test workers may all start a server at once); the others wait for it."""
    _CLASSES.mkdir(parents=True, exist_ok=True)
    with (LAUNCHER / "target" / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _build_launcher()


def _build_launcher() -> None:
    source = LAUNCHER / "Neo4jLauncher.java"
    compiled = _CLASSES / "Neo4jLauncher.class"
    if (
        compiled.exists()
        and _CLASSPATH.exists()
        and compiled.stat().st_mtime >= source.stat().st_mtime
    ):
        return
    mvn, javac = shutil.which("mvn"), shutil.which("javac")
    if mvn is None or javac is None:
        raise ServerUnavailable("the Neo4j test server needs Maven (mvn) and a JDK (javac)")
    run_tool(
        [mvn, "-q", "-B", "-f", str(LAUNCHER / "pom.xml"), "dependency:build-classpath",
         f"-Dmdep.outputFile={_CLASSPATH}"],
        timeout=1800,
    )  # fmt: skip
    run_tool(
        [javac, "-d", str(_CLASSES), "-cp", _CLASSPATH.read_text().strip(), str(source)],
        timeout=300,
    )


class Neo4jServer(ServerProcess):
    """One Neo4j server in a temporary directory, on a free loopback port (its
    lifecycle: `ServerProcess`; ``started_in``: the seconds its last start took)."""

    name = "neo4j"
    ready_line = _READY
    # A JVM compiling Neo4j as it starts: 20 s on a quiet machine, past 180 s on two cores
    # shared with a dozen busy processes.
    start_timeout = 300.0
    stop_timeout = 60.0
    log_lines = 40

    def url(self, database: str = "neo4j", scheme: str = "neo4j") -> str:
        assert self.directory is not None, "the server is not started"
        return f"{scheme}://neo4j:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def _prepare(self) -> None:
        build_launcher()

    def _command(self) -> list[str]:
        classpath = f"{_CLASSES}:{_CLASSPATH.read_text().strip()}"
        return [
            java(), f"-Xmx{_HEAP}", "-XX:+UseSerialGC",
            "-cp", classpath, "Neo4jLauncher",
            str(self._file("home")), str(self.port), PASSWORD,
        ]  # fmt: skip


TestServer = Neo4jServer | ExternalServer


def wipe(url: str) -> None:
    """Empty the database ``url`` names: every node goes (in batches); the indexes and
    constraints stay (a schema change would have the server plan every query again).
    A vector index of another width than the next test's is rebuilt by its store."""
    parts = urlsplit(url)
    database = parts.path.lstrip("/") or None
    with _driver(url).session(database=database) as session:
        # Batches of their own (an auto-commit transaction), so a large graph goes too.
        session.run(
            "MATCH (n) CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS"
        ).consume()


@functools.cache
def _driver(url: str) -> Any:
    """One driver per server for `wipe` (closed at exit)."""
    import neo4j

    parts = urlsplit(url)
    address = f"bolt://{parts.hostname}:{parts.port or 7687}"
    driver = neo4j.GraphDatabase.driver(
        address, auth=(parts.username or "neo4j", parts.password or "")
    )
    atexit.register(driver.close)
    return driver


_shared = SharedServer(SERVER_URL_VARIABLE, Neo4jServer, default="neo4j")

# The session's server (see `SharedServer`): the URL in ``SERVER_URL_VARIABLE`` if set,
# else one server of this module started on first call, and stopped by the second.
shared_server = _shared.get
stop_shared_server = _shared.stop
