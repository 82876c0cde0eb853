"""Whole-database counts, and the migrations a connect would apply."""

from __future__ import annotations

from convostore import MessageWrite, Role, Store
from convostore.backends import pending_migrations
from convostore.testing.fixtures import BackendUnderTest, StoreFactory
from convostore.testing.helpers import ALICE, BOB, event, new_session, say


async def test_stats_count_every_owner(store: Store) -> None:
    empty = await store.stats()
    assert (empty.users, empty.sessions, empty.events, empty.messages, empty.vectors) == (
        0,
        0,
        0,
        0,
        0,
    )
    first = await new_session(store)
    part = await store.create_session(ALICE, part_of=first.id, held_with=BOB)
    second = await new_session(store, BOB)
    await store.add_message(first.id, say("hi", author=ALICE))
    await store.add_message(
        part.id, MessageWrite(Role.USER, "v", embedding=[1.0, 0.0], embedding_model="m")
    )
    await store.append_event(second.id, event())
    stats = await store.stats()
    assert (stats.users, stats.sessions, stats.events, stats.messages, stats.vectors) == (
        2,
        3,
        3,
        2,
        1,
    )
    assert stats.size_bytes is None or stats.size_bytes > 0


async def test_a_connected_database_has_no_pending_migration(
    backend: BackendUnderTest, connect_store: StoreFactory
) -> None:
    await connect_store()
    assert await pending_migrations(backend()) == []


async def test_pending_migrations_change_nothing(backend: BackendUnderTest) -> None:
    before = await pending_migrations(backend())
    assert await pending_migrations(backend()) == before
    assert all(line.split(":")[0].isdigit() for line in before)
