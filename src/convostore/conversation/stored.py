"""A conversation on a store: messages routed by role, written in order in the
background, with their lifecycle events and the session's title."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from convostore._time import utc_now
from convostore.conversation.events import MessageEvent, MessagePersisted, MessageStatus
from convostore.conversation.messages import (
    ROLES,
    AssistantMessage,
    ConversationMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from convostore.conversation.queue import Entry, State, WriteQueue
from convostore.conversation.titles import TitleGenerator, interim_title
from convostore.errors import InvalidArgumentError, StoreClosedError, StoreError
from convostore.ids import new_id
from convostore.model import (
    Asset,
    Attachment,
    DataAttachment,
    Message,
    MessageWrite,
    Role,
    Session,
    ToolCall,
    User,
    UserRef,
)

if TYPE_CHECKING:
    from convostore.conversation.factory import BaseConversationFactory

__all__ = ["InMemoryConversation", "StoredConversation", "id_of", "running_loop"]

logger = logging.getLogger("convostore.conversation")

T = TypeVar("T")
Dated = TypeVar("Dated", Attachment, Asset)


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The running event loop, or None outside one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def id_of(ref: object, name: str) -> str:
    """The id of a `User`, or ``ref`` itself if it is a non-blank string."""
    value = ref.id if isinstance(ref, User) else ref
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{name} must be a non-blank id")
    return value


def _dated(item: Dated, when: datetime) -> Dated:
    """``item`` with ``created_at`` defaulted to the message's time, as the store does."""
    return item if item.created_at is not None else replace(item, created_at=when)


class StoredConversation:
    """A 1-1 chat between a user and an agent (either may be absent) on a store.

    Made by a factory, never directly. ``messages`` holds every message added, in the
    order added, at once: a message is held as written by `add` (``seq`` 0) until its
    write succeeds, then replaced in place by the stored one. A message whose write
    failed stays, and `retry_failed` sends it again with the same id.
    """

    def __init__(
        self,
        factory: BaseConversationFactory[Any],
        session: Session,
        user_id: str | None,
        agent_id: str | None,
        stored: Sequence[Message],
    ) -> None:
        self._factory = factory
        self._store = factory.store
        self._loop = asyncio.get_running_loop()
        self._session = session
        self._title = session.title
        self._user_id = user_id
        self._agent_id = agent_id
        self._entries = [Entry(message, None, State.STORED) for message in stored]
        self._queue = WriteQueue(self._loop, factory._spawn, session.id, self._abandon)
        self._title_tasks: set[asyncio.Task[None]] = set()
        self._title_requests = 0
        self._title_applied = 0
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.session_id} user={self._user_id!r} "
            f"agent={self._agent_id!r} messages={len(self._entries)}>"
        )

    # ---------------------------------------------------------------- state

    @property
    def session_id(self) -> str:
        return self._session.id

    @property
    def session(self) -> Session:
        """The session as last read from or written to the store."""
        return self._session

    @property
    def title(self) -> str | None:
        """The current title; it may be ahead of the store while its write is queued."""
        return self._title

    @property
    def user_id(self) -> str | None:
        """Who user messages come from and assistant and system messages go to."""
        return self._user_id

    @property
    def agent_id(self) -> str | None:
        """Who assistant messages come from and user and tool messages go to."""
        return self._agent_id

    @property
    def messages(self) -> list[Message]:
        """Every message, in the order added: a new list on each access."""
        return [entry.message for entry in self._entries]

    def last(self, n: int) -> list[Message]:
        """The newest ``n`` messages, oldest first (a snapshot)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise InvalidArgumentError("last(n) takes a non-negative integer")
        return [entry.message for entry in self._entries[-n:]] if n else []

    @property
    def failed(self) -> list[Message]:
        """The messages whose last write failed, in order."""
        return [entry.message for entry in self._entries if entry.state is State.FAILED]

    @property
    def pending(self) -> int:
        """How many queued writes (messages and titles) have not finished."""
        return len(self._queue)

    @property
    def closed(self) -> bool:
        """True once closed, or once its factory or store closed: `add` then raises."""
        return self._closed or self._factory.closed

    # ---------------------------------------------------------------- adding

    def add(self, message: ConversationMessage) -> str:
        """Add a message routed by its role and return its id at once.

        User: user -> agent; assistant: agent -> user; system: no author -> user;
        tool: no author -> agent. ``ADDED`` is published before this returns; the
        write, then ``PERSISTED`` (and `MessagePersisted`) or ``PERSISTENCE_FAILED``,
        follow in the background, in order.
        """
        author, recipients = self._route(message)
        return self._add(message, author, recipients, (), None)

    def add_from_to(
        self, message: ConversationMessage, from_: UserRef | None, to: UserRef | None
    ) -> str:
        """`add` with an explicit author and recipient (None for none)."""
        return self._add(message, from_, () if to is None else (to,), (), None)

    def add_attributed(
        self,
        message: ConversationMessage,
        from_: UserRef | None,
        recipients: Sequence[UserRef],
        data: Sequence[DataAttachment] = (),
        in_reply_to: str | None = None,
    ) -> str:
        """`add` with an author, several recipients (order kept), structured ``data``
        (after the message's own), and the id of the message it replies to."""
        if isinstance(recipients, (str, User)) or not isinstance(recipients, Iterable):
            raise InvalidArgumentError("recipients must be a sequence of users or user ids")
        extra = tuple(data)
        if not all(isinstance(item, DataAttachment) for item in extra):
            raise InvalidArgumentError("data must hold DataAttachment values")
        if in_reply_to is not None:
            id_of(in_reply_to, "in_reply_to")
        return self._add(message, from_, tuple(recipients), extra, in_reply_to)

    def _route(self, message: ConversationMessage) -> tuple[str | None, tuple[str, ...]]:
        user, agent = self._user_id, self._agent_id
        if isinstance(message, UserMessage):
            author, recipient = user, agent
        elif isinstance(message, AssistantMessage):
            author, recipient = agent, user
        elif isinstance(message, SystemMessage):
            author, recipient = None, user
        else:
            author, recipient = None, agent
        return author, () if recipient is None else (recipient,)

    def _add(
        self,
        message: ConversationMessage,
        author: UserRef | None,
        recipients: Sequence[UserRef],
        extra_data: tuple[DataAttachment, ...],
        in_reply_to: str | None,
    ) -> str:
        role = ROLES.get(type(message))
        if role is None:
            raise InvalidArgumentError(
                "add takes a UserMessage, AssistantMessage, SystemMessage or ToolMessage, "
                f"not {type(message).__name__}"
            )
        author_id = None if author is None else id_of(author, "from_")
        recipient_ids = tuple(id_of(ref, "recipient") for ref in recipients)
        now = utc_now()
        attachments: tuple[Attachment, ...] = ()
        data: tuple[DataAttachment, ...] = ()
        assets: tuple[Asset, ...] = ()
        tool_calls: tuple[ToolCall, ...] = ()
        tool_call_id: str | None = None
        if isinstance(message, UserMessage):
            attachments = tuple(_dated(a, now) for a in message.attachments)
            data = tuple(message.data)
        elif isinstance(message, AssistantMessage):
            tool_calls = tuple(message.tool_calls)
            assets = tuple(_dated(a, now) for a in message.assets)
        elif isinstance(message, ToolMessage):
            tool_call_id = message.tool_call_id
        data += extra_data
        message_id = new_id()
        write = MessageWrite(
            role=role,
            content=message.content,
            author=author,
            recipients=tuple(recipients),
            in_reply_to=in_reply_to,
            attachments=attachments,
            data=data,
            assets=assets,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            id=message_id,
            created_at=now,
        )
        provisional = Message(
            id=message_id,
            session_id=self.session_id,
            seq=0,
            created_at=now,
            role=role,
            content=message.content,
            author_id=author_id,
            recipient_ids=recipient_ids,
            in_reply_to=in_reply_to,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            attachments=attachments,
            data=data,
            assets=assets,
        )
        return self._on_loop(lambda: self._accept(Entry(provisional, write, State.PENDING)))

    def _on_loop(self, call: Callable[[], T]) -> T:
        """Run ``call`` on this conversation's loop and return its result."""
        if running_loop() is self._loop:
            return call()
        if not self._loop.is_running():
            raise StoreError(
                f"conversation {self.session_id} is closed: its event loop is not running"
            )
        result: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                result.set_result(call())
            except BaseException as error:
                result.set_exception(error)

        self._loop.call_soon_threadsafe(run)
        return result.result()

    def _accept(self, entry: Entry) -> str:
        if self.closed:
            raise StoreClosedError(f"conversation {self.session_id} is closed")
        self._entries.append(entry)
        message = entry.message
        # Queue the write before publishing, so a listener that adds a reply queues it after.
        self._queue.enqueue(lambda: self._write(entry), entry)
        if message.role is Role.USER and not self._title:
            title = interim_title(message.content)
            if title is not None:
                self._title = title
                self._queue.enqueue(lambda: self._persist_title(title))
        generator = self._factory.title_generator
        if generator is not None and len(self._entries) % self._factory.title_every == 0:
            self._start_title_generation(generator, message)
        self._publish_status(entry, MessageStatus.ADDED)
        return message.id

    # ---------------------------------------------------------------- the write queue

    def _abandon(self, unwritten: list[Entry], cancelled: asyncio.CancelledError) -> None:
        """The writer was cancelled (its loop is shutting down): close, fail what is left."""
        self._closed = True
        if unwritten:
            logger.warning(
                "conversation %s: %d message(s) not persisted, the writer was cancelled; "
                "close the store or flush before the event loop ends",
                self.session_id,
                len(unwritten),
            )
        for entry in unwritten:
            entry.state, entry.error = State.FAILED, cancelled
            self._publish_status(entry, MessageStatus.PERSISTENCE_FAILED, cancelled)

    async def _write(self, entry: Entry) -> None:
        assert entry.write is not None
        try:
            stored = await self._store.add_message(self.session_id, entry.write)
        except Exception as error:
            entry.state, entry.error = State.FAILED, error
            logger.warning(
                "conversation %s: message %s not persisted: %r",
                self.session_id,
                entry.message.id,
                error,
            )
            self._publish_status(entry, MessageStatus.PERSISTENCE_FAILED, error)
            return
        entry.message, entry.state, entry.error = stored, State.STORED, None
        self._publish_status(entry, MessageStatus.PERSISTED)
        self._factory._publish(
            MessagePersisted(self.session_id, stored.id, stored.author_id, stored.recipient_ids)
        )

    async def _persist_title(self, title: str) -> None:
        try:
            self._session = await self._store.set_title(self.session_id, title)
        except Exception:
            logger.exception("conversation %s: writing the title failed", self.session_id)

    def _start_title_generation(self, generator: TitleGenerator, message: Message) -> None:
        # Generation runs beside the write queue, so a slow generator delays no message;
        # only its result's write is queued.
        self._title_requests += 1
        task = self._factory._spawn(
            self._generate_title(generator, message, self._title_requests),
            f"convostore title {self.session_id}",
        )
        self._title_tasks.add(task)
        task.add_done_callback(self._title_tasks.discard)

    async def _generate_title(
        self, generator: TitleGenerator, message: Message, request: int
    ) -> None:
        try:
            result = generator(message)
            title = await result if inspect.isawaitable(result) else result
        except Exception:
            logger.exception(
                "conversation %s: the title generator failed; keeping the title",
                self.session_id,
            )
            return
        if not isinstance(title, str) or not title.strip():
            logger.warning(
                "conversation %s: the title generator gave %r; keeping the title",
                self.session_id,
                title,
            )
            return
        if request < self._title_applied:
            return  # a later message's title is already in place
        self._title_applied = request
        self._title = title = title.strip()
        self._queue.enqueue(lambda: self._persist_title(title))

    def _publish_status(
        self, entry: Entry, status: MessageStatus, error: BaseException | None = None
    ) -> None:
        message = entry.message
        self._factory._publish(
            MessageEvent(
                session_id=self.session_id,
                from_user_id=message.author_id,
                to_user_id=message.recipient_ids[0] if message.recipient_ids else None,
                title=self._title,
                message=message,
                status=status,
                error=error,
            )
        )

    # ---------------------------------------------------------------- waiting

    async def flush(self) -> None:
        """Wait until every write queued so far has finished (stored or failed), with the
        titles being generated and the async listeners it woke."""
        if self._title_tasks:
            await asyncio.wait(set(self._title_tasks))
        await self._queue.wait()
        await self._factory._await_listeners(self.session_id)

    async def retry_failed(self) -> list[str]:
        """Queue every failed message again, in order, with its id (so a write that did
        land is not duplicated), and wait; returns the ids that failed again."""
        if self.closed:
            raise StoreClosedError(f"conversation {self.session_id} is closed")
        retried = [entry for entry in self._entries if entry.state is State.FAILED]
        for entry in retried:
            entry.state, entry.error = State.PENDING, None
            self._queue.enqueue(functools.partial(self._write, entry), entry)
        await self.flush()
        return [entry.message.id for entry in retried if entry.state is State.FAILED]

    async def close(self) -> None:
        """Refuse further adds, flush, and detach from the factory. The store stays open."""
        self._closed = True
        await self.flush()
        self._factory._forget(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class InMemoryConversation(StoredConversation):
    """A conversation whose store is an in-process memory store; same API and semantics."""
