"""Settings for the whole suite.

The suite runs in a non-UTC local time zone (Asia/Kathmandu, UTC+05:45, an offset that
is not a whole hour) so that a backend or helper that reads or writes local time, or
drops an offset, shows up as a wrong instant instead of passing by luck on a UTC box.

Run in parallel (``pytest -n 2 --dist loadgroup``, as scripts/test.sh does), the tests of
one database server form one group (`server_group`), run by one worker: each worker
starts only the servers of its groups. The other tests go to whichever worker is free.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

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
    {"postgresql", "mariadb", "mariadb11", "falkordb", "neo4j", "redis", "redis_cluster",
     "valkey_cluster"}
)  # fmt: skip
# A backend's own tests (tests/backends), by file or package: the server they run on.
_SERVER_OF_BACKEND_TESTS = {
    "postgresql": "postgresql",
    "test_mysql.py": "mariadb",
    "test_mysql_schema.py": "mariadb",
    "test_mysql_vectors.py": "mariadb",
    "test_mariadb11.py": "mariadb11",
    "test_falkordb.py": "falkordb",
    "test_neo4j.py": "neo4j",
    "test_redis.py": "redis",
}


def server_group(item: pytest.Item) -> str | None:
    """The server whose tests ``item`` runs with on one worker (None: any worker)."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    # The contract suite's backend, or the graph server a test is parametrised over.
    backend = params.get("backend", params.get("kind"))
    if isinstance(backend, str):
        return backend if backend in _SERVER_BACKENDS else None
    if item.path.parent.name == "backends":
        return _SERVER_OF_BACKEND_TESTS.get(item.path.name)
    if item.path.parent.parent.name == "backends":
        return _SERVER_OF_BACKEND_TESTS.get(item.path.parent.name)
    return None


# First: xdist's worker names each item's group from its mark in a hook of its own.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = server_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
