"""SQLite's vector cache follows every change, from this store or another, and answers
exactly what a scan of the database answers."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import convostore
from convostore import (
    EventWrite,
    Role,
    Store,
)
from convostore.backends.sql import vector_cache as shared_vector_cache
from convostore.backends.sqlite import SQLiteTarget
from convostore.backends.sqlite import search as sqlite_search
from convostore.backends.sqlite.connection import in_read_snapshot, open_connection
from convostore.backends.sqlite.search import VectorCache
from convostore.embedding import HashingEmbedder, Metric
from convostore.ids import new_stamp
from tests.backends.sqlite.support import (
    ADA,
    BOB,
    WIDTH,
    assert_exact,
    db_url,
    found_ids,
    gaussian,
    is_nearest,
    raw_rows,
    sqlite_of,
    vector_session,
    vector_write,
)


async def test_the_cache_follows_appends_from_this_store(vector_store: Store) -> None:
    rng = random.Random(1)
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB)]
    await assert_exact(vector_store, rng, sessions)
    for number in range(12):
        if number % 3 == 0:
            sessions.append(await vector_session(vector_store, rng, rng.choice([ADA, BOB]), 3))
        write = vector_write(rng, rng.choice([Role.USER, Role.ASSISTANT]))
        message = await vector_store.add_message(rng.choice(sessions), write)
        await vector_store.append_event(sessions[0], EventWrite("APP.STEP"))  # no vector
        assert await is_nearest(vector_store, write.embedding, message.id)
        await assert_exact(vector_store, rng, sessions, 2)


async def test_the_cache_follows_appends_from_another_store(
    vector_store: Store, vector_peer: Store
) -> None:
    rng = random.Random(2)
    sessions = [await vector_session(vector_store, rng)]
    await assert_exact(vector_store, rng, sessions)
    for _ in range(5):
        sessions.append(await vector_session(vector_peer, rng, BOB, 4))
        write = vector_write(rng)
        message = await vector_peer.add_message(sessions[0], write)
        assert await is_nearest(vector_store, write.embedding, message.id)
        assert not await is_nearest(vector_store, write.embedding, message.id, owner_id="bob")
        await assert_exact(vector_store, rng, sessions, 2)
        await assert_exact(vector_peer, rng, sessions, 1)


async def test_the_cache_follows_replaced_vectors(vector_store: Store, vector_peer: Store) -> None:
    rng = random.Random(3)
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB, ADA)]
    await assert_exact(vector_store, rng, sessions)
    model = HashingEmbedder(WIDTH).name
    for writer in (vector_store, vector_peer, vector_store):
        messages = await vector_store.messages(rng.choice(sessions))
        target = rng.choice(messages)
        old, new = target.embedding, gaussian(rng)
        await sqlite_of(writer).set_embeddings(model, [(target.id, tuple(new))], new_stamp())
        assert await is_nearest(vector_store, new, target.id)
        assert not await is_nearest(vector_store, old, target.id)
        await assert_exact(vector_store, rng, sessions, 3)


async def test_the_cache_follows_a_reembed_from_either_store(
    vector_store: Store, vector_peer: Store
) -> None:
    rng = random.Random(4)
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB)]
    await assert_exact(vector_store, rng, sessions)
    # The peer moves every vector to another model: this store's model has none left.
    other = HashingEmbedder(WIDTH)
    other.name = "other-model"
    assert (await vector_peer.reembed(other)).messages == 16
    assert await vector_store.search(vector=gaussian(rng), k=10) == []
    await assert_exact(vector_store, rng, sessions)
    # This store follows to the model; its searches then rank the new vectors.
    renamed = HashingEmbedder(WIDTH)
    renamed.name = "renamed-model"
    assert (await vector_store.reembed(renamed)).messages == 16
    [message, *_] = await vector_store.messages(sessions[1])
    assert message.embedding_model == "renamed-model"
    assert await is_nearest(vector_store, message.embedding, message.id)
    await assert_exact(vector_store, rng, sessions)


async def test_the_cache_forgets_a_deleted_session_and_a_reused_rowid(
    vector_store: Store, db_path: Path
) -> None:
    rng = random.Random(5)
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB, ADA)]
    await assert_exact(vector_store, rng, sessions)
    newest = sessions.pop()
    gone = await vector_store.messages(newest)
    [(top_before,)] = raw_rows(db_path, "SELECT max(rowid) FROM events")
    assert await vector_store.delete_session(newest)
    assert not {message.id for message in gone} & await found_ids(vector_store)
    await assert_exact(vector_store, rng, sessions)
    # The next rows take the rowids the deleted ones had.
    writes = [vector_write(rng) for _ in range(4)]
    await vector_store.append_events(sessions[0], writes, await vector_store.version(sessions[0]))
    [(top_after,)] = raw_rows(db_path, "SELECT max(rowid) FROM events")
    assert top_after < top_before
    for message in (await vector_store.messages(sessions[0]))[-4:]:
        assert await is_nearest(vector_store, message.embedding, message.id)
    await assert_exact(vector_store, rng, sessions)
    # Rows without vectors, seen by a search and then deleted, leave their rowids free
    # too: the vectors that take them are found.
    plain = (await vector_store.create_session(BOB)).id
    await vector_store.append_events(plain, [EventWrite("APP.STEP")] * 5, expected_version=0)
    await assert_exact(vector_store, rng, sessions)
    assert await vector_store.delete_session(plain)
    write = vector_write(rng)
    message = await vector_store.add_message(sessions[1], write)
    assert await is_nearest(vector_store, write.embedding, message.id)
    await assert_exact(vector_store, rng, sessions)


async def test_the_cache_forgets_expired_sessions(vector_store: Store, vector_peer: Store) -> None:
    rng = random.Random(6)
    past = datetime.now(UTC) - timedelta(days=1)
    future = datetime.now(UTC) + timedelta(days=1)
    kept = [await vector_session(vector_store, rng, ADA, expires_at=future)]
    expiring = [await vector_session(vector_store, rng, BOB, expires_at=past) for _ in range(2)]
    kept.append(await vector_session(vector_store, rng, BOB))
    await assert_exact(vector_store, rng, kept + expiring)
    gone = [m for session in expiring for m in await vector_store.messages(session)]
    for deleter in (vector_store, vector_peer):
        await deleter.delete_expired()
        await assert_exact(vector_store, rng, kept + expiring)
        assert not {message.id for message in gone} & await found_ids(vector_store)
        expiring.append(await vector_session(vector_peer, rng, BOB, expires_at=past))
        gone = await vector_peer.messages(expiring[-1])


async def test_the_cache_stays_exact_through_any_interleaving(
    vector_store: Store, vector_peer: Store
) -> None:
    rng = random.Random(7)
    stores = [vector_store, vector_peer]
    past = datetime.now(UTC) - timedelta(days=1)
    model = HashingEmbedder(WIDTH).name
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB)]
    for step in range(60):
        writer = rng.choice(stores)
        action = rng.randrange(7)
        if action == 0:
            sessions.append(await vector_session(writer, rng, rng.choice([ADA, BOB]), 3))
        elif action == 1 and sessions:
            await writer.add_message(rng.choice(sessions), vector_write(rng))
        elif action == 2 and sessions:
            await writer.append_event(rng.choice(sessions), EventWrite("APP.STEP"))
        elif action == 3 and sessions:
            messages = await writer.messages(rng.choice(sessions))
            chosen = rng.sample(messages, min(2, len(messages)))
            await sqlite_of(writer).set_embeddings(
                model, [(m.id, tuple(gaussian(rng))) for m in chosen], new_stamp()
            )
        elif action == 4 and len(sessions) > 2:
            await writer.delete_session(sessions.pop(rng.randrange(len(sessions))))
        elif action == 5:
            sessions.append(await vector_session(writer, rng, BOB, 2, expires_at=past))
            await writer.delete_expired()
            sessions.pop()
        elif action == 6 and sessions:
            message = rng.choice(await writer.messages(rng.choice(sessions)))
            await writer.set_narration(message.session_id, message.id, f"step {step}")
        await assert_exact(rng.choice(stores), rng, sessions, 1)


async def test_concurrent_searches_see_what_was_written_before_them(
    vector_store: Store, vector_peer: Store
) -> None:
    """Both reader threads share the cache while appends from two stores grow it, past
    the room it was built with."""
    rng = random.Random(8)
    session = await vector_store.create_session(ADA)
    first = vector_write(rng)
    written = [((await vector_store.add_message(session.id, first)).id, first.embedding)]
    assert await is_nearest(vector_store, first.embedding, written[0][0])  # room for 65
    appending = 2

    async def append(store: Store) -> int:
        nonlocal appending
        try:
            for _ in range(60):
                write = vector_write(rng)
                written.append(((await store.add_message(session.id, write)).id, write.embedding))
        finally:
            appending -= 1
        return 0

    async def search() -> int:
        searches = 0
        while appending:
            message_id, vector = written[rng.randrange(len(written))]
            assert await is_nearest(vector_store, vector, message_id)
            searches += 1
        return searches

    counts = await asyncio.gather(append(vector_store), append(vector_peer), search(), search())
    assert min(counts[2:]) > 5
    await assert_exact(vector_store, rng, [session.id])


async def test_a_search_in_an_older_snapshot_answers_for_that_snapshot(
    vector_store: Store, db_path: Path
) -> None:
    """A reader whose snapshot is older than the cache (which another search brought to
    a later change) scans the database as it sees it."""
    rng = random.Random(9)
    sessions = [await vector_session(vector_store, rng, owner) for owner in (ADA, BOB)]
    cache = VectorCache()
    target = SQLiteTarget(str(db_path))
    old, new = (open_connection(target, reader=True) for _ in range(2))
    model = HashingEmbedder(WIDTH).name

    def searched(connection: sqlite3.Connection, vector: Any, k: int) -> list[str]:
        metric: Metric = "cosine"
        arguments = (tuple(vector), metric, model, k, None, None, None)
        hits = sqlite_search.read_vector_search(connection, cache, *arguments)
        expected = sqlite_search.scan(connection, *arguments)
        assert [hit.message for hit in hits] == [hit.message for hit in expected]
        assert [hit.score for hit in hits] == pytest.approx(
            [hit.score for hit in expected], rel=1e-5, abs=1e-6
        )
        return [hit.message.id for hit in hits]

    def in_new_snapshot(vector: Any, k: int) -> list[str]:
        return in_read_snapshot(new, searched, (vector, k))

    try:
        old.execute("BEGIN")
        everything = searched(old, gaussian(rng), 1000)  # builds the cache
        assert len(everything) == 16
        appended = vector_write(rng)
        message = await vector_store.add_message(sessions[0], appended)
        assert in_new_snapshot(appended.embedding, 1) == [message.id]  # the cache grows
        # The old snapshot does not hold the new vector.
        [nearest] = searched(old, appended.embedding, 1)
        assert nearest in everything
        assert len(searched(old, gaussian(rng), 1000)) == 16
        await vector_store.delete_session(sessions[1])
        assert len(in_new_snapshot(gaussian(rng), 1000)) == 9  # the deletes applied
        # A snapshot older than the cache: scanned as the old snapshot sees it.
        assert len(searched(old, gaussian(rng), 1000)) == 16
        assert searched(old, appended.embedding, 1) == [nearest]
        old.execute("COMMIT")
        assert len(in_read_snapshot(old, searched, (gaussian(rng), 1000))) == 9
    finally:
        old.close()
        new.close()


async def test_searches_read_only_the_rows_changed_since(
    vector_store: Store, monkeypatch: pytest.MonkeyPatch, builds: list[int]
) -> None:
    """Inserts, re-embeddings and deletes are applied in place: a search reads the rows
    the change log names and never rebuilds."""
    written: list[int] = []
    write = shared_vector_cache.VectorTable._write

    def counting(table: Any, rows: list[Any], slots: Any) -> None:
        written.append(len(rows))
        write(table, rows, slots)

    monkeypatch.setattr(shared_vector_cache.VectorTable, "_write", counting)
    rng = random.Random(10)
    sessions = [await vector_session(vector_store, rng, owner, 10) for owner in (ADA, BOB)]
    vector = gaussian(rng)
    await vector_store.search(vector=vector)
    assert sum(written) == 20
    written.clear()
    await vector_store.search(vector=vector, owner_id="bob")
    await vector_store.search(vector=vector, mode="hybrid", query="message")
    assert written == []
    await vector_store.add_message(sessions[0], vector_write(rng))
    await vector_store.append_event(sessions[0], EventWrite("APP.STEP"))
    await vector_store.search(vector=vector)
    assert written == [1]
    written.clear()
    message = (await vector_store.messages(sessions[0]))[0]
    await vector_store.set_narration(sessions[0], message.id, "narrated")
    await vector_store.search(vector=vector)
    assert written == []
    await sqlite_of(vector_store).set_embeddings(
        HashingEmbedder(WIDTH).name, [(message.id, tuple(gaussian(rng)))], new_stamp()
    )
    await vector_store.search(vector=vector)
    assert written == [1]
    written.clear()
    await vector_store.delete_session(sessions[1])
    assert len(await vector_store.search(vector=vector, k=100)) == 11
    assert written == []
    assert builds == [1]


async def test_without_an_index_every_model_of_the_width_is_searched(store: Store) -> None:
    rng = random.Random(11)
    session = await store.create_session(ADA)
    writes = [
        vector_write(rng, model=model, width=width)
        for model, width in [("a", WIDTH), ("b", WIDTH), ("c", 8)] * 4
    ]
    await store.append_events(session.id, writes, expected_version=0)
    assert store.vector_index is None
    hits = await store.search(vector=gaussian(rng), k=1000)
    assert {hit.message.embedding_model for hit in hits} == {"a", "b"}
    assert len(hits) == 8
    await assert_exact(store, rng, [session.id])
    narrow = await store.search(vector=gaussian(rng, 8), k=1000)
    assert [hit.message.embedding_model for hit in narrow] == ["c"] * 4


async def test_the_change_log_names_every_change_of_a_vector(
    vector_store: Store, db_path: Path
) -> None:
    def logged() -> list[int]:
        return [row[0] for row in raw_rows(db_path, "SELECT event_rowid FROM vector_changes")]

    def generation() -> int:
        [(value,)] = raw_rows(db_path, "SELECT generation FROM vector_generation")
        return int(value)

    rng = random.Random(12)
    start, before = generation(), len(logged())
    session = await vector_session(vector_store, rng, ADA, 3)
    assert len(logged()) == before + 3
    message = (await vector_store.messages(session))[0]
    await vector_store.set_narration(session, message.id, "narrated")
    fresh = await vector_store.get_session(session)
    assert fresh is not None
    await vector_store.update_session(replace(fresh, title="titled"))
    await vector_store.append_event(session, EventWrite("APP.STEP"))
    assert len(logged()) == before + 3
    await sqlite_of(vector_store).set_embeddings(
        "m", [(message.id, tuple(gaussian(rng)))], new_stamp()
    )
    [(rowid,)] = raw_rows(db_path, "SELECT rowid FROM events WHERE id = ?", message.id)
    assert logged()[-1] == rowid
    assert await vector_store.delete_session(session)
    assert len(logged()) == before + 3 + 1 + 3  # each vector deleted, by the cascade too
    assert generation() == start


async def test_close_drops_the_cached_vectors(db_path: Path) -> None:
    store = await convostore.connect(db_url(db_path), embedder=HashingEmbedder(WIDTH))
    session = await vector_session(store, random.Random(13))
    assert await store.search(vector=gaussian(random.Random(14)), session_id=session)
    assert sqlite_of(store)._vector_cache.table is not None
    await store.close()
    assert sqlite_of(store)._vector_cache.table is None


async def test_the_cache_serves_a_memory_database() -> None:
    store = await convostore.connect("sqlite:///:memory:", embedder=HashingEmbedder(WIDTH))
    try:
        rng = random.Random(15)
        sessions = [await vector_session(store, rng, owner) for owner in (ADA, BOB)]
        await assert_exact(store, rng, sessions)
        write = vector_write(rng)
        message = await store.add_message(sessions[0], write)
        assert await is_nearest(store, write.embedding, message.id)
        assert await store.delete_session(sessions[0])
        assert message.id not in await found_ids(store)
        await assert_exact(store, rng, sessions[1:])
    finally:
        await store.close()
