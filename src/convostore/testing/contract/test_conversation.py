"""Conversations on every backend: message values, routing, ordered background
persistence and its lifecycle events, flush and shutdown."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

import convostore
import convostore.conversation
import convostore.sync
from convostore import (
    AssistantMessage,
    ConversationEvent,
    ConversationFactory,
    DataAttachment,
    InMemoryConversationFactory,
    InvalidArgumentError,
    Message,
    MessageEvent,
    MessagePersisted,
    MessageStatus,
    MessageWrite,
    Role,
    SessionNotFoundError,
    Store,
    StoreClosedError,
    StoredConversation,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from convostore.testing.contract.conversations import (  # *_fixture: fixtures, used by name
    LOGGER,
    AddMessage,
    HeldWrites,
    Recorder,
    chat_fixture,  # noqa: F401
    factory_fixture,  # noqa: F401
    held_fixture,  # noqa: F401
    ids,
    let_other_tasks_run,
    recorder_fixture,  # noqa: F401
    wrap_add_message,
)
from convostore.testing.fixtures import StoreFactory
from convostore.testing.helpers import AGENT, ALICE, BOB, CAROL

# ------------------------------------------------------------------------ values

SECTION_4_NAMES = [
    "UserMessage",
    "AssistantMessage",
    "SystemMessage",
    "ToolMessage",
    "ConversationFactory",
    "InMemoryConversationFactory",
    "StoredConversation",
    "InMemoryConversation",
    "MessageEvent",
    "MessageStatus",
    "MessagePersisted",
    "EmbeddingFailed",
]


@pytest.mark.parametrize("name", SECTION_4_NAMES)
def test_conversation_names_come_from_the_package_and_their_module(name: str) -> None:
    assert getattr(convostore, name) is getattr(convostore.conversation, name)
    assert name in convostore.__all__
    assert name in convostore.conversation.__all__


def test_message_values_hold_tuples_and_refuse_wrong_types() -> None:
    call = ToolCall("t1", "search", {"q": "x"})
    message = AssistantMessage("looking", tool_calls=[call])
    assert message.tool_calls == (call,)
    assert UserMessage("hi").attachments == ()
    assert hash(UserMessage("hi")) == hash(UserMessage("hi"))
    with pytest.raises(ValueError, match="content"):
        UserMessage(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tool_calls"):
        AssistantMessage("x", tool_calls=["t1"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="tool_call_id"):
        ToolMessage("result", " ")


# ------------------------------------------------------------------------ routing


async def test_add_routes_by_role_in_a_one_to_one_chat(
    store: Store, chat: StoredConversation
) -> None:
    user = chat.add(UserMessage("what is the weather?"))
    assistant = chat.add(
        AssistantMessage("", tool_calls=[ToolCall("t1", "weather", {"city": "Oslo"})])
    )
    tool = chat.add(ToolMessage("rain", "t1"))
    system = chat.add(SystemMessage("answer briefly"))

    expected = {
        user: (Role.USER, ALICE.id, (AGENT.id,)),
        assistant: (Role.ASSISTANT, AGENT.id, (ALICE.id,)),
        tool: (Role.TOOL, None, (AGENT.id,)),
        system: (Role.SYSTEM, None, (ALICE.id,)),
    }
    held = {m.id: (m.role, m.author_id, m.recipient_ids) for m in chat.messages}
    assert held == expected
    await chat.flush()
    stored = await store.messages(chat.session_id)
    assert ids(stored) == [user, assistant, tool, system]
    assert {m.id: (m.role, m.author_id, m.recipient_ids) for m in stored} == expected
    assert stored[1].tool_calls == (ToolCall("t1", "weather", {"city": "Oslo"}),)
    assert stored[2].tool_call_id == "t1"


async def test_add_from_to_and_add_attributed_name_who_speaks_to_whom(
    store: Store, chat: StoredConversation
) -> None:
    question = chat.add_from_to(UserMessage("ping"), BOB, AGENT)
    note = DataAttachment("d1", "chart", "Sales", {"points": [1, 2]})
    answer = chat.add_attributed(
        AssistantMessage("pong"), AGENT, [CAROL, BOB.id], data=[note], in_reply_to=question
    )
    aside = chat.add_from_to(SystemMessage("nobody hears this"), None, None)
    await chat.flush()

    stored = {m.id: m for m in await store.messages(chat.session_id)}
    assert (stored[question].author_id, stored[question].recipient_ids) == (BOB.id, (AGENT.id,))
    assert stored[answer].author_id == AGENT.id
    assert stored[answer].recipient_ids == (CAROL.id, BOB.id)
    assert stored[answer].data == (note,)
    assert stored[answer].in_reply_to == question
    assert (stored[aside].author_id, stored[aside].recipient_ids) == (None, ())
    assert chat.messages == list(stored.values())


async def test_a_conversation_without_participants_stores_messages_unrouted(
    store: Store, factory: ConversationFactory
) -> None:
    conversation = await factory.create()
    conversation.add(UserMessage("hello"))
    conversation.add(AssistantMessage("hi"))
    await conversation.flush()
    stored = await store.messages(conversation.session_id)
    assert [(m.author_id, m.recipient_ids) for m in stored] == [(None, ()), (None, ())]


async def test_wrong_arguments_raise_at_once_and_add_nothing(chat: StoredConversation) -> None:
    with pytest.raises(InvalidArgumentError):
        chat.add("hello")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        chat.add_from_to(UserMessage("x"), " ", None)
    with pytest.raises(InvalidArgumentError):
        chat.add_attributed(UserMessage("x"), ALICE, "bob")
    assert chat.messages == []
    assert chat.pending == 0


# ------------------------------------------------------------------------ lifecycle


async def test_added_is_published_before_add_returns(
    chat: StoredConversation, recorder: Recorder
) -> None:
    message_id = chat.add(UserMessage("hello"))

    assert recorder.of(message_id) == ["added"]
    added = recorder.events[0]
    assert isinstance(added, MessageEvent)
    assert added.session_id == chat.session_id
    assert (added.from_user_id, added.to_user_id) == (ALICE.id, AGENT.id)
    assert added.error is None
    assert added.title == "hello"
    assert added.message.seq == 0
    assert ids(chat.messages) == [message_id]


async def test_persisted_then_message_persisted_then_stored_message_replaces_in_place(
    store: Store, chat: StoredConversation, recorder: Recorder
) -> None:
    first = chat.add(UserMessage("one"))
    second = chat.add(AssistantMessage("two"))
    provisional = chat.messages
    await chat.flush()

    assert recorder.of(first) == ["added", "persisted", "written"]
    assert recorder.of(second) == ["added", "persisted", "written"]
    stored = await store.messages(chat.session_id)
    assert chat.messages == stored
    assert [m.seq for m in chat.messages] == [1, 2]
    assert [m.created_at for m in chat.messages] == [m.created_at for m in provisional]
    persisted = recorder.with_status(MessageStatus.PERSISTED)
    assert [e.message for e in persisted] == stored
    written = [e for e in recorder.events if isinstance(e, MessagePersisted)]
    assert written == [
        MessagePersisted(chat.session_id, first, ALICE.id, (AGENT.id,)),
        MessagePersisted(chat.session_id, second, AGENT.id, (ALICE.id,)),
    ]


async def test_a_failed_write_is_reported_and_the_message_stays(
    caplog: pytest.LogCaptureFixture, store: Store, chat: StoredConversation, recorder: Recorder
) -> None:
    kept = chat.add(UserMessage("before"))
    await chat.flush()
    await store.delete_session(chat.session_id)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        lost = chat.add(AssistantMessage("after the session was deleted"))
        await chat.flush()

    assert any(lost in r.getMessage() for r in caplog.records if r.name == LOGGER)

    assert recorder.of(lost) == ["added", "persistence_failed"]
    failure = recorder.with_status(MessageStatus.PERSISTENCE_FAILED)[0]
    assert isinstance(failure.error, SessionNotFoundError)
    assert ids(chat.messages) == [kept, lost]
    assert ids(chat.failed) == [lost]
    assert chat.messages[1].seq == 0


async def test_retry_failed_resends_in_order_with_the_same_ids(
    monkeypatch: pytest.MonkeyPatch, store: Store, chat: StoredConversation, recorder: Recorder
) -> None:
    outage = True

    async def flaky(original: AddMessage, session_id: str, write: MessageWrite) -> Message:
        if outage and write.content.startswith("lost"):
            raise ConnectionError("database unreachable")
        return await original(session_id, write)

    wrap_add_message(monkeypatch, store, flaky)
    added = [chat.add(UserMessage(text)) for text in ("a", "lost 1", "b", "lost 2")]
    await chat.flush()
    assert ids(chat.failed) == [added[1], added[3]]
    failures = recorder.with_status(MessageStatus.PERSISTENCE_FAILED)
    assert all(isinstance(e.error, ConnectionError) for e in failures)

    assert await chat.retry_failed() == [added[1], added[3]]  # still down
    outage = False
    assert await chat.retry_failed() == []

    assert chat.failed == []
    assert ids(chat.messages) == added
    stored = await store.messages(chat.session_id)
    assert ids(stored) == [added[0], added[2], added[1], added[3]]
    assert chat.messages == sorted(stored, key=lambda m: added.index(m.id))
    assert recorder.of(added[1]) == [
        "added",
        "persistence_failed",
        "persistence_failed",
        "persisted",
        "written",
    ]


async def test_retrying_a_write_that_landed_does_not_duplicate_it(
    monkeypatch: pytest.MonkeyPatch, store: Store, chat: StoredConversation
) -> None:
    lose_reply = True

    async def lost_acknowledgement(
        original: AddMessage, session_id: str, write: MessageWrite
    ) -> Message:
        stored = await original(session_id, write)
        if lose_reply:
            raise TimeoutError("the reply was lost after the commit")
        return stored

    wrap_add_message(monkeypatch, store, lost_acknowledgement)
    message_id = chat.add(UserMessage("once"))
    await chat.flush()
    assert ids(chat.failed) == [message_id]
    lose_reply = False
    assert await chat.retry_failed() == []

    stored = await store.messages(chat.session_id)
    assert ids(stored) == [message_id]
    assert chat.messages == stored
    assert await store.version(chat.session_id) == 1


async def test_order_is_kept_under_200_rapid_adds_with_slow_uneven_writes(
    monkeypatch: pytest.MonkeyPatch, store: Store, chat: StoredConversation, recorder: Recorder
) -> None:
    in_flight = 0
    most_in_flight = 0
    jitter = random.Random(7)

    async def uneven(original: AddMessage, session_id: str, write: MessageWrite) -> Message:
        nonlocal in_flight, most_in_flight
        in_flight += 1
        most_in_flight = max(most_in_flight, in_flight)
        try:
            await let_other_tasks_run(jitter.choice((0, 0, 1, 3)))
            return await original(session_id, write)
        finally:
            in_flight -= 1

    wrap_add_message(monkeypatch, store, uneven)
    added = []
    for n in range(200):
        message = UserMessage(f"m{n}") if n % 2 == 0 else AssistantMessage(f"m{n}")
        added.append(chat.add(message))
        if n % 25 == 0:
            await asyncio.sleep(0)  # let the writer start while adds keep coming
    await chat.flush()

    stored = await store.messages(chat.session_id)
    assert ids(stored) == added
    assert [m.seq for m in stored] == list(range(1, 201))
    assert chat.messages == stored
    assert len(set(ids(chat.messages))) == 200
    assert [e.message.id for e in recorder.with_status(MessageStatus.PERSISTED)] == added
    assert most_in_flight == 1


async def test_a_listener_that_replies_queues_its_reply_after_the_message(
    store: Store, factory: ConversationFactory, chat: StoredConversation
) -> None:
    def reply(event: ConversationEvent) -> None:
        if (
            isinstance(event, MessageEvent)
            and event.status is MessageStatus.ADDED
            and event.message.role is Role.USER
        ):
            chat.add(AssistantMessage(f"re: {event.message.content}"))

    factory.subscribe(reply)
    chat.add(UserMessage("q1"))
    chat.add(UserMessage("q2"))
    await chat.flush()
    stored = await store.messages(chat.session_id)
    assert [m.content for m in stored] == ["q1", "re: q1", "q2", "re: q2"]
    assert chat.messages == stored


async def test_last_is_a_snapshot_of_the_newest(chat: StoredConversation) -> None:
    added = [chat.add(UserMessage(str(n))) for n in range(5)]
    window = chat.last(2)
    chat.add(UserMessage("later"))
    assert ids(window) == added[3:]
    assert ids(chat.last(100)) == [*added, chat.messages[-1].id]
    assert chat.last(0) == []
    with pytest.raises(InvalidArgumentError):
        chat.last(-1)


# ------------------------------------------------------------------------ flush, shutdown


async def test_flush_waits_for_slow_writes_and_async_listeners(
    monkeypatch: pytest.MonkeyPatch,
    store: Store,
    factory: ConversationFactory,
    chat: StoredConversation,
    held: HeldWrites,
) -> None:
    wrap_add_message(monkeypatch, store, held)
    heard: list[ConversationEvent] = []

    async def slow_listener(event: ConversationEvent) -> None:
        await held.released.wait()
        heard.append(event)

    factory.subscribe(slow_listener)
    added = [chat.add(UserMessage(f"m{n}")) for n in range(5)]
    assert chat.pending == len(added) + 1  # and the interim title, queued behind them
    held.release_soon()
    await chat.flush()

    assert chat.pending == 0
    assert ids(await store.messages(chat.session_id)) == added
    persisted = [
        e.message.id
        for e in heard
        if isinstance(e, MessageEvent) and e.status is MessageStatus.PERSISTED
    ]
    assert persisted == added


async def test_closing_the_store_flushes_pending_writes_first(
    monkeypatch: pytest.MonkeyPatch,
    connect_store: StoreFactory,
    held: HeldWrites,
) -> None:
    store = await connect_store()
    factory = ConversationFactory(store)
    recorder = Recorder()
    factory.subscribe(recorder)
    chat = await factory.create_for_participants(None, ALICE, AGENT)
    wrap_add_message(monkeypatch, store, held)
    added = [chat.add(UserMessage(f"m{n}")) for n in range(20)]
    assert chat.pending == len(added) + 1  # and the interim title, queued behind them

    held.release_soon()
    await store.close()

    assert [e.message.id for e in recorder.with_status(MessageStatus.PERSISTED)] == added
    assert chat.pending == 0
    assert all(m.seq > 0 for m in chat.messages)
    assert chat.closed
    with pytest.raises(StoreClosedError, match="closed"):
        chat.add(UserMessage("too late"))
    if store.capabilities.persistent:
        reopened = await connect_store()
        assert ids(await reopened.messages(chat.session_id)) == added


async def test_a_closed_conversation_refuses_adds_and_keeps_its_messages(
    factory: ConversationFactory, chat: StoredConversation
) -> None:
    message_id = chat.add(UserMessage("hello"))
    await chat.close()
    assert chat.closed
    assert ids(chat.messages) == [message_id]
    assert chat.messages[0].seq == 1
    with pytest.raises(StoreClosedError, match="closed"):
        chat.add(UserMessage("again"))
    reloaded = await factory.load(chat.session_id)
    assert reloaded is not chat
    assert reloaded.messages == chat.messages


async def test_a_closed_factory_refuses_new_conversations(store: Store) -> None:
    factory = ConversationFactory(store)
    chat = await factory.create(owner=ALICE)
    chat.add(UserMessage("hello"))
    await factory.close()
    assert chat.messages[0].seq == 1
    with pytest.raises(StoreClosedError, match="closed"):
        await factory.create(owner=ALICE)
    with pytest.raises(StoreClosedError, match="closed"):
        chat.add(UserMessage("again"))


def test_writes_cut_off_by_the_loop_ending_are_reported_failed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()

    async def leave_without_flushing() -> StoredConversation:
        factory = InMemoryConversationFactory()
        factory.subscribe(recorder)

        async def never_done(original: AddMessage, session_id: str, write: MessageWrite) -> Message:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        chat = await factory.create(owner=ALICE)
        wrap_add_message(monkeypatch, factory.store, never_done)
        chat.add(UserMessage("one"))
        chat.add(UserMessage("two"))
        await asyncio.sleep(0)
        return chat

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        chat = asyncio.run(leave_without_flushing())

    assert len(chat.failed) == 2
    failed = recorder.with_status(MessageStatus.PERSISTENCE_FAILED)
    assert [e.message.id for e in failed] == ids(chat.messages)
    assert all(isinstance(e.error, asyncio.CancelledError) for e in failed)
    assert any("not persisted" in r.getMessage() for r in caplog.records)
    assert chat.closed
