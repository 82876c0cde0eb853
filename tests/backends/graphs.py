"""What the tests of the graph backends (FalkorDB and Neo4j) share: each backend's
name, driver and servers, an empty database on the session's server for one test, a
store on it, and the rows of a query run through a store's backend."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

import convostore
from convostore import Store, User
from tests.backends.support import missing_driver, server_unavailable
from tests.servers.shared import ServerUnavailable

__all__ = [
    "ADA",
    "BACKENDS",
    "FALKORDB",
    "NEO4J",
    "PLANNER",
    "GraphBackend",
    "backend_of",
    "cypher_of",
    "rows_of",
    "store",
]

B = TypeVar("B")
ADA = User("ada", "Ada")
PLANNER = User("planner", "Planner", kind="agent")
_graphs = itertools.count(1)


@dataclass(frozen=True, slots=True)
class GraphBackend:
    """One graph backend: its name (and extra's), its driver's module, a URL whose
    server does not answer, and how a test gets an empty database on the session's
    server."""

    name: str
    module: str
    unreachable: str
    fresh: Callable[[], str]

    def skip_without_driver(self, *, module: bool = False) -> None:
        """Skip the test (``module``: the calling test module) when the driver is
        missing (never under CI, which installs every extra)."""
        if reason := missing_driver(self.module, self.name):
            pytest.skip(reason, allow_module_level=module)

    def url_fixture(self) -> Any:
        """The ``url`` fixture of a test module of this backend's own."""

        @pytest.fixture
        def url() -> str:
            return self.url()

        return url

    def url(self) -> str:
        """An empty database (the server unavailable: skipped, or failed under CI)."""
        try:
            return self.fresh()
        except ServerUnavailable as why:
            server_unavailable(self.name, str(why))


def _falkordb() -> str:
    from tests.servers.falkordb import shared_server

    return shared_server().url(f"graph_{os.getpid()}_{next(_graphs)}")


def _neo4j() -> str:
    from tests.servers.neo4j import shared_server, wipe

    url = shared_server().url()
    wipe(url)  # Community serves one database: emptied for each test.
    return url


FALKORDB = GraphBackend(
    "falkordb", "falkordb", "falkordb://127.0.0.1:1/g?connect_timeout=2", _falkordb
)
NEO4J = GraphBackend("neo4j", "neo4j", "bolt://127.0.0.1:1/neo4j?connect_timeout=2", _neo4j)
BACKENDS = (FALKORDB, NEO4J)


@pytest.fixture
async def store(url: str) -> AsyncIterator[Store]:
    """A store on the test's database (``url``, a fixture of the test's module)."""
    opened = await convostore.connect(url)
    yield opened
    await opened.close()


def backend_of(store: Store, kind: type[B]) -> B:
    """The backend of type ``kind`` under ``store``."""
    assert isinstance(store.backend, kind)
    return store.backend


def cypher_of(store: Store) -> Any:
    """The graph backend under ``store`` (a `CypherBackend`)."""
    from convostore.backends.cypher.store import CypherBackend

    assert isinstance(store.backend, CypherBackend)
    return store.backend


async def rows_of(store: Store, query: str, **parameters: Any) -> list[list[Any]]:
    """The rows of ``query``, read through the store's backend."""
    rows: list[list[Any]] = await cypher_of(store)._run(query, dict(parameters), write=False)
    return rows
