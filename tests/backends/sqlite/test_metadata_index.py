"""SQLite's metadata index holds entries of the keys the database indexes when a write
commits, whatever the writing store last read: none of a key dropped since, all of a
key added since."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import convostore
from convostore import User
from tests.backends.sqlite.support import db_url, raw_rows

ADA = User("ada", "Ada")


def _entries(path: Path) -> list[tuple[str, str, str]]:
    statement = "SELECT session_id, name, value FROM session_metadata ORDER BY session_id, name"
    return [(str(s), str(n), str(v)) for s, n, v in raw_rows(path, statement)]


async def test_entries_follow_the_keys_of_the_database_not_of_the_store(db_path: Path) -> None:
    path = db_path
    url = db_url(path)
    async with await convostore.connect(url, indexed_metadata=["tenant"]) as stale:
        first = await stale.create_session(ADA, metadata={"tenant": "acme", "colour": "red"})
        assert _entries(path) == [(first.id, "tenant", "acme")]
        async with await convostore.connect(url, indexed_metadata=["colour"]) as other:
            assert await other.drop_metadata_index("tenant") is True
        # The stale store still believes tenant is indexed and colour is not.
        assert stale.indexed_metadata == {"tenant"}
        second = await stale.create_session(ADA, metadata={"tenant": "acme", "colour": "blue"})
        updated = await stale.update_session(replace(first, metadata={"tenant": "x", "n": 1}))
        # No entry of the dropped key, nor of a key never indexed; the update took the
        # entry the backfill of colour gave the first session.
        assert _entries(path) == [(second.id, "colour", "blue")]
        assert updated.metadata == {"tenant": "x", "n": 1}
