"""Fixtures the backend tests of several databases share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from convostore.backends.sql import vector_cache
from tests.backends.support import served
from tests.servers.mariadb import (
    TestServer,
    shared_server,
    shared_server_11,
    stop_shared_server,
    stop_shared_server_11,
)


@pytest.fixture(scope="session")
def server_10() -> Iterator[TestServer]:
    """The session's MariaDB 10.11 (Debian's), started on first use."""
    yield from served("mariadb", shared_server, stop_shared_server)


@pytest.fixture(scope="session")
def server_11() -> Iterator[TestServer]:
    """The session's MariaDB 11.8 (scripts/fetch_mariadb.sh), started on first use."""
    yield from served("mariadb11", shared_server_11, stop_shared_server_11)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the tables the vector caches build (one per store, unless something
    rebuilds): a change applied in place builds nothing."""
    counted: list[int] = []
    build = vector_cache.build

    def counting(*arguments: Any) -> Any:
        counted.append(1)
        return build(*arguments)

    monkeypatch.setattr(vector_cache, "build", counting)
    return counted
