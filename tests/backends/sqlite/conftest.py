"""The SQLite tests' fixtures: a database file in the test's directory, a store on it,
and two store objects with an embedder on one file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import convostore
from convostore import (
    Store,
)
from convostore.embedding import HashingEmbedder
from tests.backends.sqlite.support import WIDTH, db_url


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[Store]:
    opened = await convostore.connect(db_url(db_path))
    yield opened
    await opened.close()


@pytest.fixture
async def vector_store(db_path: Path) -> AsyncIterator[Store]:
    opened = await convostore.connect(db_url(db_path), embedder=HashingEmbedder(WIDTH))
    yield opened
    await opened.close()


@pytest.fixture
async def vector_peer(db_path: Path, vector_store: Store) -> AsyncIterator[Store]:
    """Another store object on the same file: another set of connections."""
    opened = await convostore.connect(db_url(db_path), embedder=HashingEmbedder(WIDTH))
    yield opened
    await opened.close()
