"""Session metadata lookup on indexed keys, and expiry."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from convostore import InvalidArgumentError, NotIndexedError, Session, Store
from convostore.testing.fixtures import BackendUnderTest, StoreFactory
from convostore.testing.helpers import AGENT, MINUS_7, new_session, say

VALUES: list[tuple[str, Any]] = [
    ("acme", "acme"),
    ("acme-corp", "acme-corp"),
    ("ac", "ac"),
    ("Acme", "Acme"),
    ("acme-space", "acme "),
    ("int-5", 5),
    ("str-5", "5"),
    ("bool", True),
    ("str-true", "true"),
    ("object", {"a": 1, "b": [1, 2]}),
    ("percent", "a%c"),
    ("underscore", "a_c"),
    ("abc", "abc"),
    ("cafe-accent", "café"),
    ("cafe", "cafe"),
    ("long-x", "x" * 300),
    ("long-y", "x" * 299 + "y"),
]


async def metadata_sessions(store: Store) -> dict[str, Session]:
    sessions: dict[str, Session] = {}
    for name, value in VALUES:
        sessions[name] = await new_session(store, metadata={"tenant": value, "other": "acme"})
    sessions["topic"] = await new_session(store, metadata={"topic": "acme"})
    sessions["none"] = await new_session(store)
    return sessions


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("acme", ["acme"]),
        ("ac", ["ac"]),
        ("Acme", ["Acme"]),
        ("acme ", ["acme-space"]),
        ("acm", []),
        ("cme", []),
        (5, ["int-5", "str-5"]),
        ("5", ["int-5", "str-5"]),
        (True, ["bool", "str-true"]),
        ({"a": 1, "b": [1, 2]}, ["object"]),
        ('{"a":1,"b":[1,2]}', ["object"]),
        ("a%c", ["percent"]),
        ("a_c", ["underscore"]),
        ("a%", []),
        ("%", []),
        ("café", ["cafe-accent"]),
        ("cafe", ["cafe"]),
        ("x" * 300, ["long-x"]),
        ("x" * 299 + "y", ["long-y"]),
        ("x" * 299, []),
    ],
    ids=repr,
)
async def test_values_compare_as_strings_in_full(
    indexed_store: Store, value: Any, expected: list[str]
) -> None:
    sessions = await metadata_sessions(indexed_store)
    found = await indexed_store.find_sessions_by_metadata("tenant", value)
    assert [s.id for s in found] == [sessions[name].id for name in expected]
    assert found == [sessions[name] for name in expected]


async def test_keys_are_searched_separately(indexed_store: Store) -> None:
    sessions = await metadata_sessions(indexed_store)
    found = await indexed_store.find_sessions_by_metadata("topic", "acme")
    assert [s.id for s in found] == [sessions["topic"].id]


async def test_oldest_first(indexed_store: Store) -> None:
    # Default (UUIDv7) ids, so creation time and id order agree; which of the two rules
    # "oldest" for caller-chosen ids is not settled by DESIGN.md.
    created = []
    for _ in range(5):
        created.append(await new_session(indexed_store, metadata={"topic": "t"}))
        await new_session(indexed_store, metadata={"topic": "u"})
    found = await indexed_store.find_sessions_by_metadata("topic", "t")
    assert found == created


async def test_unindexed_keys_are_refused(indexed_store: Store) -> None:
    await new_session(indexed_store, metadata={"other": "acme"})
    with pytest.raises(NotIndexedError) as caught:
        await indexed_store.find_sessions_by_metadata("other", "acme")
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, InvalidArgumentError)


async def test_a_database_that_indexes_no_key_refuses_every_lookup(store: Store) -> None:
    await new_session(store, metadata={"tenant": "acme"})
    assert store.indexed_metadata == frozenset()
    with pytest.raises(NotIndexedError):
        await store.find_sessions_by_metadata("tenant", "acme")


async def test_updates_change_what_is_found(indexed_store: Store) -> None:
    session = await new_session(indexed_store, metadata={"tenant": "acme", "topic": "x"})
    renamed = await indexed_store.update_session(
        replace(session, metadata={"tenant": "globex", "topic": "x"})
    )
    assert await indexed_store.find_sessions_by_metadata("tenant", "acme") == []
    assert await indexed_store.find_sessions_by_metadata("tenant", "globex") == [renamed]
    titled = await indexed_store.set_title(session.id, "t")
    assert await indexed_store.find_sessions_by_metadata("topic", "x") == [titled]
    removed = await indexed_store.update_session(replace(titled, metadata={"topic": "x"}))
    assert await indexed_store.find_sessions_by_metadata("tenant", "globex") == []
    assert await indexed_store.find_sessions_by_metadata("topic", "x") == [removed]
    await indexed_store.delete_session(session.id)
    assert await indexed_store.find_sessions_by_metadata("topic", "x") == []


async def test_found_sessions_are_current(indexed_store: Store) -> None:
    session = await new_session(indexed_store, metadata={"tenant": "acme"})
    await indexed_store.add_message(session.id, say("hi"))
    (found,) = await indexed_store.find_sessions_by_metadata("tenant", "acme")
    assert found == await indexed_store.get_session(session.id)
    assert found.version == 1


async def test_parts_are_found_too(indexed_store: Store) -> None:
    parent = await new_session(indexed_store)
    part = await indexed_store.create_session(
        "alice", part_of=parent.id, held_with=AGENT, metadata={"tenant": "acme"}
    )
    assert await indexed_store.find_sessions_by_metadata("tenant", "acme") == [part]


async def test_index_survives_reconnecting(
    indexed_store: Store, connect_store: StoreFactory
) -> None:
    if not indexed_store.capabilities.persistent:
        pytest.skip("the backend keeps nothing after close")
    session = await new_session(indexed_store, metadata={"tenant": "acme"})
    await indexed_store.close()
    reopened = await connect_store(indexed_metadata=("tenant", "topic"))
    assert await reopened.find_sessions_by_metadata("tenant", "acme") == [session]


async def test_indexed_keys_belong_to_the_database(
    indexed_store: Store, connect_store: StoreFactory
) -> None:
    if not indexed_store.capabilities.cross_process:
        pytest.skip("the backend shares no database between store objects")
    session = await new_session(indexed_store, metadata={"tenant": "acme", "colour": "red"})
    # A store that names no keys neither drops nor hides the ones the database indexes.
    plain = await connect_store()
    assert plain.indexed_metadata == {"tenant", "topic"}
    assert await indexed_store.find_sessions_by_metadata("tenant", "acme") == [session]
    assert await plain.find_sessions_by_metadata("tenant", "acme") == [session]
    # Naming another key adds it, backfilled, to the rest.
    more = await connect_store(indexed_metadata=["colour"])
    assert more.indexed_metadata == {"tenant", "topic", "colour"}
    assert await more.find_sessions_by_metadata("colour", "red") == [session]
    # Only an explicit call drops one.
    assert await plain.drop_metadata_index("tenant") is True
    with pytest.raises(NotIndexedError):
        await plain.find_sessions_by_metadata("tenant", "acme")
    later = await connect_store()
    assert later.indexed_metadata == {"topic", "colour"}


class KeysElsewhere:
    """Adds and drops indexed keys of the test's database from another store object, or
    from another process (a store connected there, then closed)."""

    def __init__(self, where: str, connect_store: StoreFactory, url: str) -> None:
        self.where, self.connect_store, self.url = where, connect_store, url
        self.other: Store | None = None

    async def add(self, key: str) -> None:
        if self.where == "store":
            self.other = await self.connect_store(indexed_metadata=[key])
        else:
            await self._in_another_process(add=[key])

    async def drop(self, key: str) -> None:
        if self.other is not None:
            assert await self.other.drop_metadata_index(key) is True
        else:
            await self._in_another_process(drop=[key])

    async def _in_another_process(self, add: Sequence[str] = (), drop: Sequence[str] = ()) -> None:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _KEYS_SCRIPT,
            json.dumps({"url": self.url, "add": list(add), "drop": list(drop)}),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await child.communicate()
        assert child.returncode == 0, output.decode(errors="replace")


_KEYS_SCRIPT = """
import asyncio, json, sys
import convostore

async def main(job):
    store = await convostore.connect(job["url"], indexed_metadata=job["add"])
    async with store:
        for key in job["drop"]:
            assert await store.drop_metadata_index(key), key

asyncio.run(main(json.loads(sys.argv[1])))
"""


@pytest.mark.parametrize("where", ["store", "process"])
async def test_a_connected_store_sees_the_keys_others_add_and_drop(
    indexed_store: Store, connect_store: StoreFactory, backend: BackendUnderTest, where: str
) -> None:
    if not indexed_store.capabilities.cross_process:
        pytest.skip("the backend shares no database between store objects or processes")
    elsewhere = KeysElsewhere(where, connect_store, backend())
    session = await new_session(indexed_store, metadata={"tenant": "acme", "colour": "red"})
    assert "colour" not in indexed_store.indexed_metadata

    # A key added elsewhere after this store connected is found here, backfilled.
    await elsewhere.add("colour")
    assert await indexed_store.find_sessions_by_metadata("colour", "red") == [session]
    assert indexed_store.indexed_metadata == {"tenant", "topic", "colour"}
    assert await indexed_store.find_sessions_by_metadata("colour", "blue") == []

    # A key dropped elsewhere is refused here, not answered with nothing.
    assert await indexed_store.find_sessions_by_metadata("tenant", "acme") == [session]
    await elsewhere.drop("tenant")
    with pytest.raises(NotIndexedError):
        await indexed_store.find_sessions_by_metadata("tenant", "acme")
    assert indexed_store.indexed_metadata == {"topic", "colour"}

    # A drop here is seen elsewhere.
    assert await indexed_store.drop_metadata_index("colour") is True
    assert indexed_store.indexed_metadata == {"topic"}
    if elsewhere.other is not None:
        with pytest.raises(NotIndexedError):
            await elsewhere.other.find_sessions_by_metadata("colour", "red")
        assert elsewhere.other.indexed_metadata == {"topic"}


async def test_a_dropped_key_is_no_longer_searchable(indexed_store: Store) -> None:
    await new_session(indexed_store, metadata={"tenant": "acme"})
    assert await indexed_store.drop_metadata_index("tenant") is True
    assert indexed_store.indexed_metadata == {"topic"}
    with pytest.raises(NotIndexedError):
        await indexed_store.find_sessions_by_metadata("tenant", "acme")
    assert await indexed_store.drop_metadata_index("tenant") is False
    with pytest.raises(InvalidArgumentError):
        await indexed_store.drop_metadata_index("not a key")


# ------------------------------------------------------------------ expiry


async def test_delete_expired_is_strict(store: Store) -> None:
    t = datetime(2024, 6, 1, 12, 0, 0, 500000, tzinfo=UTC)
    one_us = timedelta(microseconds=1)
    before_t = await new_session(store, expires_at=t - one_us)
    at_t = await new_session(store, expires_at=t)
    after_t = await new_session(store, expires_at=t + one_us)
    never = await new_session(store)
    assert before_t.is_expired(t)
    assert not at_t.is_expired(t)

    assert await store.delete_expired(before=t.astimezone(MINUS_7)) == 1
    assert await store.get_session(before_t.id) is None
    for kept in (at_t, after_t, never):
        assert await store.get_session(kept.id) == kept
    assert await store.delete_expired(before=t) == 0


async def test_expired_sessions_are_readable_until_deleted(store: Store) -> None:
    past = await new_session(store, expires_at=datetime.now(UTC) - timedelta(seconds=1))
    future = await new_session(store, expires_at=datetime.now(UTC) + timedelta(hours=1))
    await store.add_message(past.id, say("still here"))
    current = await store.get_session(past.id)
    assert current is not None
    assert current.is_expired(datetime.now(UTC))
    assert len(await store.read(past.id)) == 1
    assert await store.delete_expired() == 1
    assert await store.get_session(past.id) is None
    assert await store.read(past.id) == []
    assert await store.get_session(future.id) == future


async def test_delete_expired_takes_parts_and_events_without_counting_parts(
    store: Store,
) -> None:
    t = datetime(2024, 6, 1, tzinfo=UTC)
    parent = await new_session(store, expires_at=t - timedelta(days=1))
    part = await store.find_or_create_part(parent.id, AGENT)
    await store.add_message(parent.id, say("p"))
    await store.add_message(part.id, say("q"))
    survivor = await new_session(store, expires_at=t)
    assert await store.delete_expired(before=t) == 1
    assert await store.get_session(part.id) is None
    assert await store.read(parent.id) == []
    assert await store.read(part.id) == []
    assert await store.get_session(survivor.id) == survivor


async def test_extending_expiry_saves_a_session(store: Store) -> None:
    t = datetime(2024, 6, 1, tzinfo=UTC)
    session = await new_session(store, expires_at=t - timedelta(days=1))
    await store.update_session(replace(session, expires_at=t + timedelta(days=1)))
    cleared = await new_session(store, expires_at=t - timedelta(days=1))
    await store.update_session(replace(cleared, expires_at=None))
    assert await store.delete_expired(before=t) == 0
    assert await store.get_session(session.id) is not None
    assert await store.get_session(cleared.id) is not None
