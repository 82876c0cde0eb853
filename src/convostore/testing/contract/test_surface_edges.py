"""The public surface as a new user meets it: what a repr shows, owners named by a user
or an id, pages that follow their cursor's order, `connect`'s signature, and why a
compaction wrote nothing."""

from __future__ import annotations

import inspect
from urllib.parse import urlsplit

import pytest

import convostore
from convostore import (
    Event,
    InvalidCursorError,
    MessageWrite,
    PageRequest,
    Role,
    SessionFilter,
    SessionOrder,
    Store,
)
from convostore._urls import redacted
from convostore.compaction import CompactionSkipped, TurnCount, TurnWindow
from convostore.embedding import HashingEmbedder
from convostore.testing.fixtures import BackendUnderTest, StoreFactory
from convostore.testing.helpers import ALICE, BOB, new_session, say


async def test_a_message_repr_shows_the_width_of_its_vector_not_the_vector(store: Store) -> None:
    session = await new_session(store)
    vector = [0.123456789] * 384
    message = await store.add_message(
        session.id, say("hello", embedding=vector, embedding_model="m")
    )
    shown = repr(message)
    assert "embedding=<384 floats>" in shown
    assert "0.123" not in shown
    assert "content='hello'" in shown
    assert "embedding_model='m'" in shown
    assert "embedding=None" in repr(await store.add_message(session.id, say("no vector")))
    assert "<384 floats>" in repr(say("x", embedding=vector, embedding_model="m"))


async def test_a_store_repr_names_its_backend_and_url(
    store: Store, backend: BackendUnderTest
) -> None:
    shown = repr(store)
    assert type(store).__name__ in shown
    assert redacted(backend()) in shown
    password = urlsplit(backend()).password
    if password:
        assert password not in shown


def test_a_url_is_shown_without_its_password() -> None:
    assert redacted("postgresql://chat:s3cret@db:5432/app?schema=x") == (
        "postgresql://chat:***@db:5432/app?schema=x"
    )
    assert "s3cret" not in redacted("postgresql://db/app?password=s3cret&sslmode=require")
    assert redacted("sqlite:///chat.db") == "sqlite:///chat.db"
    assert redacted("memory://") == "memory://"


async def test_owners_are_named_by_a_user_or_an_id(store: Store) -> None:
    session = await store.create_session(ALICE, metadata={"n": 1})
    await store.add_message(session.id, say("hi", author=ALICE))
    assert await store.count_sessions(ALICE) == await store.count_sessions(ALICE.id) == 1
    by_user = await store.list_sessions(ALICE)
    assert by_user == await store.list_sessions(ALICE.id)
    assert [s.id for s in by_user.items] == [session.id]
    assert await store.list_summaries(ALICE) == await store.list_summaries(ALICE.id)
    assert await store.count_sessions(BOB, SessionFilter(kind="chat")) == 0
    hits = await store.search("hi", mode="text", owner_id=ALICE)
    assert [hit.message.session_id for hit in hits] == [session.id]
    assert await store.search("hi", mode="text", owner_id=BOB) == []


@pytest.mark.parametrize("order", list(SessionOrder), ids=lambda o: o.value)
async def test_a_page_that_names_no_order_follows_its_cursor(
    store: Store, order: SessionOrder
) -> None:
    for _ in range(5):
        session = await new_session(store)
    # The oldest session is the most recently active one.
    await store.add_message(session.id, say("activity"))
    first = await store.list_sessions(ALICE, PageRequest(size=2, order=order))
    assert first.next_cursor is not None
    following = await store.list_sessions(ALICE, PageRequest(size=2, cursor=first.next_cursor))
    same = await store.list_sessions(
        ALICE, PageRequest(size=2, cursor=first.next_cursor, order=order)
    )
    assert following == same
    summaries = await store.list_summaries(ALICE, PageRequest(size=2, cursor=first.next_cursor))
    assert [s.session for s in summaries.items] == following.items
    other = next(o for o in SessionOrder if o is not order)
    with pytest.raises(InvalidCursorError):
        await store.list_sessions(ALICE, PageRequest(size=2, cursor=first.next_cursor, order=other))
    # Without a cursor and an order, a listing is newest created first.
    assert (await store.list_sessions(ALICE, PageRequest(size=5))) == await store.list_sessions(
        ALICE, PageRequest(size=5, order=SessionOrder.CREATED)
    )


async def test_connect_names_the_embedder_in_its_signature(connect_store: StoreFactory) -> None:
    parameter = inspect.signature(convostore.connect).parameters["embedder"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
    assert parameter.default is None
    store = await connect_store(embedder=HashingEmbedder(16))
    assert store.vector_index is not None
    assert store.vector_index.dimensions == 16


async def _turns(store: Store, session_id: str, count: int) -> None:
    for number in range(count):
        await store.add_message(session_id, MessageWrite(Role.USER, f"question {number}"))
        await store.add_message(session_id, MessageWrite(Role.ASSISTANT, f"answer {number}"))


def _summarize(events: list[Event]) -> str:
    return f"{len(events)} events"


async def test_a_compaction_says_why_it_wrote_nothing(store: Store) -> None:
    session = await new_session(store)
    await _turns(store, session.id, 3)

    not_fired = await store.compact_outcome(session.id, TurnWindow(1), _summarize, TurnCount(10))
    assert (not_fired.result, not_fired.skipped) == (None, CompactionSkipped.TRIGGER_NOT_FIRED)

    nothing = await store.compact_outcome(session.id, TurnWindow(5), _summarize)
    assert (nothing.result, nothing.skipped) == (None, CompactionSkipped.NOTHING_TO_COMPACT)

    async def summarize_while_someone_appends(events: list[Event]) -> str:
        await store.add_message(session.id, say("late question"))
        return "summary"

    raced = await store.compact_outcome(session.id, TurnWindow(1), summarize_while_someone_appends)
    assert (raced.result, raced.skipped) == (None, CompactionSkipped.VERSION_MOVED)
    assert await store.version(session.id) == 7

    done = await store.compact_outcome(session.id, TurnWindow(1), _summarize)
    assert done.skipped is None
    assert done.result is not None
    assert done.result.version == 8 == await store.version(session.id)
