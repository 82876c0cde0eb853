"""SQLite's vector cache: following the change log from other processes, and the
quantised ranking against the exact scan on more rows than the shortlist."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import convostore
from convostore import MessageWrite, Role, Store, User
from convostore.backends.sqlite import search as sqlite_search
from convostore.backends.sqlite.connection import in_read_snapshot, open_connection
from convostore.backends.sqlite.search import VectorCache
from convostore.backends.sqlite.url import SQLiteTarget
from convostore.embedding import HashingEmbedder, Metric
from tests.backends.sqlite.support import (
    ADA,
    BOB,
    WIDTH,
    assert_exact,
    db_url,
    found_ids,
    is_nearest,
    vector_session,
)

# Another process: one change to the database, through a store of its own.
CHILD = """
import asyncio, random, sys
from datetime import UTC, datetime, timedelta
import convostore
from convostore import MessageWrite, Role, User
from convostore.embedding import HashingEmbedder
from convostore.ids import new_stamp

async def main(url, action, argument, seed):
    rng = random.Random(int(seed))
    embedder = HashingEmbedder(16)
    def write():
        vector = [rng.gauss(0.0, 1.0) for _ in range(16)]
        return MessageWrite(Role.USER, "child", embedding=vector, embedding_model=embedder.name)
    async with await convostore.connect(url, embedder=embedder) as store:
        if action == "add":
            session = await store.create_session(User("bob", "Bob"))
            await store.append_events(session.id, [write() for _ in range(6)], 0)
            print(session.id)
        elif action == "delete":
            assert await store.delete_session(argument)
        elif action == "reembed":
            messages = await store.messages(argument)
            vectors = [(m.id, tuple(rng.gauss(0.0, 1.0) for _ in range(16))) for m in messages[:3]]
            await store.backend.set_embeddings(embedder.name, vectors, new_stamp())
        elif action == "expire":
            past = datetime.now(UTC) - timedelta(days=1)
            session = await store.create_session(User("ada", "Ada"), expires_at=past)
            await store.append_events(session.id, [write() for _ in range(4)], 0)
            assert await store.delete_expired() == 1

asyncio.run(main(*sys.argv[1:]))
"""


def in_child(url: str, action: str, argument: str = "", seed: int = 0) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, action, argument, str(seed)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
async def stores(db_path: Path) -> AsyncIterator[list[Store]]:
    """Two store objects on one file in this process."""
    opened = [
        await convostore.connect(db_url(db_path), embedder=HashingEmbedder(WIDTH)) for _ in range(2)
    ]
    yield opened
    for store in opened:
        await store.close()


async def test_changes_from_another_process_apply_in_place(
    stores: list[Store], db_path: Path, builds: list[int]
) -> None:
    rng = random.Random(21)
    url = db_url(db_path)
    sessions = [await vector_session(stores[0], rng, owner) for owner in (ADA, BOB, ADA)]
    for store in stores:
        await assert_exact(store, rng, sessions)
    assert len(builds) == 2  # one cache per store object
    for step in range(4):
        added = await asyncio.to_thread(in_child, url, "add", "", step)
        sessions.append(added)
        for store in stores:
            await assert_exact(store, rng, sessions, 6)
            added_ids = {m.id for m in await store.messages(added)}
            assert added_ids <= await found_ids(store)
        gone = sessions.pop(rng.randrange(len(sessions)))
        gone_ids = {m.id for m in await stores[0].messages(gone)}
        await asyncio.to_thread(in_child, url, "delete", gone)
        for store in stores:
            assert not gone_ids & await found_ids(store)
            await assert_exact(store, rng, sessions, 6)
        changed = rng.choice(sessions)
        await asyncio.to_thread(in_child, url, "reembed", changed, step)
        for store in stores:
            for message in (await store.messages(changed))[:3]:
                assert await is_nearest(store, message.embedding, message.id)
            await assert_exact(store, rng, sessions, 6)
        await asyncio.to_thread(in_child, url, "expire", "", step)
        for store in stores:
            await assert_exact(store, rng, sessions, 6)
    assert len(builds) == 2  # every change applied in place


async def test_a_cache_behind_the_pruned_log_rebuilds(
    stores: list[Store], db_path: Path, builds: list[int]
) -> None:
    rng = random.Random(22)
    sessions = [await vector_session(stores[0], rng, owner) for owner in (ADA, BOB)]
    await assert_exact(stores[0], rng, sessions)
    assert len(builds) == 1
    doomed = sessions.pop()
    gone_ids = {m.id for m in await stores[0].messages(doomed)}
    await stores[1].delete_session(doomed)
    # What the log's pruning trigger does once it passes this cache's change.
    connection = sqlite3.connect(db_path)
    with connection:
        connection.execute(
            "UPDATE vector_changes_pruned SET through = (SELECT max(id) FROM vector_changes)"
        )
        connection.execute("DELETE FROM vector_changes")
    connection.close()
    assert not gone_ids & await found_ids(stores[0])
    assert len(builds) == 2
    await assert_exact(stores[0], rng, sessions)


# ---------------------------------------------------------------- the quantised ranking

ROWS = 24_000  # more than SIGNS_FROM: every step of the ranking runs
CLUSTERED_WIDTH = 48
OWNERS = [User(f"owner-{n}", f"Owner {n}") for n in range(8)]


class ClusterEmbedder(HashingEmbedder):
    """Declares the index; the test writes its vectors itself."""


def clustered(seed: int) -> tuple[Any, Any]:
    """ROWS unit vectors around 300 centres, as real text has neighbours that are near,
    and 60 queries each near one of them."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((300, CLUSTERED_WIDTH)).astype(np.float32)
    vectors = centres[rng.integers(0, 300, ROWS)]
    vectors += 0.35 * rng.standard_normal((ROWS, CLUSTERED_WIDTH)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[rng.integers(0, ROWS, 60)]
    queries += 0.05 * rng.standard_normal(queries.shape).astype(np.float32)
    return vectors, queries


@pytest.fixture(scope="module")
def large_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A database of ROWS clustered vectors in sessions of 400, owners in turn."""
    path = tmp_path_factory.mktemp("large") / "large.db"
    vectors, _ = clustered(23)
    embedder = ClusterEmbedder(CLUSTERED_WIDTH)

    async def load() -> list[str]:
        sessions = []
        async with await convostore.connect(db_url(path), embedder=embedder) as store:
            for start in range(0, ROWS, 400):
                session = await store.create_session(OWNERS[(start // 400) % len(OWNERS)])
                roles = [Role.USER, Role.ASSISTANT]
                writes = [
                    MessageWrite(
                        roles[row % 2],
                        f"row {row}",
                        embedding=vectors[row].tolist(),
                        embedding_model=embedder.name,
                    )
                    for row in range(start, start + 400)
                ]
                await store.append_events(session.id, writes, expected_version=0)
                sessions.append(session.id)
        return sessions

    return path, asyncio.run(load())


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_the_quantised_ranking_finds_what_the_scan_finds(
    large_db: tuple[Path, list[str]], metric: Metric
) -> None:
    """recall@10 against the exact scan over every row, over one owner's eighth (int8
    only), and exactly over one session (no more rows than the shortlist... of k=100)."""
    path, sessions = large_db
    model = ClusterEmbedder(CLUSTERED_WIDTH).name
    _, queries = clustered(23)
    cache = VectorCache()
    connection = open_connection(SQLiteTarget(str(path)), reader=True)
    scopes: list[tuple[str | None, str | None, tuple[Role, ...] | None]] = [
        (None, None, None),
        ("owner-3", None, None),
        (None, None, (Role.ASSISTANT,)),
    ]

    def searched(reader: sqlite3.Connection, *arguments: Any) -> list[str]:
        hits = sqlite_search.read_vector_search(reader, cache, *arguments)
        return [hit.message.id for hit in hits]

    try:
        for owner, session, roles in scopes:
            recalls = []
            for query in queries:
                arguments = (tuple(query.tolist()), metric, model, 10, owner, session, roles)
                found = in_read_snapshot(connection, searched, arguments)
                exact = in_read_snapshot(connection, sqlite_search.scan, arguments)
                assert len(found) == 10
                recalls.append(len(set(found) & {hit.message.id for hit in exact}) / 10)
            assert float(np.mean(recalls)) >= 0.95, (owner, roles, np.mean(recalls))
        for session in sessions[:5]:
            arguments = (tuple(queries[0].tolist()), metric, model, 100, None, session, None)
            found = in_read_snapshot(connection, searched, arguments)
            exact = in_read_snapshot(connection, sqlite_search.scan, arguments)
            assert found == [hit.message.id for hit in exact]
    finally:
        connection.close()


async def test_large_caches_follow_deletes_and_expiry(large_db: tuple[Path, list[str]]) -> None:
    """On a copy of the large database: deletes and an expired session leave the
    quantised ranking's hits (what a search of their own vectors finds)."""
    path, sessions = large_db
    copy = path.with_name("copy.db")
    source, target = sqlite3.connect(path), sqlite3.connect(copy)
    source.backup(target)
    source.close()
    target.close()
    embedder = ClusterEmbedder(CLUSTERED_WIDTH)
    async with await convostore.connect(db_url(copy), embedder=embedder) as store:
        first = (await store.messages(sessions[0]))[0]
        assert first.embedding is not None
        assert await is_nearest(store, first.embedding, first.id)
        assert await store.delete_session(sessions[0])
        hits = await store.search(vector=first.embedding, k=10)
        assert first.id not in {hit.message.id for hit in hits}
        past = datetime.now(UTC) - timedelta(days=1)
        expiring = await store.create_session(ADA, expires_at=past)
        write = MessageWrite(
            Role.USER, "soon gone", embedding=first.embedding, embedding_model=embedder.name
        )
        message = await store.add_message(expiring.id, write)
        assert await is_nearest(store, first.embedding, message.id)
        assert await store.delete_expired() == 1
        hits = await store.search(vector=first.embedding, k=10)
        assert message.id not in {hit.message.id for hit in hits}
