"""Conversation factories: they make conversations on a store, keep one live
conversation per session, and publish the conversations' events."""

from __future__ import annotations

import asyncio
import inspect
import logging
import weakref
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar

from convostore.conversation.events import (
    DEFAULT_MAX_PENDING_EVENTS,
    ConversationEvent,
    EventStream,
    Listener,
)
from convostore.conversation.stored import (
    InMemoryConversation,
    StoredConversation,
    id_of,
    running_loop,
)
from convostore.conversation.titles import TitleGenerator
from convostore.embedding import EmbeddingFailed
from convostore.errors import (
    InvalidArgumentError,
    SessionNotFoundError,
    StoreClosedError,
    StoreError,
)
from convostore.ids import new_id
from convostore.model import Message, Session, UserRef
from convostore.store import Store

__all__ = ["BaseConversationFactory", "ConversationFactory", "InMemoryConversationFactory"]

logger = logging.getLogger("convostore.conversation")

C = TypeVar("C", bound=StoredConversation)
Blocking = TypeVar("Blocking", covariant=True)


class BlockingStore(Protocol[Blocking]):
    """What `ConversationFactory.for_sync_store` needs of a sync store (a
    `convostore.sync.SyncStore`): the async store it wraps, and the wrapping of a factory
    made on it. The facade sits above this module, so it is named here only by shape."""

    @property
    def target(self) -> Store: ...

    def blocking_factory(self, factory: BaseConversationFactory[Any]) -> Blocking: ...


class BaseConversationFactory(Generic[C]):
    """Makes conversations of one class on one store, and publishes their events.

    Holds one live conversation per session: `load` and `create_for_participants`
    return it while it is alive, so every add to a session goes through one writer.
    Registers with the store so that closing the store flushes every conversation
    first, and republishes the store's `EmbeddingFailed` for its sessions.
    """

    def __init__(
        self,
        store: Store | None,
        conversation_class: type[C],
        *,
        title_generator: TitleGenerator | None = None,
        title_every: int = 1,
    ) -> None:
        if store is not None and not isinstance(store, Store):
            raise InvalidArgumentError(
                f"a factory needs a Store, not {type(store).__name__} "
                "(for a convostore.sync store, use ConversationFactory.for_sync_store)"
            )
        if not isinstance(title_every, int) or isinstance(title_every, bool) or title_every < 1:
            raise InvalidArgumentError("title_every must be a positive integer")
        if title_generator is not None and not callable(title_generator):
            raise InvalidArgumentError("title_generator must be callable")
        self.title_generator = title_generator
        self.title_every = title_every
        self._conversation_class = conversation_class
        self._live: weakref.WeakValueDictionary[str, C] = weakref.WeakValueDictionary()
        self._listeners: list[Listener] = []
        self._streams: dict[str, weakref.WeakSet[EventStream]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._listener_tasks: dict[str, set[asyncio.Future[Any]]] = {}
        self._closed = False
        self._store: Store | None = None
        self._store_subscriptions: tuple[Callable[[], None], ...] = ()
        if store is not None:
            self._bind(store)

    def _bind(self, store: Store) -> None:
        """Make ``store`` this factory's: its closing flushes the conversations first,
        and its embedding failures are republished."""
        self._store = store
        self._store_subscriptions = (
            store.before_close(self._on_store_closing),
            store.on_embedding_failed(self._on_embedding_failed),
        )

    @property
    def store(self) -> Store:
        """The store the conversations are written to."""
        if self._store is None:
            raise StoreError(
                "this factory opens its store at first use: create or load a "
                "conversation, or enter `async with factory`, first"
            )
        return self._store

    async def _open_store(self) -> Store:
        """The store, opened first where the factory opens its own."""
        return self.store

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
        store = await self._open_store()
        session = await store.create_session(owner, session_id=session_id, title=title)
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
        user_id, agent_id = id_of(user, "user"), id_of(agent, "agent")
        store = await self._open_store()
        session = None if session_id is None else await store.get_session(session_id)
        if session is None:
            new_session_id = session_id or new_id()
            created = await store.create_session_if_absent(
                user, session_id=new_session_id, title=title, held_with=agent
            )
            session = await store.get_session(new_session_id)
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
            stored = await store.messages(session.id)
            conversation = self._attach(session, user_id, agent_id, stored)
        if conversation._agent_id is None:
            conversation._agent_id = agent_id
        if title and not conversation._title:
            conversation._title = title
            conversation._queue.enqueue(lambda: conversation._persist_title(title))
        return conversation

    async def load(self, session_id: str) -> C:
        """The conversation of a stored session, with its stored messages; its user is
        the owner and its agent the user it is held with. `SessionNotFoundError` if
        unknown. A live conversation of that session is returned as it is."""
        self._check_open()
        live = self._live.get(session_id)
        if live is not None and not live.closed:
            return live
        store = await self._open_store()
        session = await store.get_session(session_id)
        if session is None:
            raise SessionNotFoundError(f"no session {session_id!r}")
        stored = await store.messages(session_id)
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

        >>> import asyncio
        >>> from convostore import InMemoryConversationFactory, User, UserMessage
        >>> async def first_statuses() -> list[str]:
        ...     async with InMemoryConversationFactory() as factory:
        ...         chat = await factory.create(owner=User("ada", "Ada Lovelace"))
        ...         async with factory.events(chat.session_id) as stream:
        ...             chat.add(UserMessage("hello"))
        ...             return [(await anext(stream)).status for _ in range(2)]
        >>> asyncio.run(first_statuses())
        [<MessageStatus.ADDED: 'added'>, <MessageStatus.PERSISTED: 'persisted'>]
        """
        self._check_open()
        id_of(session_id, "session_id")
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
        if running_loop() is conversation._loop:
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
        store: BlockingStore[Blocking],
        *,
        title_generator: TitleGenerator | None = None,
        title_every: int = 1,
    ) -> Blocking:
        """A factory on a `convostore.sync` store, with blocking methods; the
        conversations it returns are blocking too (`add` is a plain call either way).
        Listeners run on the facade's loop thread; `events` gives a plain iterator."""
        factory = cls(store.target, title_generator=title_generator, title_every=title_every)
        return store.blocking_factory(factory)


class InMemoryConversationFactory(BaseConversationFactory[InMemoryConversation]):
    """Makes `InMemoryConversation`s on its own ``memory://`` store (``factory.store``),
    exactly as `ConversationFactory` does on any store. The store is opened at first use
    (creating or loading a conversation, or entering ``async with``); closing the
    factory closes it."""

    def __init__(
        self,
        *,
        title_generator: TitleGenerator | None = None,
        title_every: int = 1,
    ) -> None:
        super().__init__(
            None,
            InMemoryConversation,
            title_generator=title_generator,
            title_every=title_every,
        )
        self._opening = asyncio.Lock()

    async def _open_store(self) -> Store:
        async with self._opening:
            if self._store is None:
                # Imported here: the registry loads when a store is opened, not before.
                from convostore.store.lifecycle import open_store

                self._check_open()
                self._bind(await open_store("memory://"))
        return self.store

    async def __aenter__(self) -> Self:
        await self._open_store()
        return self

    async def close(self) -> None:
        """Flush and close as `BaseConversationFactory.close` does, then close the store."""
        await super().close()
        if self._store is not None:
            await self._store.close()
