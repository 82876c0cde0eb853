"""What a conversation factory publishes, and one reader's stream of it."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self, TypeAlias

from convostore.embedding import EmbeddingFailed
from convostore.model import Message

__all__ = [
    "DEFAULT_MAX_PENDING_EVENTS",
    "ConversationEvent",
    "EventStream",
    "Listener",
    "MessageEvent",
    "MessagePersisted",
    "MessageStatus",
]

logger = logging.getLogger("convostore.conversation")

DEFAULT_MAX_PENDING_EVENTS = 1000
"""How many unread events `BaseConversationFactory.events` keeps per reader."""


class MessageStatus(enum.StrEnum):
    """Where a message is in its life: added (in memory), then persisted or failed."""

    ADDED = "added"
    PERSISTED = "persisted"
    PERSISTENCE_FAILED = "persistence_failed"


@dataclass(frozen=True, slots=True)
class MessageEvent:
    """A message changed status. ``message`` is as held in ``conversation.messages``
    then (``seq`` is 0 until stored); ``to_user_id`` is its first recipient; ``title`` the
    conversation's title then; ``error`` is set for ``PERSISTENCE_FAILED`` only."""

    session_id: str
    from_user_id: str | None
    to_user_id: str | None
    title: str | None
    message: Message
    status: MessageStatus
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class MessagePersisted:
    """A message was written; published right after its ``PERSISTED`` event."""

    session_id: str
    message_id: str
    author_id: str | None
    recipient_ids: tuple[str, ...]


ConversationEvent: TypeAlias = MessageEvent | MessagePersisted | EmbeddingFailed
"""What a factory publishes."""

Listener: TypeAlias = Callable[[ConversationEvent], object]
"""A sync callable, or an async one (its awaitable is run as a task)."""


class EventStream:
    """One reader's events of one session, as an async iterator.

    Events wait in an `asyncio.Queue` until read. A reader that falls more than
    ``max_pending`` events behind loses the oldest ones: ``dropped`` counts them, and a
    warning is logged once per run of drops (so a reader can resync from
    ``conversation.messages``). Publishing never waits for a reader.

    The stream ends when closed (`aclose`, or leaving ``async with``) or when its factory
    closes; a stream no longer referenced is unsubscribed when collected.
    """

    def __init__(
        self,
        session_id: str,
        max_pending: int,
        unsubscribe: Callable[[EventStream], None],
    ) -> None:
        self.session_id = session_id
        self.max_pending = max_pending
        self.dropped = 0
        self._queue: asyncio.Queue[ConversationEvent | None] = asyncio.Queue()
        self._unsubscribe = unsubscribe
        self._ended = False
        self._dropping = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ConversationEvent:
        if self._ended and self._queue.empty():
            raise StopAsyncIteration
        event = await self._queue.get()
        if event is None:
            self._ended = True
            raise StopAsyncIteration
        self._dropping = False
        return event

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Unsubscribe and drop what is unread; a pending read ends the iteration."""
        self._unsubscribe(self)
        while not self._queue.empty():
            self._queue.get_nowait()
        self._end()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._queue.put_nowait(None)

    def _offer(self, event: ConversationEvent) -> None:
        if self._ended:
            return
        if self._queue.qsize() >= self.max_pending:
            self._queue.get_nowait()
            self.dropped += 1
            if not self._dropping:
                self._dropping = True
                logger.warning(
                    "events(%s): a reader is %d events behind; dropping the oldest",
                    self.session_id,
                    self.max_pending,
                )
        self._queue.put_nowait(event)
