"""Settings for the whole suite.

The suite runs in a non-UTC local time zone (Asia/Kathmandu, UTC+05:45, an offset that
is not a whole hour) so that a backend or helper that reads or writes local time, or
drops an offset, shows up as a wrong instant instead of passing by luck on a UTC box.

Run in parallel (``pytest -n 2 --dist loadgroup``, as scripts/test.sh does), the tests of
one database server form one group (`server_group`), run by one worker: each worker
starts only the servers of its groups. The other tests go to whichever worker is free.
Which worker runs a test never decides whether it passes: a worker starts any server a
test of another group needs (it costs that server's start only).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from convostore.testing.fixtures import SKIP_VARIABLE, skipped_backends

os.environ["TZ"] = "Asia/Kathmandu"
time.tzset()


def pytest_report_header() -> str | None:
    opted_out = skipped_backends()
    if not opted_out:
        return None
    return f"backends skipped by {SKIP_VARIABLE}: {', '.join(sorted(opted_out))}"


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    """A backend's own tests (tests/backends/test_NAME.py, or the package
    tests/backends/NAME/) are left out, as its contract cases are skipped, when
    ``CONVOSTORE_SKIP_BACKENDS`` names it."""
    if collection_path.parent.name == "backends" and (
        collection_path.name.startswith("test_") or collection_path.is_dir()
    ):
        return collection_path.stem.removeprefix("test_") in skipped_backends() or None
    return None


# The backends whose tests share a server the session starts (memory and SQLite need
# none: their tests go to any worker).
_SERVER_BACKENDS = frozenset(
    {"postgresql", "mariadb", "mariadb11", "galera", "falkordb", "neo4j", "redis",
     "redis_cluster", "valkey_cluster"}
)  # fmt: skip
# A backend's own tests (tests/backends), by file or package: the server they run on.
_SERVER_OF_BACKEND_TESTS = {
    "postgresql": "postgresql",
    "test_mysql.py": "mariadb",
    "test_mysql_schema.py": "mariadb",
    "test_mysql_vectors.py": "mariadb",
    "test_mariadb11.py": "mariadb11",
    "test_galera.py": "galera",
    "test_falkordb.py": "falkordb",
    "test_neo4j.py": "neo4j",
    "test_redis.py": "redis",
}


def server_group(nodeid: str) -> str | None:
    """The server whose tests the test ``nodeid`` runs with on one worker (None: any
    worker): a backend's own tests by their file, the others by the backend (or graph
    server) among their parameters."""
    path, _, rest = nodeid.partition("::")
    parts = path.split("/")
    if "backends" in parts[:-1]:
        below = parts[parts.index("backends") + 1]
        if below in _SERVER_OF_BACKEND_TESTS:
            return _SERVER_OF_BACKEND_TESTS[below]
    params = rest[rest.find("[") + 1 : rest.rfind("]")] if rest.endswith("]") else ""
    return next((token for token in params.split("-") if token in _SERVER_BACKENDS), None)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: the tests of one server (`server_group`) go to one
    worker as one unit, the others one by one to whichever worker is free. (xdist's own
    loadgroup reads ``xdist_group`` marks into node ids, which pytest 9 no longer lets
    it change: this groups by the node ids themselves.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # loadscope's scheduler, its unit of work (a scope) being the server group.
    scheduler = LoadScopeScheduling(config, log)
    scheduler._split_scope = lambda nodeid: server_group(nodeid) or nodeid
    return scheduler


# The tests above the Store (tests/contract's own modules: the HTTP server, its streams
# and the inspector; tests/integrations: the framework adapters and the frameworks' own
# suites) run once for each backend implementation. These backend ids run the code of
# another on another server (MariaDB 11.8 and a Galera cluster MySQL's backend, the
# clusters Redis's): they differ only below the Store, where the contract suite runs on
# them in full.
SAME_CODE = frozenset({"mariadb11", "galera", "redis_cluster", "valkey_cluster"})
_ABOVE_THE_STORE = ("tests.contract.", "tests.integrations.")
# The inspector's pages (a browser over the HTTP API) run on an embedded backend, a file
# and a server: what they show comes through the API the other tests run everywhere.
INSPECTOR_BACKENDS = frozenset({"memory", "sqlite", "postgresql"})


def _left_out(item: pytest.Item) -> bool:
    """Whether ``item`` is a test above the Store that this rule leaves out."""
    module = getattr(item, "module", None)
    callspec = getattr(item, "callspec", None)
    if module is None or callspec is None or not module.__name__.startswith(_ABOVE_THE_STORE):
        return False
    backend = callspec.params.get("backend")
    if module.__name__ == "tests.contract.test_inspector":
        return backend is not None and backend not in INSPECTOR_BACKENDS
    return backend in SAME_CODE


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests above the Store on a backend id of `SAME_CODE`, and the
    inspector's outside `INSPECTOR_BACKENDS` (pytest counts them as deselected)."""
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        (left_out if _left_out(item) else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
