"""Parts (side conversations inside a thread) and participants."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from convostore import (
    InvalidArgumentError,
    Role,
    SessionFilter,
    SessionNotFoundError,
    Store,
    UnknownUserError,
    User,
)
from convostore.testing.helpers import AGENT, ALICE, BOB, CAROL, event, new_session, say

HELPER_2 = User("agent-2", "Second agent", kind="agent")


async def test_part_of_a_missing_session_is_refused_and_writes_nothing(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.create_session(ALICE, session_id="p", part_of="missing", held_with=AGENT)
    assert await store.get_session("p") is None
    assert await store.get_user(ALICE.id) is None
    assert await store.get_user(AGENT.id) is None
    with pytest.raises(SessionNotFoundError):
        await store.find_or_create_part("missing", AGENT)
    assert await store.get_user(AGENT.id) is None
    assert await store.count_sessions(ALICE.id, SessionFilter(include_parts=True)) == 0


async def test_nested_parts_are_refused(store: Store) -> None:
    parent = await new_session(store)
    part = await store.find_or_create_part(parent.id, AGENT)
    with pytest.raises(InvalidArgumentError) as caught:
        await store.create_session(ALICE, session_id="nested", part_of=part.id, held_with=BOB)
    assert isinstance(caught.value, ValueError)
    assert await store.get_session("nested") is None
    assert await store.get_user(BOB.id) is None
    with pytest.raises(ValueError):  # noqa: PT011
        await store.find_or_create_part(part.id, BOB)
    assert await store.list_parts(part.id) == []
    assert await store.count_sessions(ALICE.id, SessionFilter(include_parts=True)) == 2


async def test_part_of_another_owners_session_is_refused(store: Store) -> None:
    bobs = await new_session(store, BOB)
    await store.put_user(ALICE)
    with pytest.raises(InvalidArgumentError) as caught:
        await store.create_session("alice", session_id="p", part_of=bobs.id, held_with=AGENT)
    assert isinstance(caught.value, ValueError)
    assert await store.get_session("p") is None
    assert await store.get_user(AGENT.id) is None
    assert await store.list_parts(bobs.id) == []
    assert await store.count_sessions(ALICE.id, SessionFilter(include_parts=True)) == 0


async def test_find_or_create_part(store: Store) -> None:
    parent = await new_session(store, title="thread")
    assert await store.find_part(parent.id, AGENT) is None
    part = await store.find_or_create_part(parent.id, AGENT, title="side", kind="research")
    assert part.owner_id == ALICE.id
    assert part.part_of == parent.id
    assert part.held_with == AGENT.id
    assert (part.title, part.kind) == ("side", "research")
    assert await store.get_user(AGENT.id) == AGENT
    assert await store.get_session(part.id) == part
    assert await store.find_part(parent.id, AGENT) == part
    assert await store.find_part(parent.id, AGENT.id) == part
    again = await store.find_or_create_part(parent.id, AGENT, title="ignored")
    assert again == part
    other = await store.find_or_create_part(parent.id, HELPER_2)
    assert other.id != part.id
    assert await store.find_part(parent.id, HELPER_2) == other
    assert [s.session.id for s in await store.list_parts(parent.id)] == [part.id, other.id]


async def test_part_is_owned_by_the_parents_owner(store: Store) -> None:
    parent = await new_session(store, BOB)
    part = await store.find_or_create_part(parent.id, ALICE)
    assert part.owner_id == BOB.id
    assert part.held_with == ALICE.id


async def test_find_or_create_part_with_an_unknown_user_id(store: Store) -> None:
    parent = await new_session(store)
    with pytest.raises(UnknownUserError):
        await store.find_or_create_part(parent.id, "ghost")
    assert await store.list_parts(parent.id) == []


async def test_find_part_gives_the_earliest(store: Store) -> None:
    parent = await new_session(store)
    first = await store.create_session(ALICE, part_of=parent.id, held_with=AGENT, title="1")
    second = await store.create_session(ALICE, part_of=parent.id, held_with=AGENT, title="2")
    assert first.id < second.id
    assert await store.find_part(parent.id, AGENT) == first
    assert await store.find_or_create_part(parent.id, AGENT) == first
    assert [s.session for s in await store.list_parts(parent.id)] == [first, second]


async def test_concurrent_find_or_create_part_settles_on_one(store: Store) -> None:
    parent = await new_session(store)
    parts = await asyncio.gather(*(store.find_or_create_part(parent.id, AGENT) for _ in range(8)))
    assert len({p.id for p in parts}) == 1
    assert len(await store.list_parts(parent.id)) == 1


async def test_list_parts_with_summaries_oldest_first(store: Store) -> None:
    parent = await new_session(store)
    first = await store.find_or_create_part(parent.id, AGENT)
    second = await store.find_or_create_part(parent.id, HELPER_2)
    await store.add_message(second.id, say("q", author=CAROL))
    await store.add_message(second.id, say("a", Role.ASSISTANT, author=HELPER_2))
    await store.add_message(second.id, say("s", Role.SYSTEM, synthetic=True))
    summaries = await store.list_parts(parent.id)
    assert [s.session for s in summaries] == [
        await store.get_session(first.id),
        await store.get_session(second.id),
    ]
    assert [s.owner for s in summaries] == [ALICE, ALICE]
    assert [s.message_count for s in summaries] == [0, 2]
    assert [s.started_by for s in summaries] == [None, CAROL]


async def test_list_parts_of_unknown_or_partless_session(store: Store) -> None:
    assert await store.list_parts("missing") == []
    assert await store.list_parts((await new_session(store)).id) == []


async def test_participants_once_each_in_order_of_first_message(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("system", Role.SYSTEM))
    await store.add_message(session.id, say("1", author=BOB, recipients=[CAROL, AGENT]))
    await store.append_event(session.id, event("APP.EVENT"))
    await store.add_message(session.id, say("2", Role.ASSISTANT, author=AGENT, recipients=[BOB]))
    await store.add_message(session.id, say("3", author=BOB))
    await store.add_message(session.id, say("4", author=ALICE))
    await store.add_message(session.id, say("5", Role.ASSISTANT, author=AGENT))
    assert await store.participants(session.id) == [BOB, AGENT, ALICE]


async def test_participants_follow_log_order_not_timestamps(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("1", author=CAROL))
    await store.add_message(
        session.id, say("old import", author=BOB, created_at=datetime(2001, 1, 1, tzinfo=UTC))
    )
    assert await store.participants(session.id) == [CAROL, BOB]


async def test_participants_of_unknown_or_silent_session(store: Store) -> None:
    assert await store.participants("missing") == []
    session = await new_session(store)
    await store.add_message(session.id, say("nobody", recipients=[BOB]))
    assert await store.participants(session.id) == []
