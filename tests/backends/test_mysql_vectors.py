"""The shared vector cache on MySQL / MariaDB (the default ``vector_search=cache``): its
change feed is in commit order, so a change that commits after a later-numbered one is
still applied; deletes, expiry, re-embedding and a session created anew under a deleted
one's id reach every store's cache in place, and searches stay exact against a store
that scans. Run on MariaDB 10.11 and on 11.8 (whose graph the cache stores never build)."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

import convostore
from convostore import InvalidArgumentError, MessageWrite, Role, Store, User
from convostore.ids import new_stamp
from tests.backends.support import missing_driver

if (why := missing_driver("asyncmy", "mysql")) is not None:
    pytest.skip(why, allow_module_level=True)

from convostore._time import utc_now
from convostore.backends.mysql import MySQLBackend, parse_mysql_url, vector_feed
from convostore.backends.mysql.connection import fetch_all
from tests.servers.mariadb import (
    TestServer,
)

ADA = User("ada", "Ada")
BOB = User("bob", "Bob")
WIDTH = 16
MODEL = "test-vectors"


_databases = itertools.count(1)


class Stores:
    """Stores on one fresh database, closed at teardown."""

    def __init__(self, server: TestServer) -> None:
        self.url = server.url(f"cache_{os.getpid()}_{next(_databases)}")
        self.opened: list[Store] = []

    async def open(self, vector_search: str = "cache") -> Store:
        store = await convostore.connect(f"{self.url}?vector_search={vector_search}")
        self.opened.append(store)
        return store


@pytest.fixture(params=["mariadb", "mariadb11"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[Stores]:
    server_fixture = "server_10" if request.param == "mariadb" else "server_11"
    opened = Stores(request.getfixturevalue(server_fixture))
    yield opened
    for store in reversed(opened.opened):
        await store.close()


def backend(store: Store) -> MySQLBackend:
    assert isinstance(store.backend, MySQLBackend)
    return store.backend


def gaussian(rng: random.Random) -> list[float]:
    return [rng.gauss(0.0, 1.0) for _ in range(WIDTH)]


def said(rng: random.Random, text: str = "said") -> MessageWrite:
    return MessageWrite(Role.USER, text, embedding=gaussian(rng), embedding_model=MODEL)


async def filled(store: Store, rng: random.Random, owner: User, count: int = 6, **kw: Any) -> str:
    session = await store.create_session(owner, **kw)
    for _ in range(count):
        await store.add_message(session.id, said(rng))
    return session.id


async def found(store: Store, vector: list[float], **scope: Any) -> list[tuple[str, float]]:
    hits = await store.search(vector=vector, k=1000, **scope)
    return [(hit.message.id, hit.score) for hit in hits]


async def assert_as_scanned(store: Store, scanner: Store, rng: random.Random) -> None:
    """``store``'s cache finds what a scan of the database finds, in the same order
    (scopes no larger than the shortlist are ranked exactly)."""
    for scope in ({}, {"owner_id": "bob"}, {"roles": [Role.USER]}):
        vector = gaussian(rng)
        got, expected = await found(store, vector, **scope), await found(scanner, vector, **scope)
        assert [hit for hit, _ in got] == [hit for hit, _ in expected]
        assert [score for _, score in got] == pytest.approx([s for _, s in expected], rel=1e-5)
    await assert_cache_holds_the_database(store)


async def assert_cache_holds_the_database(store: Store) -> None:
    """The cache's live rows are the database's vectors, each with its owner (a row
    the cache kept after its deletion would only show in a search when it displaced
    another from the shortlist)."""
    cache = backend(store).vectors.cache
    assert cache is not None
    table = cache.table
    assert table is not None
    live = table.live[: table.count]
    owners = {code: owner for owner, code in table.owner_codes.items()}
    cached = {
        int(row_id): owners.get(int(code))
        for row_id, code in zip(
            table.rowids[: table.count][live], table.owners[: table.count][live], strict=True
        )
    }
    async with backend(store).pool.acquire() as connection:
        stored = await fetch_all(
            connection,
            "SELECT e.row_id, s.owner_id FROM events e JOIN sessions s ON s.id = e.session_id"
            " WHERE e.embedding IS NOT NULL",
        )
    assert cached == {int(row_id): owner for row_id, owner in stored}


async def test_a_change_committed_after_a_later_one_is_applied(
    stores: Stores, builds: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two appends with vectors: the first inserts its row (the smaller row_id), then
    holds its transaction open; the second commits; a search brings the cache up to
    it; then the first commits. Its vector must be found: a feed numbered when rows are
    inserted (an AUTO_INCREMENT) would put it behind what the cache already applied."""
    store = await stores.open()
    rng = random.Random(1)
    first, second = await filled(store, rng, ADA, 2), await filled(store, rng, BOB, 2)
    assert len(await found(store, gaussian(rng))) == 4
    inserted, go = asyncio.Event(), asyncio.Event()
    record = vector_feed.record

    async def held(*arguments: Any, **named: Any) -> None:
        if not inserted.is_set():  # the first write to get here waits
            inserted.set()
            await go.wait()
        await record(*arguments, **named)

    monkeypatch.setattr(vector_feed, "record", held)
    late_write, early_write = said(rng, "late"), said(rng, "early")
    late = asyncio.create_task(store.add_message(first, late_write))
    await inserted.wait()  # its row is inserted, uncommitted, its position not taken
    early = await store.add_message(second, early_write)
    assert early_write.embedding is not None
    assert late_write.embedding is not None
    [nearest] = await store.search(vector=early_write.embedding, k=1)
    assert nearest.message.id == early.id
    assert len(await found(store, gaussian(rng))) == 5  # the late row is not committed
    go.set()
    late_message = await late
    async with backend(store).pool.acquire() as connection:
        rows = await fetch_all(
            connection,
            "SELECT id FROM events WHERE id IN (%s, %s) ORDER BY row_id",
            (late_message.id, early.id),
        )
    assert [row[0] for row in rows] == [late_message.id, early.id]  # the smaller row_id
    [nearest] = await store.search(vector=late_write.embedding, k=1)
    assert nearest.message.id == late_message.id
    assert len(await found(store, gaussian(rng))) == 6
    assert builds == [1]  # applied in place


async def test_every_change_reaches_other_stores_caches_in_place(
    stores: Stores, builds: list[int]
) -> None:
    writer, reader = await stores.open(), await stores.open()
    scanner = await stores.open("scan")
    assert backend(scanner).vectors.cache is None
    rng = random.Random(2)
    sessions = [await filled(writer, rng, owner) for owner in (ADA, BOB, ADA)]
    for store in (writer, reader):
        await assert_as_scanned(store, scanner, rng)
    assert len(builds) == 2  # one table per caching store
    # A parent with a part, both with vectors, deleted together; then recreated under
    # the same id by another owner.
    parent = await filled(writer, rng, BOB)
    part = await writer.create_session(BOB, part_of=parent)
    await writer.add_message(part.id, said(rng))
    await assert_as_scanned(reader, scanner, rng)
    assert await reader.delete_session(parent)
    await assert_as_scanned(writer, scanner, rng)
    await assert_as_scanned(reader, scanner, rng)
    again = await filled(writer, rng, ADA, 3, session_id=parent)
    assert again == parent
    bob_hits = await found(reader, gaussian(rng), owner_id="bob")
    assert not {m.id for m in await writer.messages(parent)} & {hit for hit, _ in bob_hits}
    await assert_as_scanned(reader, scanner, rng)
    # Expiry, of a session and a part of another.
    expiring = await filled(writer, rng, BOB, 4, expires_at=utc_now() + timedelta(hours=1))
    sub = await writer.create_session(BOB, part_of=expiring)
    await writer.add_message(sub.id, said(rng))
    await assert_as_scanned(reader, scanner, rng)
    assert await writer.delete_expired(utc_now() + timedelta(hours=2)) == 1
    await assert_as_scanned(reader, scanner, rng)
    # Re-embedding one message.
    message = (await writer.messages(sessions[1]))[0]
    vector = tuple(gaussian(rng))
    await backend(writer).set_embeddings(MODEL, [(message.id, vector)], new_stamp())
    [nearest] = await reader.search(vector=list(vector), k=1)
    assert nearest.message.id == message.id
    for store in (writer, reader):
        await assert_as_scanned(store, scanner, rng)
    assert len(builds) == 2  # every change applied in place


async def test_a_cache_behind_the_pruned_feed_rebuilds(
    stores: Stores, builds: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vector_feed, "KEPT", 4)
    monkeypatch.setattr(vector_feed, "PRUNE_EVERY", 2)
    writer, reader = await stores.open(), await stores.open()
    scanner = await stores.open("scan")
    rng = random.Random(3)
    session = await filled(writer, rng, ADA, 2)
    await assert_as_scanned(reader, scanner, rng)
    for _ in range(8):
        await writer.add_message(session, said(rng))
    async with backend(writer).pool.acquire() as connection:
        [(position, pruned)] = await fetch_all(
            connection, "SELECT position, pruned FROM vector_feed"
        )
        kept = await fetch_all(connection, "SELECT min(position) FROM vector_changes")
    assert (position, pruned) == (10, 6)
    assert kept == [(7,)]
    await assert_as_scanned(reader, scanner, rng)
    assert len(builds) == 2  # the reader's, then its rebuild


async def test_appends_without_vectors_take_no_position(stores: Stores) -> None:
    store = await stores.open()
    session = await store.create_session(ADA)
    await store.add_message(session.id, MessageWrite(Role.USER, "no vector"))
    async with backend(store).pool.acquire() as connection:
        assert await fetch_all(connection, "SELECT position FROM vector_feed") == [(0,)]
    await store.add_message(session.id, said(random.Random(4)))
    async with backend(store).pool.acquire() as connection:
        assert await fetch_all(connection, "SELECT position FROM vector_feed") == [(1,)]


def test_the_url_chooses_the_vector_search() -> None:
    url = "mysql://u@localhost/db"
    assert parse_mysql_url(url).vector_search == "cache"
    for choice in ("cache", "native", "scan", "NATIVE"):
        assert parse_mysql_url(f"{url}?vector_search={choice}").vector_search == choice.lower()
    with pytest.raises(InvalidArgumentError, match="vector_search must be one of"):
        parse_mysql_url(f"{url}?vector_search=graph")
