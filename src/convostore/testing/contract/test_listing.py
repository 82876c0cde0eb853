"""Listings: keyset paging in both orders, cursors, filters, counts and summaries."""

from __future__ import annotations

import base64
import itertools
import json
import random

import pytest

from convostore import (
    InvalidArgumentError,
    InvalidCursorError,
    PageRequest,
    Role,
    Session,
    SessionFilter,
    SessionOrder,
    Store,
    User,
)
from convostore.testing.helpers import (
    AGENT,
    ALICE,
    BOB,
    CAROL,
    T0,
    event,
    flatten,
    freeze_store_clock,
    new_session,
    say,
    sort_key,
    walk_sessions,
    walk_summaries,
)

ORDERS = list(SessionOrder)


async def many_sessions(store: Store, count: int, owner: str = "alice") -> list[Session]:
    """``count`` sessions, with activity in a shuffled order (seeded), so that the
    activity order differs from the creation order."""
    await store.put_user(ALICE)
    sessions = [await store.create_session(owner, title=f"s{i}") for i in range(count)]
    for index in random.Random(7).sample(range(count), count // 2):
        await store.add_message(sessions[index].id, say(f"to {index}"))
    return [s for s in [await store.get_session(s.id) for s in sessions] if s is not None]


def expected_order(sessions: list[Session], order: SessionOrder) -> list[str]:
    return [s.id for s in sorted(sessions, key=lambda s: sort_key(order, s), reverse=True)]


@pytest.mark.parametrize("order", ORDERS)
async def test_walk_visits_every_session_once_in_order(store: Store, order: SessionOrder) -> None:
    sessions = await many_sessions(store, 45)
    pages = await walk_sessions(store, ALICE.id, order, 10)
    assert [len(page) for page in pages] == [10, 10, 10, 10, 5]
    listed = flatten(pages)
    assert [s.id for s in listed] == expected_order(sessions, order)
    keys = [sort_key(order, s) for s in listed]
    assert all(a > b for a, b in itertools.pairwise(keys))
    assert {s.id: s for s in listed} == {s.id: s for s in sessions}


async def test_created_order_is_id_descending(store: Store) -> None:
    sessions = [await new_session(store) for _ in range(5)]
    page = await store.list_sessions(ALICE.id)
    assert [s.id for s in page.items] == sorted((s.id for s in sessions), reverse=True)
    assert [s.id for s in page.items] == [s.id for s in reversed(sessions)]
    assert page.next_cursor is None


async def test_created_order_follows_ids_not_creation_time(store: Store) -> None:
    await store.put_user(ALICE)
    for session_id in ("b", "d", "a", "c"):
        await store.create_session("alice", session_id=session_id)
    page = await store.list_sessions(ALICE.id)
    assert [s.id for s in page.items] == ["d", "c", "b", "a"]


async def test_last_activity_order_follows_messages(store: Store) -> None:
    first, second, third = [await new_session(store) for _ in range(3)]
    await store.add_message(first.id, say("bump"))
    page = await store.list_sessions(ALICE.id, PageRequest(order=SessionOrder.LAST_ACTIVITY))
    assert [s.id for s in page.items] == [first.id, third.id, second.id]
    await store.add_message(second.id, say("bump", Role.SYSTEM, synthetic=True))
    page = await store.list_sessions(ALICE.id, PageRequest(order=SessionOrder.LAST_ACTIVITY))
    assert [s.id for s in page.items] == [first.id, third.id, second.id]


@pytest.mark.parametrize("size", [1, 7, 10])
async def test_last_activity_ties_break_by_id_across_pages(
    store: Store, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    freeze_store_clock(monkeypatch, T0)
    sessions = [await new_session(store) for _ in range(23)]
    assert {s.last_activity_at for s in sessions} == {T0}
    pages = await walk_sessions(store, ALICE.id, SessionOrder.LAST_ACTIVITY, size)
    listed = [s.id for s in flatten(pages)]
    assert listed == sorted((s.id for s in sessions), reverse=True)


async def test_last_activity_ties_mixed_with_distinct_times(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = []
    for minute in (5, 3, 5, 1, 3, 5, 3, 1):
        freeze_store_clock(monkeypatch, T0.replace(minute=minute))
        sessions.append(await new_session(store))
    monkeypatch.undo()
    listed = flatten(await walk_sessions(store, ALICE.id, SessionOrder.LAST_ACTIVITY, 3))
    assert [s.id for s in listed] == expected_order(sessions, SessionOrder.LAST_ACTIVITY)
    assert [s.last_activity_at.minute for s in listed] == [5, 5, 5, 3, 3, 3, 1, 1]


@pytest.mark.parametrize("order", ORDERS)
async def test_last_page_has_no_cursor_even_when_full(store: Store, order: SessionOrder) -> None:
    await many_sessions(store, 30)
    pages = await walk_sessions(store, ALICE.id, order, 15)
    assert [len(page) for page in pages] == [15, 15]
    single = await store.list_sessions(ALICE.id, PageRequest(30, None, order))
    assert len(single.items) == 30
    assert single.next_cursor is None


async def test_empty_listing(store: Store) -> None:
    page = await store.list_sessions("nobody")
    assert page.items == []
    assert page.next_cursor is None
    assert await store.count_sessions("nobody") == 0


@pytest.mark.parametrize("order", ORDERS)
async def test_paging_is_keyset_not_offset(store: Store, order: SessionOrder) -> None:
    sessions = await many_sessions(store, 30)
    expected = expected_order(sessions, order)
    first = await store.list_sessions(ALICE.id, PageRequest(10, None, order))
    assert [s.id for s in first.items] == expected[:10]
    # Rows deleted before the cursor, or added ahead of it, do not shift the next page.
    assert await store.delete_session(first.items[-1].id)
    assert await store.delete_session(first.items[0].id)
    await new_session(store)
    second = await store.list_sessions(ALICE.id, PageRequest(10, first.next_cursor, order))
    assert [s.id for s in second.items] == expected[10:20]


@pytest.mark.parametrize("order", ORDERS)
async def test_cursor_of_one_order_is_refused_under_the_other(
    store: Store, order: SessionOrder
) -> None:
    await many_sessions(store, 5)
    page = await store.list_sessions(ALICE.id, PageRequest(2, None, order))
    assert page.next_cursor is not None
    other = next(o for o in SessionOrder if o is not order)
    with pytest.raises(InvalidCursorError) as caught:
        await store.list_sessions(ALICE.id, PageRequest(2, page.next_cursor, other))
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == "invalid session cursor"
    assert caught.value.__cause__ is not None
    with pytest.raises(InvalidCursorError):
        await store.list_summaries(ALICE.id, PageRequest(2, page.next_cursor, other))


def _b64(document: object) -> str:
    raw = json.dumps(document).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


BAD_CURSORS = [
    "",
    "   ",
    "\n",
    "not a cursor!",
    "%%%%",
    "eyJ2Ijox",
    _b64([1, 2]),
    _b64({"v": 2, "o": "created", "id": "x"}),
    _b64({"o": "created", "id": "x"}),
    _b64({"v": 1, "o": "sideways", "id": "x"}),
    _b64({"v": 1, "o": "created"}),
    _b64({"v": 1, "o": "last_activity", "id": "x"}),
    "A" * 5000,
]


@pytest.mark.parametrize("cursor", BAD_CURSORS)
async def test_bad_cursors_are_refused_with_a_cause(store: Store, cursor: str) -> None:
    await many_sessions(store, 3)
    for order in SessionOrder:
        with pytest.raises(InvalidCursorError) as caught:
            await store.list_sessions(ALICE.id, PageRequest(2, cursor, order))
        assert str(caught.value) == "invalid session cursor"
        assert isinstance(caught.value, ValueError)
        assert isinstance(caught.value, InvalidArgumentError)
        assert caught.value.__cause__ is not None


@pytest.mark.parametrize("size", [0, -1, 101, 1000])
async def test_page_size_out_of_range_is_refused(store: Store, size: int) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await store.list_sessions(ALICE.id, PageRequest(size))
    assert isinstance(caught.value, ValueError)
    with pytest.raises(ValueError):  # noqa: PT011
        await store.list_summaries(ALICE.id, PageRequest(size))


@pytest.mark.parametrize("size", [1, 100])
async def test_page_size_bounds_work(store: Store, size: int) -> None:
    sessions = await many_sessions(store, 101)
    for order in SessionOrder:
        page = await store.list_sessions(ALICE.id, PageRequest(size, None, order))
        assert [s.id for s in page.items] == expected_order(sessions, order)[:size]
        assert page.next_cursor is not None
        summaries = await store.list_summaries(ALICE.id, PageRequest(size, None, order))
        assert [s.session.id for s in summaries.items] == [s.id for s in page.items]


async def test_parts_excluded_unless_asked_for(store: Store) -> None:
    parent = await new_session(store)
    part = await store.find_or_create_part(parent.id, AGENT)
    listed = flatten(await walk_sessions(store, ALICE.id, SessionOrder.CREATED, 10))
    assert [s.id for s in listed] == [parent.id]
    assert await store.count_sessions(ALICE.id) == 1
    with_parts = SessionFilter(include_parts=True)
    listed = flatten(await walk_sessions(store, ALICE.id, SessionOrder.CREATED, 10, with_parts))
    assert {s.id for s in listed} == {parent.id, part.id}
    assert await store.count_sessions(ALICE.id, with_parts) == 2


async def test_kind_filter(store: Store) -> None:
    chats = [await new_session(store) for _ in range(3)]
    tasks = [await new_session(store, kind="task") for _ in range(4)]
    await store.find_or_create_part(tasks[0].id, AGENT, kind="task")
    only_tasks = SessionFilter(kind="task")
    for order in SessionOrder:
        listed = flatten(await walk_sessions(store, ALICE.id, order, 2, only_tasks))
        assert {s.id for s in listed} == {s.id for s in tasks}
        listed = flatten(await walk_sessions(store, ALICE.id, order, 2, SessionFilter("chat")))
        assert {s.id for s in listed} == {s.id for s in chats}
    assert await store.count_sessions(ALICE.id, only_tasks) == 4
    assert await store.count_sessions(ALICE.id, SessionFilter("task", include_parts=True)) == 5
    assert await store.count_sessions(ALICE.id, SessionFilter("nothing")) == 0


async def test_count_always_matches_the_listing(store: Store) -> None:
    parents = [await new_session(store, kind=k) for k in ("chat", "task", "chat", "task", "x")]
    for parent in parents[:3]:
        await store.find_or_create_part(parent.id, AGENT, kind="task")
    await new_session(store, BOB)
    filters = [
        SessionFilter(),
        SessionFilter(include_parts=True),
        SessionFilter(kind="task"),
        SessionFilter(kind="task", include_parts=True),
        SessionFilter(kind="chat", include_parts=True),
        SessionFilter(kind="none"),
    ]
    for filter in filters:
        for order in SessionOrder:
            listed = flatten(await walk_sessions(store, ALICE.id, order, 2, filter))
            assert await store.count_sessions(ALICE.id, filter) == len(listed), filter
            summaries = await walk_summaries(store, ALICE.id, order, 3, filter)
            assert [s.session.id for s in summaries] == [s.id for s in listed]


async def test_another_owners_sessions_never_appear(store: Store) -> None:
    mine = [await new_session(store, ALICE) for _ in range(4)]
    theirs = [await new_session(store, BOB) for _ in range(4)]
    await store.find_or_create_part(theirs[0].id, CAROL)
    await new_session(store, None)
    await new_session(store, AGENT)
    with_parts = SessionFilter(include_parts=True)
    for order in SessionOrder:
        listed = flatten(await walk_sessions(store, ALICE.id, order, 3, with_parts))
        assert sorted(s.id for s in listed) == sorted(s.id for s in mine)
        listed = flatten(await walk_sessions(store, BOB.id, order, 3))
        assert sorted(s.id for s in listed) == sorted(s.id for s in theirs)
    assert await store.count_sessions(ALICE.id, with_parts) == 4
    assert await store.count_sessions(BOB.id, with_parts) == 5


async def test_summaries(store: Store) -> None:
    session = await new_session(store, ALICE)
    await store.add_message(session.id, say("system prompt", Role.SYSTEM))
    await store.add_message(session.id, say("summary", Role.SYSTEM, synthetic=True))
    await store.add_message(session.id, say("hi", author=BOB, recipients=[ALICE]))
    await store.add_message(session.id, say("hello", Role.ASSISTANT, author=AGENT))
    await store.append_event(session.id, say("retry", author=BOB, id="m-1"))
    await store.append_event(session.id, say("retry", author=BOB, id="m-1"))
    await store.append_event(session.id, say("tool out", Role.TOOL))
    await store.append_event(session.id, say("alice", author=ALICE))
    assert await store.append_events(
        session.id, [say("a", Role.ASSISTANT), say("b", author=CAROL)], 7
    )
    await store.append_event(session.id, event("APP.EVENT"))
    empty = await new_session(store, ALICE)
    summaries = await walk_summaries(store, ALICE.id, SessionOrder.CREATED, 10)
    by_id = {s.session.id: s for s in summaries}
    full = by_id[session.id]
    assert full.session == await store.get_session(session.id)
    assert full.owner == ALICE
    assert full.message_count == 8
    assert full.started_by == BOB
    blank = by_id[empty.id]
    assert (blank.owner, blank.message_count, blank.started_by) == (ALICE, 0, None)


async def test_summary_started_by_is_the_first_author_even_in_a_batch(store: Store) -> None:
    session = await new_session(store, ALICE)
    assert await store.append_events(
        session.id, [say("no author"), say("carol", author=CAROL), say("bob", author=BOB)], 0
    )
    await store.add_message(session.id, say("alice", author=ALICE))
    (summary,) = (await store.list_summaries(ALICE.id)).items
    assert summary.started_by == CAROL
    assert summary.message_count == 4


async def test_summary_owner_is_the_stored_user(store: Store) -> None:
    await store.put_user(ALICE)
    session = await new_session(store, "alice")
    await store.put_user(User("alice", "Alice renamed"))
    (summary,) = (await store.list_summaries(ALICE.id)).items
    assert summary.session.id == session.id
    assert summary.owner is not None
    assert summary.owner.display_name == "Alice renamed"
