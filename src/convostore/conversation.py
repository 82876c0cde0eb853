"""Conversations: messages routed in a 1-1 chat, persisted in the background in order,
with lifecycle events and titles.

A factory makes conversations on a store. ``conversation.add(message)`` returns the new
message's id at once: the message is in ``conversation.messages``, ``ADDED`` has been
published, and its write is queued. One writer per conversation drains that queue in
order, so writes never overtake one another; each write carries the id `add` assigned,
so a retried write is idempotent. Closing the store (or the factory) flushes every
conversation first.

Everything runs on the event loop the conversation was made on. `add` may be called from
another thread (the sync facade does): it then runs on that loop and returns when ADDED
has been published there. Listeners always run on that loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import functools
import inspect
import logging
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Self, TypeAlias, TypeVar

from convostore._time import utc_now
from convostore.backends import memory_store
from convostore.embedding import EmbeddingFailed
from convostore.errors import InvalidArgumentError, SessionNotFoundError, StoreClosedError
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
from convostore.store import Store

if TYPE_CHECKING:
    from convostore.sync import SyncProxy, SyncStore

__all__ = [
    "DEFAULT_MAX_PENDING_EVENTS",
    "INTERIM_TITLE_LENGTH",
    "AssistantMessage",
    "BaseConversationFactory",
    "ConversationEvent",
    "ConversationFactory",
    "ConversationMessage",
    "EmbeddingFailed",
    "EventStream",
    "InMemoryConversation",
    "InMemoryConversationFactory",
    "Listener",
    "MessageEvent",
    "MessagePersisted",
    "MessageStatus",
    "StoredConversation",
    "SystemMessage",
    "TitleGenerator",
    "ToolMessage",
    "UserMessage",
]

logger = logging.getLogger("convostore.conversation")

INTERIM_TITLE_LENGTH = 60
"""The longest interim title, "..." included."""
DEFAULT_MAX_PENDING_EVENTS = 1000
"""How many unread events `BaseConversationFactory.events` keeps per reader."""

T = TypeVar("T")
Dated = TypeVar("Dated", Attachment, Asset)


# --------------------------------------------------------------------------------------
# Message values


def _tuple_of(owner: object, name: str, kind: type) -> None:
    """Freeze a sequence field of a frozen dataclass as a tuple of ``kind``."""
    value = getattr(owner, name)
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{name} must be a sequence of {kind.__name__}")
    items = tuple(value)
    if not all(isinstance(item, kind) for item in items):
        raise InvalidArgumentError(f"{name} must hold {kind.__name__} values")
    object.__setattr__(owner, name, items)


def _check_content(content: object) -> None:
    if not isinstance(content, str):
        raise InvalidArgumentError(f"content must be a string, not {type(content).__name__}")


@dataclass(frozen=True, slots=True)
class UserMessage:
    """What the user says, with files and structured data."""

    content: str
    attachments: Sequence[Attachment] = ()
    data: Sequence[DataAttachment] = ()

    def __post_init__(self) -> None:
        _check_content(self.content)
        _tuple_of(self, "attachments", Attachment)
        _tuple_of(self, "data", DataAttachment)


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """What the agent says, with the tools it calls and the assets it produced."""

    content: str
    tool_calls: Sequence[ToolCall] = ()
    assets: Sequence[Asset] = ()

    def __post_init__(self) -> None:
        _check_content(self.content)
        _tuple_of(self, "tool_calls", ToolCall)
        _tuple_of(self, "assets", Asset)


@dataclass(frozen=True, slots=True)
class SystemMessage:
    """An instruction from the system; it has no author."""

    content: str

    def __post_init__(self) -> None:
        _check_content(self.content)


@dataclass(frozen=True, slots=True)
class ToolMessage:
    """The result of the tool call ``tool_call_id``; it has no author."""

    content: str
    tool_call_id: str

    def __post_init__(self) -> None:
        _check_content(self.content)
        if not isinstance(self.tool_call_id, str) or not self.tool_call_id.strip():
            raise InvalidArgumentError("tool_call_id must be a non-blank string")


ConversationMessage: TypeAlias = UserMessage | AssistantMessage | SystemMessage | ToolMessage
"""A message a conversation accepts."""

_ROLES: dict[type, Role] = {
    UserMessage: Role.USER,
    AssistantMessage: Role.ASSISTANT,
    SystemMessage: Role.SYSTEM,
    ToolMessage: Role.TOOL,
}


# --------------------------------------------------------------------------------------
# Events


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

TitleGenerator: TypeAlias = Callable[[Message], "str | Awaitable[str]"]
"""Makes a title from a message, sync or async."""


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


# --------------------------------------------------------------------------------------
# Conversations


class _State(enum.Enum):
    PENDING = enum.auto()
    STORED = enum.auto()
    FAILED = enum.auto()


@dataclass(eq=False, slots=True)
class _Entry:
    """One message of a conversation and the write that stores it."""

    message: Message
    write: MessageWrite | None
    state: _State
    error: BaseException | None = None


@dataclass(eq=False, slots=True)
class _Job:
    """A step of the write queue; ``done`` resolves when it has run (never with an error)."""

    run: Callable[[], Awaitable[None]]
    done: asyncio.Future[None]
    entry: _Entry | None = None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _id_of(ref: object, name: str) -> str:
    """The id of a `User`, or ``ref`` itself if it is a non-blank string."""
    value = ref.id if isinstance(ref, User) else ref
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{name} must be a non-blank id")
    return value


def _dated(item: Dated, when: datetime) -> Dated:
    """``item`` with ``created_at`` defaulted to the message's time, as the store does."""
    return item if item.created_at is not None else replace(item, created_at=when)


def _interim_title(content: str) -> str | None:
    """The title a first user message gives: its words, whitespace collapsed, cut at a
    word boundary to at most `INTERIM_TITLE_LENGTH` characters ending with "...".
    None for blank content."""
    text = " ".join(content.split())
    if not text:
        return None
    if len(text) <= INTERIM_TITLE_LENGTH:
        return text
    cut = text[: INTERIM_TITLE_LENGTH - 3]
    space = cut.rfind(" ")
    if space >= INTERIM_TITLE_LENGTH // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "..."


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
        self._entries = [_Entry(message, None, _State.STORED) for message in stored]
        self._jobs: deque[_Job] = deque()
        self._writer: asyncio.Task[None] | None = None
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
        return [entry.message for entry in self._entries if entry.state is _State.FAILED]

    @property
    def pending(self) -> int:
        """How many queued writes (messages and titles) have not finished."""
        return len(self._jobs)

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
            _id_of(in_reply_to, "in_reply_to")
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
        role = _ROLES.get(type(message))
        if role is None:
            raise InvalidArgumentError(
                "add takes a UserMessage, AssistantMessage, SystemMessage or ToolMessage, "
                f"not {type(message).__name__}"
            )
        author_id = None if author is None else _id_of(author, "from_")
        recipient_ids = tuple(_id_of(ref, "recipient") for ref in recipients)
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
        return self._on_loop(lambda: self._accept(_Entry(provisional, write, _State.PENDING)))

    def _on_loop(self, call: Callable[[], T]) -> T:
        """Run ``call`` on this conversation's loop and return its result."""
        if _running_loop() is self._loop:
            return call()
        if not self._loop.is_running():
            raise RuntimeError(f"the event loop of conversation {self.session_id} is not running")
        result: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                result.set_result(call())
            except BaseException as error:
                result.set_exception(error)

        self._loop.call_soon_threadsafe(run)
        return result.result()

    def _accept(self, entry: _Entry) -> str:
        if self.closed:
            raise StoreClosedError(f"conversation {self.session_id} is closed")
        self._entries.append(entry)
        message = entry.message
        # Queue the write before publishing, so a listener that adds a reply queues it after.
        self._enqueue(lambda: self._write(entry), entry)
        if message.role is Role.USER and not self._title:
            title = _interim_title(message.content)
            if title is not None:
                self._title = title
                self._enqueue(lambda: self._persist_title(title))
        generator = self._factory.title_generator
        if generator is not None and len(self._entries) % self._factory.title_every == 0:
            self._start_title_generation(generator, message)
        self._publish_status(entry, MessageStatus.ADDED)
        return message.id

    # ---------------------------------------------------------------- the write queue

    def _enqueue(self, run: Callable[[], Awaitable[None]], entry: _Entry | None = None) -> _Job:
        job = _Job(run, self._loop.create_future(), entry)
        self._jobs.append(job)
        if self._writer is None:
            self._writer = self._factory._spawn(
                self._drain(), f"convostore writer {self.session_id}"
            )
        return job

    async def _drain(self) -> None:
        """The conversation's one writer: runs the queued jobs in order, then ends."""
        try:
            while self._jobs:
                job = self._jobs[0]
                try:
                    await job.run()
                except Exception:
                    logger.exception("conversation %s: a queued write failed", self.session_id)
                self._jobs.popleft()
                job.done.set_result(None)
        except asyncio.CancelledError as cancelled:
            self._abandon(cancelled)
            raise
        finally:
            self._writer = None

    def _abandon(self, cancelled: asyncio.CancelledError) -> None:
        """The writer was cancelled (its loop is shutting down): close, fail what is left."""
        self._closed = True
        jobs = list(self._jobs)
        self._jobs.clear()
        unwritten = [job.entry for job in jobs if job.entry is not None]
        if unwritten:
            logger.warning(
                "conversation %s: %d message(s) not persisted, the writer was cancelled; "
                "close the store or flush before the event loop ends",
                self.session_id,
                len(unwritten),
            )
        for entry in unwritten:
            entry.state, entry.error = _State.FAILED, cancelled
            self._publish_status(entry, MessageStatus.PERSISTENCE_FAILED, cancelled)
        for job in jobs:
            if not job.done.done():
                job.done.set_result(None)

    async def _write(self, entry: _Entry) -> None:
        assert entry.write is not None
        try:
            stored = await self._store.add_message(self.session_id, entry.write)
        except Exception as error:
            entry.state, entry.error = _State.FAILED, error
            logger.warning(
                "conversation %s: message %s not persisted: %r",
                self.session_id,
                entry.message.id,
                error,
            )
            self._publish_status(entry, MessageStatus.PERSISTENCE_FAILED, error)
            return
        entry.message, entry.state, entry.error = stored, _State.STORED, None
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
        self._enqueue(lambda: self._persist_title(title))

    def _publish_status(
        self, entry: _Entry, status: MessageStatus, error: BaseException | None = None
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
        if self._jobs:
            await asyncio.shield(self._jobs[-1].done)
        await self._factory._await_listeners(self.session_id)

    async def retry_failed(self) -> list[str]:
        """Queue every failed message again, in order, with its id (so a write that did
        land is not duplicated), and wait; returns the ids that failed again."""
        if self.closed:
            raise StoreClosedError(f"conversation {self.session_id} is closed")
        retried = [entry for entry in self._entries if entry.state is _State.FAILED]
        for entry in retried:
            entry.state, entry.error = _State.PENDING, None
            self._enqueue(functools.partial(self._write, entry), entry)
        await self.flush()
        return [entry.message.id for entry in retried if entry.state is _State.FAILED]

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


# --------------------------------------------------------------------------------------
# Factories

C = TypeVar("C", bound=StoredConversation)


class BaseConversationFactory(Generic[C]):
    """Makes conversations of one class on one store, and publishes their events.

    Holds one live conversation per session: `load` and `create_for_participants`
    return it while it is alive, so every add to a session goes through one writer.
    Registers with the store so that closing the store flushes every conversation
    first, and republishes the store's `EmbeddingFailed` for its sessions.
    """

    def __init__(
        self,
        store: Store,
        conversation_class: type[C],
        *,
        title_generator: TitleGenerator | None = None,
        title_every: int = 1,
    ) -> None:
        if not isinstance(store, Store):
            raise InvalidArgumentError(
                f"a factory needs a Store, not {type(store).__name__} "
                "(for a convostore.sync store, use ConversationFactory.for_sync_store)"
            )
        if not isinstance(title_every, int) or isinstance(title_every, bool) or title_every < 1:
            raise InvalidArgumentError("title_every must be a positive integer")
        if title_generator is not None and not callable(title_generator):
            raise InvalidArgumentError("title_generator must be callable")
        self.store = store
        self.title_generator = title_generator
        self.title_every = title_every
        self._conversation_class = conversation_class
        self._live: weakref.WeakValueDictionary[str, C] = weakref.WeakValueDictionary()
        self._listeners: list[Listener] = []
        self._streams: dict[str, weakref.WeakSet[EventStream]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._listener_tasks: dict[str, set[asyncio.Future[Any]]] = {}
        self._closed = False
        self._store_subscriptions = (
            store.before_close(self._on_store_closing),
            store.on_embedding_failed(self._on_embedding_failed),
        )

    @property
    def closed(self) -> bool:
        return self._closed

    # ---------------------------------------------------------------- conversations

    async def create(
        self,
        session_id: str | None = None,
        owner: UserRef | None = None,
        title: str | None = None,
    ) -> C:
        """A conversation on a new session; its user is ``owner``, it has no agent.
        An existing ``session_id`` raises `SessionExistsError`."""
        self._check_open()
        session = await self.store.create_session(owner, session_id=session_id, title=title)
        return self._attach(session, session.owner_id, None, ())

    async def create_for_participants(
        self,
        session_id: str | None,
        user: UserRef,
        agent: UserRef,
        title: str | None = None,
    ) -> C:
        """The 1-1 chat of ``user`` with ``agent`` in session ``session_id``.

        An existing session owned by ``user`` is reused with its stored messages (and
        gets ``title`` only if it has none); one owned by someone else, or held with
        another agent, raises `InvalidArgumentError` (a `ValueError`). Otherwise the
        session is created, owned by ``user`` and held with ``agent``.
        """
        self._check_open()
        user_id, agent_id = _id_of(user, "user"), _id_of(agent, "agent")
        session = None if session_id is None else await self.store.get_session(session_id)
        if session is None:
            new_session_id = session_id or new_id()
            created = await self.store.create_session_if_absent(
                user, session_id=new_session_id, title=title, held_with=agent
            )
            session = await self.store.get_session(new_session_id)
            if session is None:
                raise SessionNotFoundError(f"session {new_session_id!r} was deleted meanwhile")
            if created:
                return self._attach(session, user_id, agent_id, ())
        if session.owner_id != user_id:
            raise InvalidArgumentError(f"session {session.id!r} is not a session of {user_id!r}")
        if session.held_with not in (None, agent_id):
            raise InvalidArgumentError(
                f"session {session.id!r} is held with another agent than {agent_id!r}"
            )
        conversation = self._live.get(session.id)
        if conversation is None or conversation.closed:
            stored = await self.store.messages(session.id)
            conversation = self._attach(session, user_id, agent_id, stored)
        if conversation._agent_id is None:
            conversation._agent_id = agent_id
        if title and not conversation._title:
            conversation._title = title
            conversation._enqueue(lambda: conversation._persist_title(title))
        return conversation

    async def load(self, session_id: str) -> C:
        """The conversation of a stored session, with its stored messages; its user is
        the owner and its agent the user it is held with. `SessionNotFoundError` if
        unknown. A live conversation of that session is returned as it is."""
        self._check_open()
        live = self._live.get(session_id)
        if live is not None and not live.closed:
            return live
        session = await self.store.get_session(session_id)
        if session is None:
            raise SessionNotFoundError(f"no session {session_id!r}")
        stored = await self.store.messages(session_id)
        return self._attach(session, session.owner_id, session.held_with, stored)

    def _attach(
        self,
        session: Session,
        user_id: str | None,
        agent_id: str | None,
        stored: Sequence[Message],
    ) -> C:
        live = self._live.get(session.id)
        if live is not None and not live.closed:
            return live
        conversation = self._conversation_class(self, session, user_id, agent_id, stored)
        self._live[session.id] = conversation
        return conversation

    def _forget(self, conversation: StoredConversation) -> None:
        if self._live.get(conversation.session_id) is conversation:
            del self._live[conversation.session_id]

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("this conversation factory is closed")

    # ---------------------------------------------------------------- events

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every event of this factory's conversations, on their
        event loop; returns a function that unsubscribes it.

        An async listener's awaitable runs as a task that `flush` waits for. A listener
        that raises is logged and affects neither persistence nor other listeners.
        """
        if not callable(listener):
            raise InvalidArgumentError("a listener must be callable")
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def events(
        self, session_id: str, *, max_pending: int = DEFAULT_MAX_PENDING_EVENTS
    ) -> EventStream:
        """The events of one session from now on, as an async iterator (`EventStream`:
        bounded, the oldest dropped for a reader more than ``max_pending`` behind).

            async with factory.events(session_id) as stream:
                async for event in stream: ...
        """
        self._check_open()
        _id_of(session_id, "session_id")
        if not isinstance(max_pending, int) or isinstance(max_pending, bool) or max_pending < 1:
            raise InvalidArgumentError("max_pending must be a positive integer")
        stream = EventStream(session_id, max_pending, self._unsubscribe_stream)
        self._streams.setdefault(session_id, weakref.WeakSet()).add(stream)
        return stream

    def _unsubscribe_stream(self, stream: EventStream) -> None:
        streams = self._streams.get(stream.session_id)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del self._streams[stream.session_id]

    def _publish(self, event: ConversationEvent) -> None:
        """Deliver ``event`` to the listeners, then the session's streams. On the loop."""
        for listener in tuple(self._listeners):
            try:
                result = listener(event)
            except Exception:
                logger.exception("a conversation listener failed on %r", event)
                continue
            if inspect.isawaitable(result):
                self._track_listener(event.session_id, asyncio.ensure_future(result))
        streams = self._streams.get(event.session_id)
        if streams is None:
            return
        if not streams:  # every reader was collected without closing its stream
            del self._streams[event.session_id]
        for stream in tuple(streams):
            stream._offer(event)

    def _track_listener(self, session_id: str, task: asyncio.Future[Any]) -> None:
        tasks = self._listener_tasks.setdefault(session_id, set())
        tasks.add(task)

        def finished(done: asyncio.Future[Any]) -> None:
            tasks.discard(done)
            if not tasks and self._listener_tasks.get(session_id) is tasks:
                del self._listener_tasks[session_id]
            if not done.cancelled() and done.exception() is not None:
                logger.error(
                    "an async conversation listener failed on session %s",
                    session_id,
                    exc_info=done.exception(),
                )

        task.add_done_callback(finished)

    async def _await_listeners(self, session_id: str) -> None:
        running = self._listener_tasks.get(session_id, set()) - {asyncio.current_task()}
        if running:
            await asyncio.wait(running)

    def _on_embedding_failed(self, failure: EmbeddingFailed) -> None:
        conversation = self._live.get(failure.session_id)
        if conversation is None:
            return
        if _running_loop() is conversation._loop:
            self._publish(failure)
        else:
            conversation._loop.call_soon_threadsafe(self._publish, failure)

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run ``work`` as a task held until done, so it cannot be collected mid-flight."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---------------------------------------------------------------- closing

    async def _on_store_closing(self) -> None:
        await self._shut_down()

    async def _shut_down(self) -> None:
        """Refuse new adds, flush every conversation, end the streams, leave the store."""
        if self._closed:
            return
        self._closed = True
        conversations = list(self._live.values())
        await asyncio.gather(*(conversation.flush() for conversation in conversations))
        for streams in list(self._streams.values()):
            for stream in tuple(streams):
                stream._end()
        self._streams.clear()
        for unsubscribe in self._store_subscriptions:
            unsubscribe()

    async def close(self) -> None:
        """Refuse new adds, flush every conversation, and end the event streams.
        The store stays open."""
        await self._shut_down()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class ConversationFactory(BaseConversationFactory[StoredConversation]):
    """Makes `StoredConversation`s on ``store``.

    ``title_generator`` (sync or async, message -> str) retitles the session after
    every ``title_every``-th message of a conversation (counting the messages it
    loaded); until then the first user message gives an interim title. Generation runs
    beside the writes, so a slow generator delays no message; when generations finish
    out of order, the later message's title wins. One that raises or returns a blank
    title is logged and the title is kept.
    """

    def __init__(
        self,
        store: Store,
        *,
        title_generator: TitleGenerator | None = None,
        title_every: int = 1,
    ) -> None:
        super().__init__(
            store,
            StoredConversation,
            title_generator=title_generator,
            title_every=title_every,
        )

    @classmethod
    def for_sync_store(
        cls,
        store: SyncStore,
        *,
        title_generator: TitleGenerator | None = None,
        title_every: int = 1,
    ) -> SyncProxy:
        """A factory on a `convostore.sync` store, with blocking methods; the
        conversations it returns are blocking too (`add` is a plain call either way).
        Listeners run on the facade's loop thread; `events` gives a plain iterator."""
        factory = cls(store.target, title_generator=title_generator, title_every=title_every)
        wrapped: SyncProxy = store.wrap(factory)
        return wrapped


class InMemoryConversationFactory(BaseConversationFactory[InMemoryConversation]):
    """Makes `InMemoryConversation`s on its own memory store (``factory.store``),
    exactly as `ConversationFactory` does on any store. Closing it closes that store."""

    def __init__(
        self,
        *,
        title_generator: TitleGenerator | None = None,
        title_every: int = 1,
    ) -> None:
        super().__init__(
            memory_store(),
            InMemoryConversation,
            title_generator=title_generator,
            title_every=title_every,
        )

    async def close(self) -> None:
        """Flush and close as `BaseConversationFactory.close` does, then close the store."""
        await super().close()
        await self.store.close()
