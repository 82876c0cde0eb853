"""Ids outside the Basic Multilingual Plane through every statement that carries ids:
replays, conflicts, batches, narration, compaction, users."""

from __future__ import annotations

import pytest

from convostore import (
    COMPACTION,
    Appended,
    EventFilter,
    EventIdConflictError,
    EventWrite,
    Message,
    Store,
    User,
)
from convostore.testing.helpers import BOB, contents, event, new_session, say, snapshot

FOUR_BYTE_IDS = ("évènement-🙂-事件", "id-\U0001f600-\U00020000", "🙂")
"""Ids with characters outside the Basic Multilingual Plane (four bytes in UTF-8)."""


@pytest.mark.parametrize("event_id", FOUR_BYTE_IDS)
async def test_a_retried_append_of_a_four_byte_id_returns_the_stored_event(
    store: Store, event_id: str
) -> None:
    session = await new_session(store)
    first = await store.append(session.id, event("APP.X", {"n": 1}, id=event_id))
    assert first.applied is True
    before = await snapshot(store, session.id)
    again = await store.append(session.id, event("APP.Y", {"n": 2}, id=event_id))
    assert again == Appended(first.event, applied=False)
    assert await snapshot(store, session.id) == before
    message = await store.append(session.id, say("m", id=event_id + "-m"))
    assert (await store.append(session.id, say("m2", id=event_id + "-m"))).applied is False
    assert await store.read(session.id) == [first.event, message.event]


@pytest.mark.parametrize("event_id", FOUR_BYTE_IDS)
async def test_four_byte_ids_through_every_id_carrying_write(store: Store, event_id: str) -> None:
    session = await new_session(store)
    other = await new_session(store, BOB)
    batch = [say("a", id=event_id + "-a"), say("b", id=event_id + "-b")]
    assert await store.append_events(session.id, batch, 0)
    assert contents(await store.read(session.id)) == ["a", "b"]
    with pytest.raises(EventIdConflictError):
        await store.append(other.id, say("c", id=event_id + "-a"))
    with pytest.raises(EventIdConflictError):
        await store.append_events(other.id, [say("c", id=event_id + "-b")], 0)
    with pytest.raises(EventIdConflictError):
        await store.append_events(session.id, [say("d", id=event_id + "-a")], 1)
    assert await store.set_narration(session.id, event_id + "-a", "told")
    kept = {"kept_event_ids": [event_id + "-b"]}
    assert await store.append_events(
        session.id, [EventWrite(COMPACTION, kept, synthetic=True, id=event_id + "-c")], 1
    )
    view = await store.read(session.id, EventFilter(active_view=True))
    assert [e.id for e in view] == [event_id + "-b"]
    author = User(event_id + "-user", "Four bytes")
    written = await store.append(other.id, say("by", author=author, recipients=(author,)))
    assert isinstance(written.event, Message)
    assert written.event.author_id == author.id
    assert await store.get_user(author.id) == author
    assert [u.id for u in await store.participants(other.id)] == [author.id]
