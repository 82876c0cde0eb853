"""Conversations on every backend: creating, reusing and loading them, embedding
failures, the sync facade, and the in-memory factory."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

import convostore
import convostore.conversation
import convostore.sync
from convostore import (
    AssistantMessage,
    ConversationEvent,
    ConversationFactory,
    EmbeddingFailed,
    InMemoryConversation,
    InMemoryConversationFactory,
    InvalidArgumentError,
    MessageEvent,
    MessageStatus,
    MessageWrite,
    Role,
    SessionExistsError,
    SessionNotFoundError,
    Store,
    StoreClosedError,
    StoredConversation,
    StoreError,
    User,
    UserMessage,
)
from convostore.embedding import HashingEmbedder
from convostore.sync import SyncProxy
from convostore.testing.contract.conversations import (  # *_fixture: fixtures, used by name
    Recorder,
    chat_fixture,  # noqa: F401
    factory_fixture,  # noqa: F401
    held_fixture,  # noqa: F401
    ids,
    recorder_fixture,  # noqa: F401
)
from convostore.testing.fixtures import BackendUnderTest, StoreFactory
from convostore.testing.helpers import AGENT, ALICE, BOB

# ------------------------------------------------------------------------ create, reuse, load


async def test_create_for_participants_creates_the_one_to_one_session(
    store: Store, factory: ConversationFactory
) -> None:
    chat = await factory.create_for_participants("s-1", ALICE, AGENT, title="Help")
    assert (chat.session_id, chat.user_id, chat.agent_id, chat.title) == (
        "s-1",
        ALICE.id,
        AGENT.id,
        "Help",
    )
    session = await store.get_session("s-1")
    assert session is not None
    assert (session.owner_id, session.held_with, session.title) == (ALICE.id, AGENT.id, "Help")
    assert chat.session == session


async def test_create_for_participants_reuses_the_users_session_with_its_messages(
    store: Store, factory: ConversationFactory
) -> None:
    first = await factory.create_for_participants("s-1", ALICE, AGENT)
    first.add(UserMessage("hello"))
    first.add(AssistantMessage("hi"))
    await first.flush()

    assert await factory.create_for_participants("s-1", ALICE.id, AGENT.id) is first

    elsewhere = ConversationFactory(store)
    reused = await elsewhere.create_for_participants("s-1", ALICE, AGENT)
    assert reused is not first
    assert reused.messages == first.messages
    reused.add(UserMessage("still there?"))
    await reused.flush()
    stored = await store.messages("s-1")
    assert [m.content for m in stored] == ["hello", "hi", "still there?"]
    assert (stored[2].author_id, stored[2].recipient_ids) == (ALICE.id, (AGENT.id,))
    await elsewhere.close()


async def test_create_for_participants_refuses_another_owners_session(
    store: Store, factory: ConversationFactory
) -> None:
    await factory.create_for_participants("s-1", ALICE, AGENT)
    with pytest.raises(ValueError, match="s-1"):
        await factory.create_for_participants("s-1", BOB, AGENT)
    helper = User("agent-2", "Other agent", kind="agent")
    with pytest.raises(ValueError, match="agent"):
        await factory.create_for_participants("s-1", ALICE, helper)
    session = await store.get_session("s-1")
    assert session is not None
    assert (session.owner_id, session.held_with) == (ALICE.id, AGENT.id)


async def test_create_with_an_existing_id_raises(factory: ConversationFactory) -> None:
    await factory.create("s-1", owner=ALICE)
    with pytest.raises(SessionExistsError):
        await factory.create("s-1", owner=BOB)


async def test_load_reads_the_messages_and_participants(
    store: Store, factory: ConversationFactory
) -> None:
    session = await store.create_session(ALICE, title="Stored", held_with=AGENT)
    await store.add_message(session.id, MessageWrite(Role.USER, "q", author=ALICE))
    await store.add_message(session.id, MessageWrite(Role.ASSISTANT, "a", author=AGENT))

    chat = await factory.load(session.id)
    assert [m.content for m in chat.messages] == ["q", "a"]
    assert (chat.user_id, chat.agent_id, chat.title) == (ALICE.id, AGENT.id, "Stored")
    assert await factory.load(session.id) is chat

    chat.add(AssistantMessage("more"))
    await chat.flush()
    stored = await store.messages(session.id)
    assert chat.messages == stored
    assert (stored[2].author_id, stored[2].recipient_ids) == (AGENT.id, (ALICE.id,))


async def test_load_of_an_unknown_session_raises(factory: ConversationFactory) -> None:
    with pytest.raises(SessionNotFoundError):
        await factory.load("no-such-session")


# ------------------------------------------------------------------------ embeddings


class BrokenEmbedder(HashingEmbedder):
    async def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        raise ConnectionError("embedding service down")


async def test_embedding_failures_of_its_sessions_are_republished(
    connect_store: StoreFactory,
) -> None:
    store = await connect_store(embedder=BrokenEmbedder(8))
    factory = ConversationFactory(store)
    recorder = Recorder()
    factory.subscribe(recorder)
    chat = await factory.create_for_participants(None, ALICE, AGENT)
    message_id = chat.add(UserMessage("embed me"))
    await chat.flush()

    failures = [e for e in recorder.events if isinstance(e, EmbeddingFailed)]
    assert [(f.session_id, f.message_id) for f in failures] == [(chat.session_id, message_id)]
    assert isinstance(failures[0].cause, ConnectionError)
    assert recorder.of(message_id) == ["added", "persisted", "written"]
    await factory.close()


# ------------------------------------------------------------------------ sync facade


def test_the_sync_facade_drives_a_conversation(backend: BackendUnderTest) -> None:
    recorder = Recorder()
    listener_threads: set[int] = set()

    def listen(event: ConversationEvent) -> None:
        listener_threads.add(threading.get_ident())
        recorder(event)

    with convostore.sync.connect(backend()) as store:
        factory = ConversationFactory.for_sync_store(store)
        factory.subscribe(listen)
        chat = factory.create_for_participants(None, ALICE, AGENT)
        assert isinstance(chat, SyncProxy)
        assert isinstance(chat.target, StoredConversation)

        first = chat.add(UserMessage("hello"))
        # ADDED was published before add returned; the write runs on the loop meanwhile.
        assert recorder.of(first)[:1] == ["added"]
        assert ids(chat.messages) == [first]
        second = chat.add(AssistantMessage("hi"))
        chat.flush()
        assert [m.seq for m in chat.messages] == [1, 2]
        assert ids(store.messages(chat.session_id)) == [first, second]
        assert factory.load(chat.session_id).target is chat.target
        last = chat.add(UserMessage("bye"))
        session_id = chat.session_id

    assert recorder.of(last) == ["added", "persisted", "written"]
    assert threading.get_ident() not in listener_threads
    conversation = chat.target
    assert conversation.session_id == session_id
    assert [m.seq for m in conversation.messages] == [1, 2, 3]


# ------------------------------------------------------------------------ in memory


async def test_the_in_memory_factory_has_the_same_api_and_semantics() -> None:
    async with InMemoryConversationFactory(title_every=1) as factory:
        recorder = Recorder()
        factory.subscribe(recorder)
        chat = await factory.create_for_participants("s-1", ALICE, AGENT)
        assert isinstance(chat, InMemoryConversation)
        assert isinstance(chat, StoredConversation)
        message_id = chat.add(UserMessage("hello there"))
        assert chat.title == "hello there"
        await chat.flush()
        assert recorder.of(message_id) == ["added", "persisted", "written"]
        assert await factory.load("s-1") is chat
        assert await factory.store.messages("s-1") == chat.messages
        with pytest.raises(ValueError, match="s-1"):
            await factory.create_for_participants("s-1", BOB, AGENT)
    assert chat.closed


async def test_the_in_memory_factory_opens_its_store_at_first_use() -> None:
    factory = InMemoryConversationFactory()
    with pytest.raises(StoreError, match="first use"):
        _ = factory.store
    chat = await factory.create(owner=ALICE)
    assert factory.store.capabilities.persistent is False
    assert await factory.store.get_session(chat.session_id) == chat.session
    await factory.close()
    assert chat.closed
    with pytest.raises(StoreClosedError, match="closed"):
        await factory.create(owner=ALICE)


async def test_an_in_memory_factory_closed_unused_opens_nothing() -> None:
    factory = InMemoryConversationFactory()
    await factory.close()
    with pytest.raises(StoreClosedError, match="closed"):
        await factory.load("s-1")
    with pytest.raises(StoreError, match="first use"):
        _ = factory.store


def test_factories_take_async_stores_only(backend: BackendUnderTest) -> None:
    with convostore.sync.connect(backend()) as store:
        with pytest.raises(InvalidArgumentError, match="for_sync_store"):
            ConversationFactory(store)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="title_every"):
            ConversationFactory(store.target, title_every=0)


def test_a_sync_facade_reads_a_sessions_events_as_a_plain_iterator(
    backend: BackendUnderTest,
) -> None:
    with convostore.sync.connect(backend()) as store:
        factory = ConversationFactory.for_sync_store(store)
        chat = factory.create_for_participants(None, ALICE, AGENT)
        events = factory.events(chat.session_id)
        first = chat.add(UserMessage("hello"))
        chat.flush()
        heard = [next(events) for _ in range(3)]

    assert [type(e).__name__ for e in heard] == ["MessageEvent", "MessageEvent", "MessagePersisted"]
    assert [e.status for e in heard if isinstance(e, MessageEvent)] == [
        MessageStatus.ADDED,
        MessageStatus.PERSISTED,
    ]
    assert all(
        (e.message.id if isinstance(e, MessageEvent) else e.message_id) == first for e in heard
    )
