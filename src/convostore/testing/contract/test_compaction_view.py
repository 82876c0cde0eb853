"""Compaction as written by `append_events`, and the active view it defines."""

from __future__ import annotations

from collections.abc import Sequence

from convostore import (
    COMPACTION,
    EventFilter,
    EventWrite,
    MessageWrite,
    Role,
    Store,
)
from convostore.testing.helpers import append_all, contents, event, new_session, say


def compaction(kept_ids: Sequence[str], *summaries: str) -> list[MessageWrite | EventWrite]:
    """A compaction batch: the boundary, then one synthetic summary per text."""
    return [
        EventWrite(type=COMPACTION, payload={"kept_event_ids": list(kept_ids)}, synthetic=True),
        *(MessageWrite(role=Role.SYSTEM, content=text, synthetic=True) for text in summaries),
    ]


ACTIVE = EventFilter(active_view=True)


async def six_messages(store: Store, session_id: str) -> list[str]:
    """u1 a1 u2 a2 u3 a3; returns their ids."""
    log = await append_all(
        store,
        session_id,
        [
            say("u1"),
            say("a1", Role.ASSISTANT),
            say("u2"),
            say("a2", Role.ASSISTANT),
            say("u3"),
            say("a3", Role.ASSISTANT),
        ],
    )
    return [e.id for e in log]


async def test_active_view_is_summaries_then_kept_then_later(store: Store) -> None:
    session = await new_session(store)
    ids = await six_messages(store, session.id)
    assert await store.append_events(session.id, compaction([ids[5], ids[4]], "S1"), 6)
    await append_all(store, session.id, [say("u4"), say("a4", Role.ASSISTANT)])
    assert contents(await store.read(session.id, ACTIVE)) == ["S1", "u3", "a3", "u4", "a4"]
    full = await store.read(session.id)
    assert contents(full) == [
        *("u1", "a1", "u2", "a2", "u3", "a3"),
        COMPACTION,
        "S1",
        "u4",
        "a4",
    ]
    assert [e.seq for e in full] == list(range(1, 11))
    assert [e.synthetic for e in full][6:8] == [True, True]
    assert await store.version(session.id) == 9


async def test_kept_events_read_in_log_order_wherever_they_are(store: Store) -> None:
    session = await new_session(store)
    ids = await six_messages(store, session.id)
    note = await store.append_event(session.id, event("APP.NOTE"))
    kept = [note.id, ids[3], ids[0]]
    assert await store.append_events(session.id, compaction(kept, "S1", "S2"), 7)
    view = await store.read(session.id, ACTIVE)
    assert contents(view) == ["S1", "S2", "u1", "a2", "APP.NOTE"]


async def test_compaction_that_keeps_nothing(store: Store) -> None:
    session = await new_session(store)
    await six_messages(store, session.id)
    assert await store.append_events(session.id, compaction([], "all of it"), 6)
    await store.add_message(session.id, say("u4"))
    assert contents(await store.read(session.id, ACTIVE)) == ["all of it", "u4"]


async def test_without_compaction_the_active_view_is_the_log(store: Store) -> None:
    session = await new_session(store)
    await six_messages(store, session.id)
    await store.append_event(session.id, event())
    assert await store.read(session.id, ACTIVE) == await store.read(session.id)
    assert await store.read("missing", ACTIVE) == []


async def test_only_the_newest_compaction_applies(store: Store) -> None:
    session = await new_session(store)
    ids = await six_messages(store, session.id)
    assert await store.append_events(session.id, compaction([ids[4], ids[5]], "S1"), 6)
    later = await append_all(store, session.id, [say("u4"), say("a4", Role.ASSISTANT)])
    assert await store.append_events(session.id, compaction([later[1].id, later[0].id], "S2"), 9)
    await store.add_message(session.id, say("u5"))
    assert contents(await store.read(session.id, ACTIVE)) == ["S2", "u4", "a4", "u5"]
    assert len(await store.read(session.id)) == 13


async def test_covered_events_stay_readable(store: Store) -> None:
    session = await new_session(store)
    ids = await six_messages(store, session.id)
    before = await store.read(session.id)
    assert await store.append_events(session.id, compaction([ids[5]], "S1"), 6)
    after = await store.read(session.id)
    assert after[:6] == before
    assert [e.id for e in await store.read(session.id, EventFilter(after_seq=1, limit=2))] == [
        ids[1],
        ids[2],
    ]
    assert [m.content for m in await store.messages(session.id)][:6] == [
        *("u1", "a1", "u2", "a2", "u3", "a3")
    ]


async def test_stale_compaction_writes_nothing(store: Store) -> None:
    session = await new_session(store)
    ids = await six_messages(store, session.id)
    await store.add_message(session.id, say("u4"))
    view = await store.read(session.id, ACTIVE)
    log = await store.read(session.id)
    assert await store.append_events(session.id, compaction([ids[5]], "S1"), 6) is False
    assert await store.read(session.id, ACTIVE) == view
    assert await store.read(session.id) == log
    assert await store.version(session.id) == 7


async def test_compaction_moves_no_activity_and_counts_no_message(store: Store) -> None:
    session = await new_session(store)
    ids = await six_messages(store, session.id)
    before = await store.get_session(session.id)
    assert before is not None
    assert await store.append_events(session.id, compaction([ids[5]], "S1", "S2"), 6)
    after = await store.get_session(session.id)
    assert after is not None
    assert after.last_activity_at == before.last_activity_at
    assert after.version == before.version + 1
    (summary,) = (await store.list_summaries("alice")).items
    assert summary.message_count == 6


async def test_active_view_with_last_and_types(store: Store) -> None:
    session = await new_session(store)
    ids = await six_messages(store, session.id)
    assert await store.append_events(session.id, compaction([ids[4], ids[5]], "S1"), 6)
    await append_all(store, session.id, [say("u4"), event("APP.X"), say("a4", Role.ASSISTANT)])
    view = EventFilter(active_view=True, last=1)
    assert contents(await store.read(session.id, view)) == ["u4", "APP.X", "a4"]
    view = EventFilter(active_view=True, last=4)
    assert contents(await store.read(session.id, view)) == ["u3", "a3", "u4", "APP.X", "a4"]
    view = EventFilter(active_view=True, last=6)
    assert contents(await store.read(session.id, view)) == [
        *("S1", "u3", "a3", "u4", "APP.X", "a4")
    ]
    messages = EventFilter(active_view=True, types=["MESSAGE"])
    assert contents(await store.read(session.id, messages)) == ["S1", "u3", "a3", "u4", "a4"]
    real = EventFilter(active_view=True, types=["MESSAGE"], exclude_synthetic=True, last=3)
    assert contents(await store.read(session.id, real)) == ["u3", "a3", "u4", "a4"]
    app = EventFilter(active_view=True, types=["APP.X"])
    assert contents(await store.read(session.id, app)) == ["APP.X"]
    text = EventFilter(active_view=True, text="U")
    assert contents(await store.read(session.id, text)) == ["u3", "u4"]


async def test_active_view_hides_covered_events_from_every_filter(store: Store) -> None:
    session = await new_session(store)
    ids = await six_messages(store, session.id)
    assert await store.append_events(session.id, compaction([ids[5]], "S1"), 6)
    for extra in (
        EventFilter(active_view=True, text="u1"),
        EventFilter(active_view=True, roles=["user"]),
        EventFilter(active_view=True, after_seq=0, limit=100),
    ):
        found = contents(await store.read(session.id, extra))
        assert not {"u1", "a1", "u2", "a2", "u3"} & set(found), extra
