"""What the conversation tests share: a listener that records, writes held until
released, and the fixtures of a factory, its recorder and a 1-1 chat."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest

from convostore import (
    ConversationEvent,
    ConversationFactory,
    Message,
    MessageEvent,
    MessagePersisted,
    MessageStatus,
    MessageWrite,
    Store,
    StoredConversation,
)
from convostore.testing.helpers import AGENT, ALICE

LOGGER = "convostore.conversation"

__all__ = [
    "LOGGER",
    "AddMessage",
    "HeldWrites",
    "Recorder",
    "chat_fixture",
    "factory_fixture",
    "held_fixture",
    "ids",
    "let_other_tasks_run",
    "recorder_fixture",
    "wrap_add_message",
]


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


@pytest.fixture(name="held")
async def held_fixture() -> AsyncIterator[HeldWrites]:
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


@pytest.fixture(name="factory")
async def factory_fixture(store: Store) -> AsyncIterator[ConversationFactory]:
    made = ConversationFactory(store)
    yield made
    await made.close()


@pytest.fixture(name="recorder")
async def recorder_fixture(factory: ConversationFactory) -> Recorder:
    recorder = Recorder()
    factory.subscribe(recorder)
    return recorder


@pytest.fixture(name="chat")
async def chat_fixture(factory: ConversationFactory) -> StoredConversation:
    """A new 1-1 chat of Alice with the agent."""
    return await factory.create_for_participants(None, ALICE, AGENT)


def ids(messages: Sequence[Message]) -> list[str]:
    return [m.id for m in messages]
