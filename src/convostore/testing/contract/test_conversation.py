"""Conversations on every backend: routing, ordered background persistence, lifecycle
events, event streams, titles, shutdown, and the sync facade."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest

import convostore
import convostore.conversation
import convostore.sync
from convostore import (
    AssistantMessage,
    ConversationEvent,
    ConversationFactory,
    DataAttachment,
    EmbeddingFailed,
    InMemoryConversation,
    InMemoryConversationFactory,
    InvalidArgumentError,
    Message,
    MessageEvent,
    MessagePersisted,
    MessageStatus,
    MessageWrite,
    Role,
    Session,
    SessionExistsError,
    SessionNotFoundError,
    Store,
    StoreClosedError,
    StoredConversation,
    StoreError,
    SystemMessage,
    ToolCall,
    ToolMessage,
    User,
    UserMessage,
)
from convostore.conversation import INTERIM_TITLE_LENGTH
from convostore.embedding import HashingEmbedder
from convostore.sync import SyncProxy
from convostore.testing.fixtures import BackendUnderTest, StoreFactory
from convostore.testing.helpers import AGENT, ALICE, BOB, CAROL

LOGGER = "convostore.conversation"


class Recorder:
    """A sync listener that keeps every event it is given."""

    def __init__(self) -> None:
        self.events: list[ConversationEvent] = []

    def __call__(self, event: ConversationEvent) -> None:
        self.events.append(event)

    def of(self, message_id: str) -> list[str]:
        """What happened to one message: its statuses, and "written" for MessagePersisted."""
        steps: list[str] = []
        for event in self.events:
            if isinstance(event, MessageEvent) and event.message.id == message_id:
                steps.append(event.status.value)
            elif isinstance(event, MessagePersisted) and event.message_id == message_id:
                steps.append("written")
        return steps

    def with_status(self, status: MessageStatus) -> list[MessageEvent]:
        return [e for e in self.events if isinstance(e, MessageEvent) and e.status is status]


AddMessage = Callable[[str, MessageWrite], Awaitable[Message]]


def wrap_add_message(
    monkeypatch: pytest.MonkeyPatch,
    store: Store,
    wrapper: Callable[[AddMessage, str, MessageWrite], Awaitable[Message]],
) -> None:
    """Route this store object's `add_message` through ``wrapper(original, ...)``."""
    original: AddMessage = store.add_message

    async def add_message(session_id: str, write: MessageWrite) -> Message:
        return await wrapper(original, session_id, write)

    monkeypatch.setattr(store, "add_message", add_message)


class HeldWrites:
    """A slow database without a clock: every write waits until `release_soon` lets
    them all through, so a test sees them queued and then finished, in that order; each
    then takes a turn of the loop, as a round trip to a database does."""

    def __init__(self) -> None:
        self.released = asyncio.Event()

    async def __call__(self, original: AddMessage, session_id: str, write: MessageWrite) -> Message:
        await self.released.wait()
        await let_other_tasks_run(1)
        return await original(session_id, write)

    def release_soon(self) -> None:
        """Release the writes on the loop's next turn, once the caller is waiting."""
        asyncio.get_running_loop().call_soon(self.released.set)


@pytest.fixture
async def held() -> AsyncIterator[HeldWrites]:
    """Writes held until the test releases them (request it after the store's fixtures:
    its teardown runs first, so a failed test leaves nothing held for their flush)."""
    gate = HeldWrites()
    yield gate
    gate.released.set()


async def let_other_tasks_run(turns: int) -> None:
    """Yield to the event loop ``turns`` times (each turn every ready task takes a step);
    a zero-length yield orders nothing by time."""
    for _ in range(turns):
        await asyncio.sleep(0)


@pytest.fixture
async def factory(store: Store) -> AsyncIterator[ConversationFactory]:
    made = ConversationFactory(store)
    yield made
    await made.close()


@pytest.fixture
async def recorder(factory: ConversationFactory) -> Recorder:
    recorder = Recorder()
    factory.subscribe(recorder)
    return recorder


@pytest.fixture
async def chat(factory: ConversationFactory) -> StoredConversation:
    """A new 1-1 chat of Alice with the agent."""
    return await factory.create_for_participants(None, ALICE, AGENT)


def ids(messages: Sequence[Message]) -> list[str]:
    return [m.id for m in messages]


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


# ------------------------------------------------------------------------ listeners


async def test_sync_and_async_listeners_both_hear_everything_until_unsubscribed(
    factory: ConversationFactory, chat: StoredConversation
) -> None:
    sync_heard = Recorder()
    async_heard: list[ConversationEvent] = []

    async def async_listener(event: ConversationEvent) -> None:
        await asyncio.sleep(0)
        async_heard.append(event)

    unsubscribe_sync = factory.subscribe(sync_heard)
    factory.subscribe(async_listener)
    first = chat.add(UserMessage("hello"))
    await chat.flush()
    assert sync_heard.of(first) == ["added", "persisted", "written"]
    assert async_heard == sync_heard.events

    unsubscribe_sync()
    unsubscribe_sync()  # harmless twice
    chat.add(UserMessage("again"))
    await chat.flush()
    assert len(sync_heard.events) == 3
    assert len(async_heard) == 6


async def test_a_raising_listener_is_logged_and_breaks_nothing(
    caplog: pytest.LogCaptureFixture,
    store: Store,
    factory: ConversationFactory,
    chat: StoredConversation,
) -> None:
    def broken(event: ConversationEvent) -> None:
        raise RuntimeError("sync listener bug")

    async def broken_async(event: ConversationEvent) -> None:
        raise RuntimeError("coroutine listener bug")

    factory.subscribe(broken)
    factory.subscribe(broken_async)
    healthy = Recorder()
    factory.subscribe(healthy)

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        message_id = chat.add(UserMessage("hello"))
        await chat.flush()

    assert healthy.of(message_id) == ["added", "persisted", "written"]
    assert ids(await store.messages(chat.session_id)) == [message_id]
    logged = [r for r in caplog.records if r.name == LOGGER]
    assert sum("sync listener bug" in str(r.exc_info[1]) for r in logged if r.exc_info) == 3
    assert sum("coroutine listener bug" in str(r.exc_info[1]) for r in logged if r.exc_info) == 3


async def test_add_from_another_thread_runs_on_the_conversations_loop(
    factory: ConversationFactory, chat: StoredConversation
) -> None:
    loop_thread = threading.get_ident()
    listener_threads: set[int] = set()
    factory.subscribe(lambda event: listener_threads.add(threading.get_ident()))

    def from_worker() -> tuple[str, list[Message]]:
        message_id = chat.add(UserMessage("from a worker thread"))
        return message_id, chat.messages

    message_id, seen_by_worker = await asyncio.to_thread(from_worker)
    assert ids(seen_by_worker) == [message_id]
    await chat.flush()
    assert listener_threads == {loop_thread}
    assert chat.messages[0].seq == 1


# ------------------------------------------------------------------------ event streams


async def next_event(stream: AsyncIterator[ConversationEvent]) -> ConversationEvent:
    return await asyncio.wait_for(anext(stream), timeout=5)


async def test_events_streams_one_sessions_events_until_closed(
    factory: ConversationFactory, chat: StoredConversation
) -> None:
    other = await factory.create_for_participants(None, BOB, AGENT)
    stream = factory.events(chat.session_id)

    other.add(UserMessage("not for this stream"))
    message_id = chat.add(UserMessage("hello"))
    await chat.flush()
    await other.flush()

    received = [await next_event(stream) for _ in range(3)]
    assert all(e.session_id == chat.session_id for e in received)
    assert [e.status for e in received if isinstance(e, MessageEvent)] == [
        MessageStatus.ADDED,
        MessageStatus.PERSISTED,
    ]
    assert isinstance(received[2], MessagePersisted)
    assert received[2].message_id == message_id

    await stream.aclose()
    chat.add(UserMessage("after close"))
    with pytest.raises(StopAsyncIteration):
        await next_event(stream)


async def test_events_as_an_async_for_loop_ends_when_the_factory_closes(store: Store) -> None:
    factory = ConversationFactory(store)
    chat = await factory.create(owner=ALICE)

    async def read_all() -> list[ConversationEvent]:
        async with factory.events(chat.session_id) as stream:
            return [event async for event in stream]

    reader = asyncio.create_task(read_all())
    await asyncio.sleep(0)
    chat.add(UserMessage("hello"))
    await factory.close()
    received = await asyncio.wait_for(reader, timeout=5)
    assert [type(e).__name__ for e in received] == [
        "MessageEvent",
        "MessageEvent",
        "MessagePersisted",
    ]


async def test_a_slow_reader_loses_the_oldest_events_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    store: Store,
    factory: ConversationFactory,
    chat: StoredConversation,
) -> None:
    writes_may_go = asyncio.Event()

    async def held(original: AddMessage, session_id: str, write: MessageWrite) -> Message:
        await writes_may_go.wait()
        return await original(session_id, write)

    wrap_add_message(monkeypatch, store, held)
    stream = factory.events(chat.session_id, max_pending=3)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        added = [chat.add(SystemMessage(f"s{n}")) for n in range(5)]

    assert stream.dropped == 2
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "behind" in warnings[0].getMessage()
    kept = [await next_event(stream) for _ in range(3)]
    assert [e.message.id for e in kept if isinstance(e, MessageEvent)] == added[2:]

    writes_may_go.set()
    await chat.flush()
    assert stream.dropped == 2 + 5 * 2 - 3
    await stream.aclose()


async def test_events_refuses_a_bad_bound(factory: ConversationFactory) -> None:
    with pytest.raises(InvalidArgumentError):
        factory.events("s-1", max_pending=0)


# ------------------------------------------------------------------------ titles


async def test_the_first_user_message_sets_an_interim_title(
    store: Store, factory: ConversationFactory
) -> None:
    chat = await factory.create_for_participants(None, ALICE, AGENT)
    chat.add(AssistantMessage("Hello! How can I help you today?"))
    assert chat.title is None
    chat.add(UserMessage("  Plan my\n\ttrip   to Oslo  "))
    assert chat.title == "Plan my trip to Oslo"
    chat.add(UserMessage("and book a hotel"))
    assert chat.title == "Plan my trip to Oslo"
    await chat.flush()
    session = await store.get_session(chat.session_id)
    assert session is not None
    assert session.title == "Plan my trip to Oslo"
    assert chat.session.title == "Plan my trip to Oslo"


async def test_a_long_interim_title_is_cut_with_an_ellipsis(factory: ConversationFactory) -> None:
    chat = await factory.create(owner=ALICE)
    words = "word " * 40
    chat.add(UserMessage(words))
    title = chat.title
    assert title is not None
    assert len(title) <= INTERIM_TITLE_LENGTH
    assert title.endswith("...")
    assert title[:-3].split() == ["word"] * len(title[:-3].split())

    unbroken = await factory.create(owner=ALICE)
    unbroken.add(UserMessage("x" * 500))
    assert unbroken.title == "x" * (INTERIM_TITLE_LENGTH - 3) + "..."


async def test_a_title_given_at_create_is_kept(store: Store, factory: ConversationFactory) -> None:
    chat = await factory.create(owner=ALICE, title="Quarterly report")
    chat.add(UserMessage("let us start"))
    await chat.flush()
    assert chat.title == "Quarterly report"
    session = await store.get_session(chat.session_id)
    assert session is not None
    assert session.title == "Quarterly report"


async def test_blank_user_messages_give_no_title(factory: ConversationFactory) -> None:
    chat = await factory.create(owner=ALICE)
    chat.add(UserMessage(" \n "))
    assert chat.title is None
    chat.add(UserMessage("now something"))
    assert chat.title == "now something"


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_title_generator_retitles_every_n_messages(store: Store, kind: str) -> None:
    calls: list[str] = []

    def generate(message: Message) -> str:
        calls.append(message.content)
        return f"About {message.content}"

    async def generate_async(message: Message) -> str:
        await asyncio.sleep(0)
        return generate(message)

    factory = ConversationFactory(
        store, title_generator=generate if kind == "sync" else generate_async, title_every=2
    )
    chat = await factory.create_for_participants(None, ALICE, AGENT)
    chat.add(UserMessage("cats"))
    assert chat.title == "cats"
    chat.add(AssistantMessage("dogs"))
    chat.add(UserMessage("birds"))
    chat.add(AssistantMessage("fish"))
    await chat.flush()

    assert calls == ["dogs", "fish"]
    assert chat.title == "About fish"
    session = await store.get_session(chat.session_id)
    assert session is not None
    assert session.title == "About fish"
    await factory.close()


async def test_a_failing_title_generator_is_logged_and_keeps_the_title(
    caplog: pytest.LogCaptureFixture, store: Store
) -> None:
    answers: list[str | Exception] = ["First title", RuntimeError("model down"), "  "]

    def generate(message: Message) -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    factory = ConversationFactory(store, title_generator=generate)
    chat = await factory.create(owner=ALICE)
    recorder = Recorder()
    factory.subscribe(recorder)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        added = [chat.add(UserMessage(text)) for text in ("one", "two", "three")]
        await chat.flush()

    assert chat.title == "First title"
    session = await store.get_session(chat.session_id)
    assert session is not None
    assert session.title == "First title"
    assert any("title generator" in r.getMessage() for r in caplog.records)
    assert all(recorder.of(i) == ["added", "persisted", "written"] for i in added)
    await factory.close()


async def test_a_slow_title_generator_delays_no_write_and_the_latest_title_wins(
    monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    first_may_finish = asyncio.Event()

    async def generate(message: Message) -> str:
        if message.content == "first":
            await first_may_finish.wait()
        return f"About {message.content}"

    # Both messages and the second title are written while the first title is still
    # being generated: each write sets its event, and the test waits for both.
    both_persisted = asyncio.Event()
    second_title_written = asyncio.Event()
    set_title = store.set_title

    async def noting_set_title(session_id: str, title: str | None) -> Session:
        session = await set_title(session_id, title)
        if title == "About second":
            second_title_written.set()
        return session

    monkeypatch.setattr(store, "set_title", noting_set_title)
    factory = ConversationFactory(store, title_generator=generate)
    recorder = Recorder()
    factory.subscribe(recorder)

    def note_persisted(event: ConversationEvent) -> None:
        if len(recorder.with_status(MessageStatus.PERSISTED)) == 2:
            both_persisted.set()

    factory.subscribe(note_persisted)
    chat = await factory.create(owner=ALICE)
    added = [chat.add(UserMessage("first")), chat.add(UserMessage("second"))]
    async with asyncio.timeout(60):
        await both_persisted.wait()
        await second_title_written.wait()

    assert not first_may_finish.is_set()
    assert [e.message.id for e in recorder.with_status(MessageStatus.PERSISTED)] == added
    assert chat.title == "About second"
    stored = await store.get_session(chat.session_id)
    assert stored is not None
    assert stored.title == "About second"
    first_may_finish.set()
    await chat.flush()
    assert chat.title == "About second"
    session = await store.get_session(chat.session_id)
    assert session is not None
    assert session.title == "About second"
    await factory.close()


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
    with pytest.raises((RuntimeError, StoreError), match="closed"):
        await factory.create(owner=ALICE)


async def test_an_in_memory_factory_closed_unused_opens_nothing() -> None:
    factory = InMemoryConversationFactory()
    await factory.close()
    with pytest.raises((RuntimeError, StoreError), match="closed"):
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
