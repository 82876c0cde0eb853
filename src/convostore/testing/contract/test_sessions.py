"""Sessions: create, get, update by stamp, titles, deletion, activity and expiry."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from convostore import (
    ConflictError,
    Role,
    SessionExistsError,
    SessionNotFoundError,
    StaleObjectError,
    Store,
    StoreError,
    User,
)
from convostore.testing.fixtures import StoreFactory
from convostore.testing.helpers import (
    AGENT,
    ALICE,
    BOB,
    MINUS_7,
    T0,
    event,
    freeze_store_clock,
    new_session,
    say,
    snapshot,
)


async def test_get_session_unknown_is_none(store: Store) -> None:
    assert await store.get_session("no-such-session") is None


async def test_create_then_get(store: Store) -> None:
    created = await new_session(store, title="hello", metadata={"k": 1})
    assert await store.get_session(created.id) == created


async def test_existing_id_raises_and_leaves_the_session_untouched(store: Store) -> None:
    original = await new_session(
        store, session_id="s-1", title="original", metadata={"a": 1}, held_with=AGENT
    )
    dave = User("dave", "Dave")
    with pytest.raises(SessionExistsError) as caught:
        await store.create_session(
            dave,
            session_id="s-1",
            title="replacement",
            kind="other",
            metadata={"b": 2},
            expires_at=datetime(2000, 1, 1, tzinfo=UTC),
        )
    assert isinstance(caught.value, ConflictError)
    assert isinstance(caught.value, StoreError)
    assert await store.get_session("s-1") == original
    assert await store.get_user("dave") is None


async def test_create_session_if_absent_creates_once(store: Store) -> None:
    assert await store.create_session_if_absent(ALICE, session_id="s-1", title="first") is True
    first = await store.get_session("s-1")
    assert first is not None
    assert first.title == "first"
    assert await store.create_session_if_absent(BOB, session_id="s-1", title="second") is False
    assert await store.get_session("s-1") == first
    assert await store.get_user(BOB.id) is None


async def test_update_session_writes_title_metadata_and_expiry(store: Store) -> None:
    session = await new_session(store, title="old", metadata={"a": 1}, held_with=AGENT)
    await store.add_message(session.id, say("hi"))
    current = await store.get_session(session.id)
    assert current is not None
    expires = datetime(2031, 2, 3, 4, 5, 6, 789, tzinfo=MINUS_7)
    updated = await store.update_session(
        replace(current, title="new", metadata={"b": [2]}, expires_at=expires)
    )
    assert (updated.title, updated.metadata, updated.expires_at) == ("new", {"b": [2]}, expires)
    assert updated.stamp != current.stamp
    unchanged = ("id", "owner_id", "kind", "part_of", "held_with", "created_at", "version")
    for name in (*unchanged, "last_activity_at"):
        assert getattr(updated, name) == getattr(current, name), name
    assert await store.get_session(session.id) == updated


async def test_update_session_writes_nothing_else(store: Store) -> None:
    session = await new_session(store, held_with=AGENT)
    tampered = replace(
        session,
        title="t",
        owner_id="bob",
        kind="other",
        held_with=None,
        part_of="elsewhere",
        created_at=datetime(2000, 1, 1, tzinfo=UTC),
        last_activity_at=datetime(2100, 1, 1, tzinfo=UTC),
        version=42,
    )
    updated = await store.update_session(tampered)
    assert updated == replace(session, title="t", stamp=updated.stamp)
    assert await store.get_session(session.id) == updated


async def test_update_session_can_clear_title_metadata_and_expiry(store: Store) -> None:
    session = await new_session(
        store, title="t", metadata={"a": 1}, expires_at=datetime(2100, 1, 1, tzinfo=UTC)
    )
    updated = await store.update_session(replace(session, title=None, metadata={}, expires_at=None))
    assert (updated.title, updated.metadata, updated.expires_at) == (None, {}, None)
    assert await store.get_session(session.id) == updated


async def test_stale_update_raises_and_writes_nothing(store: Store) -> None:
    session = await new_session(store, title="v0")
    first = await store.update_session(replace(session, title="v1"))
    with pytest.raises(StaleObjectError) as caught:
        await store.update_session(replace(session, title="v2", metadata={"x": 1}))
    assert isinstance(caught.value, ConflictError)
    assert await store.get_session(session.id) == first


async def test_update_of_a_deleted_session_raises_and_recreates_nothing(store: Store) -> None:
    session = await new_session(store)
    await store.delete_session(session.id)
    with pytest.raises(SessionNotFoundError):
        await store.update_session(replace(session, title="back"))
    assert await store.get_session(session.id) is None


async def test_set_title_never_conflicts_and_changes_the_stamp(store: Store) -> None:
    session = await new_session(store, title="old")
    titled = await store.set_title(session.id, "first")
    assert titled.title == "first"
    assert titled.stamp != session.stamp
    retitled = await store.set_title(session.id, "second")
    assert retitled.stamp != titled.stamp
    assert await store.get_session(session.id) == retitled
    with pytest.raises(StaleObjectError):
        await store.update_session(replace(titled, metadata={"x": 1}))
    assert await store.get_session(session.id) == retitled
    cleared = await store.set_title(session.id, None)
    assert cleared.title is None
    for name in ("version", "last_activity_at", "metadata", "created_at", "owner_id"):
        assert getattr(cleared, name) == getattr(session, name), name


async def test_set_title_of_unknown_session_raises(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.set_title("nope", "t")
    assert await store.get_session("nope") is None


async def test_every_append_changes_the_stamp_and_version(store: Store) -> None:
    session = await new_session(store)
    stamps = [session.stamp]
    versions = [session.version]

    async def record() -> None:
        current = await store.get_session(session.id)
        assert current is not None
        stamps.append(current.stamp)
        versions.append(current.version)
        assert current.version == await store.version(session.id)

    await store.add_message(session.id, say("a"))
    await record()
    await store.append_event(session.id, event())
    await record()
    await store.add_message(session.id, say("synthetic", Role.SYSTEM, synthetic=True))
    await record()
    assert await store.append_events(session.id, [say("b"), event(), say("c")], 3)
    await record()
    assert versions == [0, 1, 2, 3, 4]
    assert len(set(stamps)) == len(stamps)
    with pytest.raises(StaleObjectError):
        await store.update_session(replace(session, title="late"))


async def test_delete_session_deletes_parts_and_events(store: Store) -> None:
    parent = await new_session(store)
    part = await store.find_or_create_part(parent.id, AGENT)
    await store.add_message(parent.id, say("in parent", id="ev-parent"))
    await store.add_message(part.id, say("in part", id="ev-part"))
    other = await new_session(store)
    await store.add_message(other.id, say("elsewhere"))
    other_before = await snapshot(store, other.id)

    assert await store.delete_session(parent.id) is True
    assert await store.get_session(parent.id) is None
    assert await store.get_session(part.id) is None
    assert await store.read(parent.id) == []
    assert await store.read(part.id) == []
    assert await store.version(parent.id) == 0
    assert await store.version(part.id) == 0
    assert await store.list_parts(parent.id) == []
    assert await store.find_part(parent.id, AGENT) is None
    assert await snapshot(store, other.id) == other_before
    assert await store.delete_session(parent.id) is False


async def test_deleted_ids_can_be_used_again(store: Store) -> None:
    first = await new_session(store, session_id="s-again")
    await store.add_message(first.id, say("x", id="ev-again"))
    assert await store.delete_session(first.id)
    second = await new_session(store, BOB, session_id="s-again")
    assert second.owner_id == "bob"
    assert second.version == 0
    message = await store.add_message(second.id, say("y", id="ev-again"))
    assert message.seq == 1
    assert [m.content for m in await store.messages(second.id)] == ["y"]


async def test_delete_unknown_session_is_false(store: Store) -> None:
    assert await store.delete_session("nope") is False


# ------------------------------------------------------------------ last_activity_at


async def test_last_activity_starts_at_creation(store: Store) -> None:
    before = datetime.now(UTC)
    session = await new_session(store)
    assert before <= session.last_activity_at == session.created_at <= datetime.now(UTC)


async def test_non_synthetic_message_advances_last_activity(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    freeze_store_clock(monkeypatch, T0)
    session = await new_session(store)
    freeze_store_clock(monkeypatch, T0 + timedelta(seconds=1))
    await store.add_message(session.id, say("hello"))
    current = await store.get_session(session.id)
    assert current is not None
    assert current.last_activity_at == T0 + timedelta(seconds=1)
    assert current.created_at == session.created_at == T0


async def test_last_activity_uses_the_writers_clock_not_the_message_time(store: Store) -> None:
    session = await new_session(store)
    before = datetime.now(UTC)
    await store.add_message(session.id, say("old", created_at=datetime(2001, 1, 1, tzinfo=UTC)))
    current = await store.get_session(session.id)
    assert current is not None
    assert current.last_activity_at >= before
    await store.add_message(session.id, say("new", created_at=datetime(2100, 1, 1, tzinfo=UTC)))
    current = await store.get_session(session.id)
    assert current is not None
    assert current.last_activity_at <= datetime.now(UTC)


async def test_last_activity_never_moves_backwards(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    freeze_store_clock(monkeypatch, T0)
    session = await new_session(store)
    freeze_store_clock(monkeypatch, T0 + timedelta(seconds=1))
    await store.add_message(session.id, say("now"))
    latest = await store.get_session(session.id)
    assert latest is not None
    # A writer whose clock lags an hour behind.
    freeze_store_clock(monkeypatch, latest.last_activity_at - timedelta(hours=1))
    await store.add_message(session.id, say("from a slow clock"))
    await store.append_events(session.id, [say("batch from a slow clock")], 2)
    current = await store.get_session(session.id)
    assert current is not None
    assert current.version == 3
    assert current.last_activity_at == latest.last_activity_at


async def test_what_does_not_move_last_activity(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    freeze_store_clock(monkeypatch, T0)
    session = await new_session(store)
    message = await store.add_message(session.id, say("hello"))
    settled = await store.get_session(session.id)
    assert settled is not None
    activity = settled.last_activity_at
    # Any write below that moved it would move it to this later instant.
    freeze_store_clock(monkeypatch, T0 + timedelta(hours=1))

    async def unchanged() -> None:
        current = await store.get_session(session.id)
        assert current is not None
        assert current.last_activity_at == activity

    assert await store.set_narration(session.id, message.id, "narrated")
    await unchanged()
    await store.set_title(session.id, "title")
    await unchanged()
    current = await store.get_session(session.id)
    assert current is not None
    await store.update_session(replace(current, metadata={"k": "v"}))
    await unchanged()
    await store.add_message(session.id, say("summary", Role.SYSTEM, synthetic=True))
    await unchanged()
    await store.add_message(session.id, say("synthetic user", synthetic=True))
    await unchanged()
    await store.append_event(session.id, event("TOOL.RESULT", {"ok": True}))
    await unchanged()
    version = await store.version(session.id)
    await store.append_events(
        session.id,
        [event("COMPACTION", {"kept_event_ids": [message.id]}, synthetic=True)],
        version,
    )
    await unchanged()
    await store.add_message(session.id, say("retried", id=message.id))
    await unchanged()


async def test_everything_survives_reconnecting(store: Store, connect_store: StoreFactory) -> None:
    if not store.capabilities.persistent:
        pytest.skip("the backend keeps nothing after close")
    session = await new_session(store, title="kept", held_with=AGENT, metadata={"k": [1]})
    part = await store.find_or_create_part(session.id, BOB)
    message = await store.add_message(session.id, say("hello", author=ALICE, recipients=[BOB]))
    await store.set_narration(session.id, message.id, "narrated")
    stored = await store.get_session(session.id)
    log = await store.read(session.id)
    await store.close()
    reopened = await connect_store()
    assert await reopened.get_session(session.id) == stored
    assert await reopened.get_session(part.id) == part
    assert await reopened.read(session.id) == log
    assert await reopened.version(session.id) == 1
    assert await reopened.get_user(AGENT.id) == AGENT
    assert await reopened.participants(session.id) == [ALICE]
    await reopened.add_message(session.id, say("again"))
    assert [e.seq for e in await reopened.read(session.id)] == [1, 2]
