"""Runs the contract suite (`convostore.testing`) over every backend of this checkout.

Adding a backend is one line in `BACKENDS`: its name and a function that gives the URL of
a fresh, empty database for one test, or `Unavailable` with the reason it cannot run
here (its driver or server is missing), decided before any store connects. An
unavailable backend is skipped on a laptop and fails the run under ``CI=true``, so CI can
never pass by leaving one out. A known failure of one backend is one line in
`DIVERGENCES`, with its reason: the test is strict-xfail there, so the fix must delete
the line.

Tests decide what to run from ``store.capabilities`` only, never from a backend's name.
One module of the suite runs with ``pytest tests/contract -k test_sessions``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from convostore.errors import InvalidArgumentError, StoreError
from convostore.testing.fixtures import (
    INDEXED_KEYS,
    BackendUnderTest,
    BackendUrl,
    Divergence,
    OnServer,
    ServerCrash,
    StoreFactory,
    Unavailable,
    backend_fixture,
    backend_missing,
    collect_contract_suite,
    connect_store,
    in_ci,
    indexed_store,
    local_time_zone_off_utc,
    mark_divergences,
    store,
)
from tests.servers import falkordb as falkordb_servers
from tests.servers import galera as galera_servers
from tests.servers import mariadb as mariadb_servers
from tests.servers import neo4j as neo4j_servers
from tests.servers import postgresql as postgresql_servers
from tests.servers import redis as redis_servers
from tests.servers.shared import ExternalServer, ServerProcess, ServerUnavailable

__all__ = [
    "BACKENDS",
    "DIVERGENCES",
    "INDEXED_KEYS",
    "BackendUnderTest",
    "StoreFactory",
    "backend",
    "backend_missing",
    "connect_store",
    "falkordb_server",
    "galera_server",
    "in_ci",
    "indexed_store",
    "local_time_zone_off_utc",
    "mariadb11_server",
    "mariadb_server",
    "neo4j_server",
    "postgresql_server",
    "redis_cluster_server",
    "redis_server",
    "store",
    "valkey_cluster_server",
]


def _module_missing(module: str) -> Unavailable | None:
    if importlib.util.find_spec(module) is None:
        return Unavailable(f"{module} is not in this checkout")
    return None


def _memory_url(tmp_path: Path) -> str | Unavailable:
    return "memory://"


def _sqlite_url(tmp_path: Path) -> str | Unavailable:
    missing = _module_missing("convostore.backends.sqlite")
    return missing or f"sqlite:///{tmp_path / 'contract.db'}"


def _session_server(name: str, start: Callable[[], Any], stop: Callable[[], None]) -> Any:
    """The session-scoped fixture ``{name}_server``: the session's server, which
    ``start`` gives (a ``shared_server`` of `tests.servers`, started on first use) and
    ``stop`` stops at the end, or `Unavailable` with the reason it cannot run."""

    @pytest.fixture(scope="session", name=f"{name}_server")
    def server() -> Iterator[Any]:
        try:
            started = start()
        except ServerUnavailable as why:
            yield Unavailable(str(why))
            return
        yield started
        stop()

    return server


postgresql_server = _session_server(
    "postgresql", postgresql_servers.shared_server, postgresql_servers.stop_shared_server
)
mariadb_server = _session_server(
    "mariadb", mariadb_servers.shared_server, mariadb_servers.stop_shared_server
)
galera_server = _session_server(
    "galera", galera_servers.shared_cluster, galera_servers.stop_shared_cluster
)
mariadb11_server = _session_server(
    "mariadb11", mariadb_servers.shared_server_11, mariadb_servers.stop_shared_server_11
)
falkordb_server = _session_server(
    "falkordb", falkordb_servers.shared_server, falkordb_servers.stop_shared_server
)
redis_server = _session_server(
    "redis", redis_servers.shared_server, redis_servers.stop_shared_server
)
redis_cluster_server = _session_server(
    "redis_cluster", redis_servers.shared_cluster, redis_servers.stop_shared_cluster
)
valkey_cluster_server = _session_server(
    "valkey_cluster", redis_servers.shared_valkey_cluster, redis_servers.stop_shared_valkey_cluster
)

neo4j_server = _session_server(
    "neo4j", neo4j_servers.shared_server, neo4j_servers.stop_shared_server
)

_schema_numbers = itertools.count(1)


def _fresh_postgresql_schema(server: postgresql_servers.TestServer) -> str:
    # A schema per test is empty as a new database is, and costs a migration only.
    url = server.url()
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}schema=contract_{os.getpid()}_{next(_schema_numbers)}"


_database_numbers = itertools.count(1)


def _fresh_mariadb_database(server: mariadb_servers.TestServer) -> str:
    # A new database, made as an administrator makes one: at the server's own default
    # character set (latin1), which the store must not depend on.
    url = server.url(f"contract_{os.getpid()}_{next(_database_numbers)}")
    mariadb_servers.create_database_at_defaults(url)
    return url


def _fresh_mariadb_native_database(server: mariadb_servers.TestServer) -> str:
    # MariaDB 11.8 searching its own vector index (10.11 runs the default, the cache).
    return _fresh_mariadb_database(server) + "?vector_search=native"


def _fresh_galera_database(cluster: galera_servers.TestCluster) -> str:
    # The URL lists the three nodes, each test's store on the next one first; the
    # database is created through another node, as a store must not mind.
    number = next(_database_numbers)
    url = galera_servers.rotated(cluster.url(f"contract_{os.getpid()}_{number}"), number)
    mariadb_servers.create_database_at_defaults(galera_servers.node_urls(url)[1])
    return url


_graph_numbers = itertools.count(1)


def _fresh_falkordb_graph(server: falkordb_servers.TestServer) -> str:
    # A graph per test is empty as a new database is, and costs a migration only.
    return server.url(f"contract_{os.getpid()}_{next(_graph_numbers)}")


_namespace_numbers = itertools.count(1)


def _fresh_redis_namespace(server: redis_servers.TestServer) -> str:
    # A namespace (the prefix of every key) per test is empty as a new database is.
    url = server.url()
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}namespace=contract_{os.getpid()}_{next(_namespace_numbers)}"


def _fresh_neo4j_database(server: neo4j_servers.TestServer) -> str:
    # Neo4j Community serves one database: emptied for each test.
    url = server.url()
    neo4j_servers.wipe(url)
    return url


def _crash(server: ServerProcess | ExternalServer, url: str) -> ServerCrash | None:
    # A server the suite started itself (not one a CONVOSTORE_TEST_*_URL names).
    if not isinstance(server, ServerProcess):
        return None
    return ServerCrash(server.kill, server.start, url)


def _neo4j_crash(server: neo4j_servers.TestServer, url: str) -> ServerCrash | None:
    # The driver tries a transaction again for 30 s by default: a second here.
    return _crash(server, f"{url}?retry_time=1&connect_timeout=2")


def _postgresql_crash(server: postgresql_servers.TestServer, url: str) -> ServerCrash | None:
    # The test server commits without waiting for its WAL (synchronous_commit=off, for
    # speed): the crash test's sessions wait, as a server at its defaults does.
    return _crash(server, f"{url}&options=-c%20synchronous_commit%3Don")


# name -> how to get a fresh database for one test. One line per backend.
BACKENDS: dict[str, BackendUrl | OnServer] = {
    "memory": _memory_url,
    "sqlite": _sqlite_url,
    "postgresql": OnServer("postgresql_server", _fresh_postgresql_schema, _postgresql_crash),
    "mariadb": OnServer("mariadb_server", _fresh_mariadb_database, _crash),
    "mariadb11": OnServer("mariadb11_server", _fresh_mariadb_native_database, _crash),
    "galera": OnServer("galera_server", _fresh_galera_database),
    "falkordb": OnServer("falkordb_server", _fresh_falkordb_graph, _crash),
    "redis": OnServer("redis_server", _fresh_redis_namespace, _crash),
    "redis_cluster": OnServer("redis_cluster_server", _fresh_redis_namespace),
    "valkey_cluster": OnServer("valkey_cluster_server", _fresh_redis_namespace),
    "neo4j": OnServer("neo4j_server", _fresh_neo4j_database, _neo4j_crash),
}

# Known failures, one entry each: Divergence(backend, "test_module.py::test_name",
# reason, the exception the failure raises).
_PACKET = (
    "MariaDB refuses an append larger than the server's max_allowed_packet (16 MiB on "
    "the test server) as InvalidArgumentError: a message is stored up to about 40% of "
    "it (README, MySQL 'Limits'), and this one is 100 MiB"
)
DIVERGENCES: list[Divergence] = [
    Divergence(
        "mariadb",
        "test_limits.py::test_a_100_megabyte_message_is_stored_whole",
        _PACKET,
        InvalidArgumentError,
    ),
]

# Redis keeps each owner's data in one bucket (one slot): an event id is unique among
# the logs of that bucket, so an id another owner's log holds is not seen there.
_EVENT_IDS_PER_OWNER = (
    "Redis checks that an event id is unused within the owner's bucket only (ids are "
    "unique per owner, not across owners): the batch is applied and nothing raises"
)
DIVERGENCES += [
    Divergence(backend, test, _EVENT_IDS_PER_OWNER, pytest.fail.Exception)
    for backend in ("redis", "redis_cluster", "valkey_cluster")
    for test in (
        "test_log_append.py::test_a_refused_batch_inserts_none_of_its_users",
        "test_four_byte_ids.py::test_four_byte_ids_through_every_id_carrying_write",
    )
]

# MariaDB 11.8, and a Galera cluster of 10.11 nodes, run the same backend: they diverge
# where 10.11 does.
DIVERGENCES += [
    dataclasses.replace(d, backend=other)
    for d in DIVERGENCES
    if d.backend == "mariadb"
    for other in ("mariadb11", "galera")
]

# Found by the differential test on a populated database (test_differential.py).
DIVERGENCES += [
    Divergence(
        "mariadb11",
        "test_differential.py::test_concurrent_appends_of_messages_with_vectors_all_land",
        "MariaDB 11.8's vector graph refuses concurrent appends of messages with vectors: "
        "error 1020 'Record has changed since last read in table native_vectors' (StoreError)",
        StoreError,
    ),
]

backend = backend_fixture(BACKENDS, DIVERGENCES)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    return collect_contract_suite(file_path, parent, Path(__file__))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_divergences(items, DIVERGENCES)
