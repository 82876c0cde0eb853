"""The backends the contract suite runs on, and the fixtures that open stores on them.

Adding a backend is one line in `BACKENDS`: its name and a function that gives the URL
of a fresh, empty database for one test (or `Unavailable` with the reason it cannot run
here, e.g. no server URL configured). A backend that is unavailable is skipped on a
laptop and fails the run under ``CI=true``, so CI can never pass by leaving one out.

Tests decide what to run from ``store.capabilities`` only, never from a backend's name.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

import pytest

import convostore
from convostore import BackendUnavailableError, Store
from tests.servers import mariadb as mariadb_servers
from tests.servers import postgresql as postgresql_servers


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Why a backend cannot run in this environment."""

    reason: str


BackendUrl = Callable[[Path], "str | Unavailable"]


def _module_missing(module: str) -> Unavailable | None:
    if importlib.util.find_spec(module) is None:
        return Unavailable(f"{module} is not in this checkout")
    return None


def _memory_url(tmp_path: Path) -> str | Unavailable:
    return "memory://"


def _sqlite_url(tmp_path: Path) -> str | Unavailable:
    missing = _module_missing("convostore.backends.sqlite")
    return missing or f"sqlite:///{tmp_path / 'contract.db'}"


@dataclass(frozen=True, slots=True)
class OnServer:
    """A backend whose tests share one server for the whole session: ``server`` names the
    session-scoped fixture that gives it (or `Unavailable`), ``fresh`` the URL of a new,
    empty database on it for one test."""

    server: str
    fresh: Callable[[Any], str]


@pytest.fixture(scope="session")
def postgresql_server() -> Iterator[postgresql_servers.TestServer | Unavailable]:
    """The session's PostgreSQL (see `tests.servers.postgresql.shared_server`)."""
    try:
        server = postgresql_servers.shared_server()
    except postgresql_servers.ServerUnavailable as why:
        yield Unavailable(str(why))
        return
    yield server
    postgresql_servers.stop_shared_server()


_schema_numbers = itertools.count(1)


def _fresh_postgresql_schema(server: postgresql_servers.TestServer) -> str:
    # A schema per test is empty as a new database is, and costs a migration only.
    url = server.url()
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}schema=contract_{os.getpid()}_{next(_schema_numbers)}"


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[mariadb_servers.TestServer | Unavailable]:
    """The session's MariaDB (see `tests.servers.mariadb.shared_server`)."""
    try:
        server = mariadb_servers.shared_server()
    except mariadb_servers.ServerUnavailable as why:
        yield Unavailable(str(why))
        return
    yield server
    mariadb_servers.stop_shared_server()


_database_numbers = itertools.count(1)


def _fresh_mariadb_database(server: mariadb_servers.TestServer) -> str:
    # A new database name: the store creates it at connect.
    return server.url(f"contract_{os.getpid()}_{next(_database_numbers)}")


# name -> how to get a fresh database for one test. One line per backend.
BACKENDS: dict[str, BackendUrl | OnServer] = {
    "memory": _memory_url,
    "sqlite": _sqlite_url,
    "postgresql": OnServer("postgresql_server", _fresh_postgresql_schema),
    "mariadb": OnServer("mariadb_server", _fresh_mariadb_database),
}


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def backend_missing(name: str, reason: str) -> NoReturn:
    """Skip on a laptop; under CI a backend that cannot run is a failure."""
    message = f"backend {name!r} unavailable: {reason}"
    if in_ci():
        pytest.fail(message + " (CI=true requires every backend)")
    pytest.skip(message)


class BackendUnderTest:
    """One backend and the database of one test: ``backend()`` is its URL, the same on
    every call, so a test can open a second store on the same database (when
    ``capabilities.persistent`` / ``cross_process`` say that means something)."""

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url

    def __call__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"BackendUnderTest({self.name!r}, {self.url!r})"


@pytest.fixture(params=list(BACKENDS), ids=list(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> BackendUnderTest:
    name: str = request.param
    entry = BACKENDS[name]
    if isinstance(entry, OnServer):
        server = request.getfixturevalue(entry.server)
        url = server if isinstance(server, Unavailable) else entry.fresh(server)
    else:
        url = entry(tmp_path)
    if isinstance(url, Unavailable):
        backend_missing(name, url.reason)
    return BackendUnderTest(name, url)


class StoreFactory(Protocol):
    def __call__(self, **options: Any) -> Awaitable[Store]: ...


@pytest.fixture
async def connect_store(backend: BackendUnderTest) -> AsyncIterator[StoreFactory]:
    """Open stores on this test's database; every one is closed at teardown."""
    opened: list[Store] = []

    async def connect(**options: Any) -> Store:
        try:
            store = await convostore.connect(backend(), **options)
        except BackendUnavailableError as error:
            backend_missing(backend.name, str(error))
        opened.append(store)
        return store

    yield connect
    for store in reversed(opened):
        await store.close()


@pytest.fixture
async def store(connect_store: StoreFactory) -> Store:
    """A store on this test's database."""
    return await connect_store()


INDEXED_KEYS = ("tenant", "topic")


@pytest.fixture
async def indexed_store(connect_store: StoreFactory) -> Store:
    """A store on this test's database that indexes the metadata keys `INDEXED_KEYS`."""
    return await connect_store(indexed_metadata=INDEXED_KEYS)
