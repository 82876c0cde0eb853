"""Which sqlite3 errors mean an unavailable database and which are bugs."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

import convostore
from convostore import (
    BackendUnavailableError,
    MessageWrite,
    Role,
    StoreError,
)
from tests.backends.sqlite.support import (
    ADA,
    db_url,
    set_modes,
)

# ------------------------------------------------------------------ errors


async def test_a_file_that_is_not_a_database_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database file, whatever its name says" * 100)
    with pytest.raises(BackendUnavailableError) as raised:
        await convostore.connect(db_url(path))
    assert isinstance(raised.value.__cause__, sqlite3.DatabaseError)


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="file modes do not bind root"
)
async def test_a_read_only_database_is_unavailable(db_path: Path) -> None:
    store = await convostore.connect(db_url(db_path))
    await store.close()
    set_modes(db_path, file_mode=0o444, directory_mode=0o555)
    try:
        with pytest.raises(BackendUnavailableError) as raised:
            await convostore.connect(db_url(db_path))
        assert isinstance(raised.value.__cause__, sqlite3.Error)
    finally:
        set_modes(db_path, file_mode=0o644, directory_mode=0o755)


async def test_a_statement_the_schema_cannot_run_is_a_bug_not_unavailable(
    db_path: Path,
) -> None:
    # A missing table (as a broken migration leaves) is a plain StoreError: a test net
    # that skips on BackendUnavailableError must never take it for a missing server.
    store = await convostore.connect(db_url(db_path))
    try:
        session = await store.create_session(ADA)
        raw = sqlite3.connect(db_path)
        raw.execute("DROP TABLE participants")
        raw.commit()
        raw.close()
        with pytest.raises(StoreError, match="no such table") as raised:
            await store.participants(session.id)
        assert not isinstance(raised.value, BackendUnavailableError)
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
    finally:
        await store.close()


async def test_a_locked_database_is_unavailable_and_nothing_leaks(db_path: Path) -> None:
    store = await convostore.connect(db_url(db_path, "busy_timeout=0"))
    session = await store.create_session(ADA)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(BackendUnavailableError, match="locked") as raised:
            await store.add_message(session.id, MessageWrite(Role.USER, "x"))
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
        # Readers are not blocked by a writer in WAL mode.
        assert await store.version(session.id) == 0
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    await store.add_message(session.id, MessageWrite(Role.USER, "x"))
    assert await store.version(session.id) == 1
    await store.close()
