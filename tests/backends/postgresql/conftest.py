"""The PostgreSQL tests' fixtures: the session's server (started on first use), and
stores on a fresh schema, closed at teardown. Nothing here imports psycopg: a test
module skips itself when the driver is missing, before any of these run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

from convostore import Store
from tests.backends.support import served
from tests.servers.postgresql import TestServer, shared_server, stop_shared_server

if TYPE_CHECKING:
    from tests.backends.postgresql.support import Stores


@pytest.fixture(scope="session")
def server() -> Iterator[TestServer]:
    yield from served("postgresql", shared_server, stop_shared_server)


@pytest.fixture
async def stores(server: TestServer) -> AsyncIterator[Stores]:
    # Imported here: the support module imports psycopg.
    from tests.backends.postgresql.support import Stores

    opened = Stores(server)
    yield opened
    await opened.close()


@pytest.fixture
async def store(stores: Stores) -> Store:
    return await stores.open()
