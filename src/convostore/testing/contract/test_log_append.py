"""The log: seq, versions, idempotent appends, all-or-nothing batches, event types."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from convostore import (
    COMPACTION,
    Appended,
    ConflictError,
    EventIdConflictError,
    EventWrite,
    InvalidArgumentError,
    Message,
    MessageWrite,
    Role,
    SessionNotFoundError,
    Store,
    UnknownUserError,
    User,
)
from convostore.testing.helpers import (
    ALICE,
    BOB,
    CAROL,
    contents,
    event,
    new_session,
    say,
    snapshot,
)

DAVE = User("dave", "Dave")


async def test_seq_is_consecutive_from_one(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("a"))
    await store.append_event(session.id, event())
    assert await store.append_events(session.id, [say("b"), event(), say("c")], 2)
    await store.add_message(session.id, say("d"))
    assert await store.append_events(session.id, [event()], 4)
    stored = await store.read(session.id)
    assert [e.seq for e in stored] == list(range(1, 8))
    assert contents(stored) == ["a", "APP.EVENT", "b", "APP.EVENT", "c", "d", "APP.EVENT"]


async def test_version_counts_appends_and_batches(store: Store) -> None:
    assert await store.version("unknown") == 0
    session = await new_session(store)
    assert await store.version(session.id) == 0
    await store.add_message(session.id, say("a"))
    assert await store.version(session.id) == 1
    await store.append_event(session.id, event())
    assert await store.version(session.id) == 2
    assert await store.append_events(session.id, [say(str(i)) for i in range(10)], 2)
    assert await store.version(session.id) == 3
    assert await store.append_events(session.id, [event()], 3)
    assert await store.version(session.id) == 4
    assert len(await store.read(session.id)) == 13
    current = await store.get_session(session.id)
    assert current is not None
    assert current.version == 4


async def test_returned_events_are_the_stored_events(store: Store) -> None:
    session = await new_session(store)
    message = await store.add_message(session.id, say("a", author=ALICE))
    other = await store.append_event(session.id, event("APP.X", {"k": 1}))
    assert (message.seq, other.seq) == (1, 2)
    assert (message.session_id, other.session_id) == (session.id, session.id)
    assert await store.read(session.id) == [message, other]


async def test_retried_append_returns_the_stored_event_and_writes_nothing(store: Store) -> None:
    session = await new_session(store)
    first = await store.add_message(session.id, say("original", author=ALICE, id="m-1"))
    await store.add_message(session.id, say("next"))
    before = await snapshot(store, session.id)
    retried = await store.add_message(session.id, say("changed", author=BOB, id="m-1"))
    assert retried == first
    assert await snapshot(store, session.id) == before
    assert await store.get_user(BOB.id) is None
    again = await store.append_event(session.id, say("again", Role.ASSISTANT, id="m-1"))
    assert again == first
    assert await snapshot(store, session.id) == before


async def test_retried_event_write_returns_the_stored_event(store: Store) -> None:
    session = await new_session(store)
    first = await store.append_event(session.id, event("APP.X", {"n": 1}, id="e-1"))
    before = await snapshot(store, session.id)
    assert await store.append_event(session.id, event("APP.Y", {"n": 2}, id="e-1")) == first
    assert await snapshot(store, session.id) == before


async def test_append_says_whether_this_call_wrote_the_event(store: Store) -> None:
    session = await new_session(store)
    written = await store.append(session.id, say("original", author=ALICE, id="m-1"))
    assert isinstance(written, Appended)
    assert written.applied is True
    assert written.event.seq == 1
    assert await store.read(session.id) == [written.event]
    before = await snapshot(store, session.id)
    replayed = await store.append(session.id, say("changed", author=BOB, id="m-1"))
    assert replayed == Appended(written.event, applied=False)
    assert await snapshot(store, session.id) == before
    plain = await store.append(session.id, event("APP.X", {"n": 1}))
    assert plain.applied is True
    assert plain.event.seq == 2
    assert await store.version(session.id) == 2


async def test_append_of_an_unknown_session_raises_and_creates_nothing(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.append("no-such-session", say("x"))
    assert await store.get_session("no-such-session") is None


async def test_event_id_of_another_session_conflicts(store: Store) -> None:
    first = await new_session(store)
    second = await new_session(store)
    await store.add_message(first.id, say("x", id="shared"))
    first_before = await snapshot(store, first.id)
    second_before = await snapshot(store, second.id)
    with pytest.raises(EventIdConflictError) as caught:
        await store.add_message(second.id, say("y", id="shared"))
    assert isinstance(caught.value, ConflictError)
    with pytest.raises(EventIdConflictError):
        await store.append_event(second.id, event(id="shared"))
    with pytest.raises(EventIdConflictError):
        await store.append_events(second.id, [say("ok"), say("y", id="shared")], 0)
    assert await snapshot(store, first.id) == first_before
    assert await snapshot(store, second.id) == second_before


async def test_batch_with_an_id_already_in_this_log_conflicts(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("x", id="m-1"))
    before = await snapshot(store, session.id)
    with pytest.raises(EventIdConflictError):
        await store.append_events(session.id, [say("new"), say("x", id="m-1")], 1)
    assert await snapshot(store, session.id) == before


async def test_a_refused_batch_inserts_none_of_its_users(store: Store) -> None:
    mine = await new_session(store)
    other = await new_session(store, BOB)
    await store.add_message(other.id, say("taken", id="taken"))
    newcomer = User("newcomer", "Newcomer")
    with pytest.raises(EventIdConflictError):
        await store.append_events(
            mine.id, [say("first", author=newcomer), say("clash", id="taken")], 0
        )
    assert await store.read(mine.id) == []
    assert await store.version(mine.id) == 0
    assert await store.get_user("newcomer") is None
    assert await store.participants(mine.id) == []


async def test_batch_giving_an_id_twice_conflicts(store: Store) -> None:
    session = await new_session(store)
    before = await snapshot(store, session.id)
    with pytest.raises(EventIdConflictError):
        await store.append_events(session.id, [say("a", id="twice"), event(id="twice")], 0)
    assert await snapshot(store, session.id) == before


async def test_batch_is_all_or_nothing_on_an_unknown_user(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("first"))
    before = await snapshot(store, session.id)
    batch: list[MessageWrite | EventWrite] = [
        say("by a new user", author=DAVE, recipients=[CAROL]),
        event("APP.X"),
        say("by nobody known", author="ghost"),
    ]
    with pytest.raises(UnknownUserError):
        await store.append_events(session.id, batch, 1)
    assert await snapshot(store, session.id) == before
    assert await store.get_user(DAVE.id) is None
    assert await store.get_user(CAROL.id) is None


@pytest.mark.parametrize(
    "bad",
    [
        EventWrite(type="lower"),
        EventWrite(type="MESSAGE"),
        EventWrite(type=COMPACTION, payload={"no": "kept ids"}),
        EventWrite(type="APP", payload={"nan": float("nan")}),
        MessageWrite(role="robot", content="x"),
    ],
    ids=["lower", "MESSAGE", "COMPACTION-without-kept", "nan-payload", "role"],
)
async def test_batch_is_all_or_nothing_on_an_invalid_write(
    store: Store, bad: MessageWrite | EventWrite
) -> None:
    session = await new_session(store)
    before = await snapshot(store, session.id)
    with pytest.raises(InvalidArgumentError):
        await store.append_events(session.id, [say("ok", author=DAVE), bad], 0)
    assert await snapshot(store, session.id) == before
    assert await store.get_user(DAVE.id) is None


@pytest.mark.parametrize("expected", [0, 1, 3, 100])
async def test_stale_expected_version_writes_nothing(store: Store, expected: int) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("a"))
    await store.add_message(session.id, say("b"))
    before = await snapshot(store, session.id)
    assert await store.append_events(session.id, [say("c", author=DAVE)], expected) is False
    assert await snapshot(store, session.id) == before
    assert await store.get_user(DAVE.id) is None
    assert await store.append_events(session.id, [say("c")], 2) is True


async def test_empty_batch_reports_whether_the_version_is_current(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("a"))
    assert await store.append_events(session.id, [], 1) is True
    assert await store.append_events(session.id, [], 0) is False
    assert len(await store.read(session.id)) == 1


async def test_appends_to_an_unknown_session_create_nothing(store: Store) -> None:
    attempts = [
        store.add_message("missing", say("x", author=DAVE)),
        store.append_event("missing", event()),
        store.append_events("missing", [say("x", author=DAVE)], 0),
        store.append_events("missing", [say("x")], 5),
    ]
    for attempt in attempts:
        with pytest.raises(SessionNotFoundError) as caught:
            await attempt
        assert isinstance(caught.value, LookupError)
    assert await store.get_session("missing") is None
    assert await store.version("missing") == 0
    assert await store.read("missing") == []
    assert await store.get_user(DAVE.id) is None


async def test_appends_to_a_deleted_session_are_refused(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("x"))
    await store.delete_session(session.id)
    with pytest.raises(SessionNotFoundError):
        await store.add_message(session.id, say("y"))
    assert await store.get_session(session.id) is None
    assert await store.read(session.id) == []


@pytest.mark.parametrize(
    "event_type",
    ["lower", "1ABC", "A" * 65, "", "A B", "A-B", "Ünï", "_A", ".A", "MESSAGE"],
)
async def test_invalid_event_types_are_refused(store: Store, event_type: str) -> None:
    session = await new_session(store)
    with pytest.raises(InvalidArgumentError) as caught:
        await store.append_event(session.id, EventWrite(type=event_type))
    assert isinstance(caught.value, ValueError)
    assert await store.read(session.id) == []
    assert await store.version(session.id) == 0


@pytest.mark.parametrize("event_type", ["TOOL.RESULT", "X", "A" * 64, "A1_.Z9", "APP_EVENT.V2"])
async def test_app_event_types_are_accepted(store: Store, event_type: str) -> None:
    session = await new_session(store)
    written = await store.append_event(session.id, EventWrite(type=event_type, payload=[1]))
    assert written.type == event_type
    (stored,) = await store.read(session.id)
    assert stored.type == event_type
    assert not isinstance(stored, Message)


async def test_add_message_takes_only_message_writes(store: Store) -> None:
    session = await new_session(store)
    with pytest.raises(InvalidArgumentError):
        await store.add_message(session.id, event())  # type: ignore[arg-type]
    assert await store.read(session.id) == []


async def test_import_keeps_created_at_and_seq_order_wins(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("now"))
    old = datetime(2001, 2, 3, 4, 5, 6, 7, tzinfo=UTC)
    imported = await store.add_message(session.id, say("imported", created_at=old))
    await store.append_event(session.id, event("APP.X", created_at=old))
    assert imported.created_at == old
    stored = await store.read(session.id)
    assert contents(stored) == ["now", "imported", "APP.X"]
    assert [e.created_at for e in stored[1:]] == [old, old]
    assert [m.content for m in await store.messages(session.id, last=1)] == ["imported"]
    assert [m.content for m in await store.messages(session.id)] == ["now", "imported"]


async def test_batch_events_read_back_in_batch_order(store: Store) -> None:
    session = await new_session(store)
    writes: list[MessageWrite | EventWrite] = []
    for i in range(30):
        writes.append(say(f"m{i}") if i % 3 else event("APP.X", {"i": i}))
    assert await store.append_events(session.id, writes, 0)
    stored = await store.read(session.id)
    assert [e.seq for e in stored] == list(range(1, 31))
    assert contents(stored) == [f"m{i}" if i % 3 else "APP.X" for i in range(30)]


async def test_versions_and_logs_are_per_session(store: Store) -> None:
    first = await new_session(store)
    second = await new_session(store)
    await store.add_message(first.id, say("a"))
    await store.add_message(first.id, say("b"))
    message = await store.add_message(second.id, say("c"))
    assert message.seq == 1
    assert await store.version(first.id) == 2
    assert await store.version(second.id) == 1
    assert await store.append_events(second.id, [say("d")], 1)
    assert contents(await store.read(first.id)) == ["a", "b"]


async def test_retry_of_an_event_first_written_in_a_batch(store: Store) -> None:
    session = await new_session(store)
    assert await store.append_events(session.id, [say("a", id="b-1"), event(id="b-2")], 0)
    before = await snapshot(store, session.id)
    retried = await store.append_event(session.id, say("a again", id="b-1"))
    assert retried == before.events[0]
    assert await store.append_event(session.id, event(id="b-2")) == before.events[1]
    assert await snapshot(store, session.id) == before
