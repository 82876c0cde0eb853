"""API keys kept in the store's own database: hashed, scoped, revocable."""

from __future__ import annotations

import pytest

from convostore import InvalidArgumentError, Store
from convostore.filters import EventFilter
from convostore.keys import KEYS_SESSION_ID, SYSTEM_USER, KeyRing
from convostore.testing.fixtures import StoreFactory


async def test_a_created_key_authenticates_as_its_owner(store: Store) -> None:
    ring = KeyRing(store)
    key, record = await ring.create("ada", label="laptop")
    found = await ring.authenticate(key)
    assert found == record
    assert (found.owner_id, found.admin, found.label) == ("ada", False, "laptop")
    assert found.can_see("ada")
    assert not found.can_see("grace")
    assert not found.can_see(None)


async def test_only_the_hash_is_stored(store: Store) -> None:
    key, _ = await KeyRing(store).create("ada")
    stored = await store.read(KEYS_SESSION_ID, EventFilter())
    assert stored
    assert all(key not in repr(event) for event in stored)
    session = await store.get_session(KEYS_SESSION_ID)
    assert session is not None
    assert session.owner_id == SYSTEM_USER.id


async def test_wrong_malformed_and_revoked_keys_are_refused(store: Store) -> None:
    ring = KeyRing(store)
    key, record = await ring.create("ada")
    tampered = key[:-1] + ("A" if key[-1] != "A" else "B")
    assert await ring.authenticate(tampered) is None
    assert await ring.authenticate("Bearer " + key) is None
    assert await ring.authenticate("") is None
    assert await ring.revoke(record.id)
    assert await ring.authenticate(key) is None
    assert not await ring.revoke(record.id)
    assert not await ring.revoke("0000000000000000")
    assert [k.id for k in await ring.list()] == []
    listed = await ring.list(include_revoked=True)
    assert [k.id for k in listed] == [record.id]
    assert listed[0].revoked_at is not None


async def test_admin_keys_see_every_owner(store: Store) -> None:
    ring = KeyRing(store)
    key, _ = await ring.create(None, admin=True)
    found = await ring.authenticate(key)
    assert found is not None
    assert found.can_see("ada")
    assert found.can_see(None)


async def test_bad_key_requests_write_nothing(store: Store) -> None:
    ring = KeyRing(store)
    with pytest.raises(InvalidArgumentError):
        await ring.create(None)
    with pytest.raises(InvalidArgumentError):
        await ring.create(" ")
    with pytest.raises(InvalidArgumentError):
        await ring.create(SYSTEM_USER.id)
    assert await store.version(KEYS_SESSION_ID) == 0


async def test_a_revocation_reaches_another_store_on_the_database(
    store: Store, connect_store: StoreFactory
) -> None:
    if not store.capabilities.persistent:
        pytest.skip("a second store shares nothing with the first")
    first, second = KeyRing(store), KeyRing(await connect_store())
    key, record = await first.create("ada")
    assert await second.authenticate(key) == record
    assert await first.revoke(record.id)
    assert await second.authenticate(key) is None
