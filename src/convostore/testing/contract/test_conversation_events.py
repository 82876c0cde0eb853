"""Conversations on every backend: listeners, event streams and titles."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

import pytest

from convostore import (
    AssistantMessage,
    ConversationEvent,
    ConversationFactory,
    InvalidArgumentError,
    Message,
    MessageEvent,
    MessagePersisted,
    MessageStatus,
    MessageWrite,
    Session,
    Store,
    StoredConversation,
    SystemMessage,
    UserMessage,
)
from convostore.conversation import INTERIM_TITLE_LENGTH
from convostore.testing.contract.conversations import (  # *_fixture: fixtures, used by name
    LOGGER,
    AddMessage,
    Recorder,
    chat_fixture,  # noqa: F401
    factory_fixture,  # noqa: F401
    held_fixture,  # noqa: F401
    ids,
    recorder_fixture,  # noqa: F401
    wrap_add_message,
)
from convostore.testing.helpers import AGENT, ALICE, BOB

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
