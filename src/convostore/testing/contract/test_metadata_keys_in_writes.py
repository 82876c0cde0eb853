"""Writes index the keys the database indexes when they commit, not the keys their store
knew of: a store connected before another store (or process) added a key writes that
key's entries, and no interleaving of key adds and drops with session writes leaves a
session's indexed metadata out of the index."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from convostore import Session, Store
from convostore.testing.contract.test_metadata_expiry import KeysElsewhere
from convostore.testing.fixtures import BackendUnderTest, StoreFactory
from convostore.testing.helpers import AGENT, new_session

WRITERS = 8
# Each writer writes at least this many sessions, and goes on while the keys change, up
# to the most: bounded, yet overlapping every add and drop.
LEAST_WRITES = 6
MOST_WRITES = 150
KEY_CHANGES = 3
COLOURS = ("red", "green", "blue")


def _require_shared_database(store: Store) -> None:
    if not store.capabilities.cross_process:
        pytest.skip("the backend shares no database between store objects")


@pytest.mark.parametrize("where", ["store", "process"])
async def test_a_store_connected_before_a_key_was_added_indexes_it(
    indexed_store: Store, connect_store: StoreFactory, backend: BackendUnderTest, where: str
) -> None:
    _require_shared_database(indexed_store)
    older = await new_session(indexed_store, metadata={"colour": "red"})
    await KeysElsewhere(where, connect_store, backend()).add("colour")
    # This store has not looked at the keys since: its writes must index colour anyway.
    assert "colour" not in indexed_store.indexed_metadata
    created = await new_session(indexed_store, metadata={"colour": "blue", "tenant": "acme"})
    updated = await indexed_store.update_session(replace(older, metadata={"colour": "green"}))
    part = await indexed_store.find_or_create_part(created.id, AGENT)

    reader = await connect_store()
    assert await reader.find_sessions_by_metadata("colour", "blue") == [created]
    assert await reader.find_sessions_by_metadata("colour", "green") == [updated]
    assert await reader.find_sessions_by_metadata("colour", "red") == []
    assert await reader.find_sessions_by_metadata("tenant", "acme") == [created]
    assert part.metadata == {}


async def test_a_store_that_missed_a_drop_writes_no_entry_of_it(
    indexed_store: Store, connect_store: StoreFactory, backend: BackendUnderTest
) -> None:
    _require_shared_database(indexed_store)
    elsewhere = KeysElsewhere("store", connect_store, backend())
    await elsewhere.add("colour")
    await elsewhere.drop("tenant")
    # This store still believes tenant is indexed; the database says otherwise.
    assert "tenant" in indexed_store.indexed_metadata
    session = await new_session(indexed_store, metadata={"tenant": "acme", "colour": "red"})
    changed = await indexed_store.update_session(
        replace(session, metadata={"tenant": "globex", "colour": "red"})
    )
    # Indexed again: the backfill finds the current value only, and no leftover entry.
    await elsewhere.add("tenant")
    reader = await connect_store()
    assert await reader.find_sessions_by_metadata("tenant", "globex") == [changed]
    assert await reader.find_sessions_by_metadata("tenant", "acme") == []
    assert await reader.find_sessions_by_metadata("colour", "red") == [changed]


async def _write_while_keys_change(
    store: Store, number: int, settled: asyncio.Event
) -> dict[str, str]:
    """Create sessions with a colour, and now and then recolour one, until the keys have
    settled (at least `LEAST_WRITES`, at most `MOST_WRITES` writes); each session's last
    colour by id."""
    colours: dict[str, str] = {}
    sessions: list[Session] = []
    writes = 0
    while writes < LEAST_WRITES or (not settled.is_set() and writes < MOST_WRITES):
        colour = COLOURS[(number + writes) % len(COLOURS)]
        if writes % 3 == 2:
            recoloured = await store.update_session(
                replace(sessions[-1], metadata={"colour": colour, "writer": number})
            )
            sessions[-1] = recoloured
        else:
            sessions.append(await new_session(store, metadata={"colour": colour, "writer": number}))
        colours[sessions[-1].id] = colour
        writes += 1
    return colours


async def test_keys_added_and_dropped_while_sessions_are_written(
    indexed_store: Store, connect_store: StoreFactory
) -> None:
    _require_shared_database(indexed_store)
    # Connected before colour is indexed, and never looking at the keys again.
    writers = [await connect_store() for _ in range(WRITERS)]
    settled = asyncio.Event()

    async def change_keys() -> None:
        try:
            adder = await connect_store(indexed_metadata=["colour"])
            for _ in range(KEY_CHANGES):
                assert await adder.drop_metadata_index("colour") is True
                await connect_store(indexed_metadata=["colour"])
        finally:
            settled.set()

    written, _ = await asyncio.gather(
        asyncio.gather(*(_write_while_keys_change(w, n, settled) for n, w in enumerate(writers))),
        change_keys(),
    )
    colours = {session_id: colour for each in written for session_id, colour in each.items()}
    reader = await connect_store()
    for colour in COLOURS:
        found = await reader.find_sessions_by_metadata("colour", colour)
        expected = sorted(i for i, c in colours.items() if c == colour)
        assert [session.id for session in found] == expected, colour


async def test_a_key_some_of_whose_values_no_lookup_could_name_can_be_indexed(
    store: Store, connect_store: StoreFactory
) -> None:
    _require_shared_database(store)
    # JSON holds a NUL as an escape, but an index value cannot hold one.
    unnamable = await new_session(store, metadata={"note": "a\x00b"})
    plain = await new_session(store, metadata={"note": "plain"})
    indexing = await connect_store(indexed_metadata=["note"])
    assert await indexing.find_sessions_by_metadata("note", "plain") == [plain]
    # A store that has not seen the key added writes such a value, left out of the index.
    written = await new_session(store, metadata={"note": "c\x00d", "other": 1})
    assert await store.get_session(written.id) == written
    assert await store.get_session(unnamable.id) == unnamable
    assert await indexing.find_sessions_by_metadata("note", "plain") == [plain]
