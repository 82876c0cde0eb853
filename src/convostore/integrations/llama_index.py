"""convostore as LlamaIndex's chat stores (extra ``llama-index``).

- `ConvostoreChatStore(store)`: a `BaseChatStore`, for ``ChatMemoryBuffer`` and the
  other chat memory buffers (``ChatMemoryBuffer.from_defaults(chat_store=...)``).
- `ConvostoreDBChatStore(store, table_name=...)`: the store `llama_index.core.memory.Memory`
  keeps its queue in (``Memory.from_defaults(chat_store=...)``), in place of its SQLAlchemy
  chat store.

>>> import convostore.sync
>>> from llama_index.core.llms import ChatMessage
>>> with convostore.sync.connect("sqlite:///chat.db") as store:
...     chat_store = ConvostoreChatStore(store)
...     chat_store.add_message("ada", ChatMessage(role="user", content="Hi"))
...     [message.content for message in chat_store.get_messages("ada")]
['Hi']

A key is a convostore session, owned by the user ``llama-index:<namespace>`` (for the
DB chat store the namespace is its table name), with the id ``session_id_for(namespace,
key)``; keys list in the order they were first written. A message is a convostore
message (tool calls and results too) and keeps LlamaIndex's own form, so it reads back
equal. The log is append-only: a replace or a delete writes a compaction boundary, so
the active view holds a key's messages and the full log keeps every one.

The DB chat store's ``ACTIVE`` messages are the active view; its ``ARCHIVED`` ones are the
messages of the full log the view has left (by ``archive_oldest_messages``, or by a
compaction through the store's API) and no delete has removed. Its ``idx`` is a
message's position in its session's log, `Event.seq`; the `BaseChatStore`'s ``idx`` is a
position in ``get_messages(key)``, as in LlamaIndex's own stores.

The blocking methods work with a `convostore.sync` store from any thread, a running event
loop's included; the async ones from any event loop (LlamaIndex runs some on loops of its
own), each call going to the loop the store runs on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from convostore.errors import ConflictError, InvalidArgumentError
from convostore.filters import EventFilter
from convostore.ids import new_id
from convostore.integrations._common import (
    AnyWrite,
    copy_write,
    missing_framework,
    stored_form,
    tool_arguments,
)
from convostore.integrations._loops import LoopBridge
from convostore.model import (
    COMPACTION,
    Event,
    EventWrite,
    Message,
    MessageWrite,
    PageRequest,
    Role,
    Session,
    SessionOrder,
    ToolCall,
    User,
)
from convostore.store import Store
from convostore.sync import SyncStore

try:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.storage.chat_store.base import BaseChatStore
    from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_framework("llama-index-core", "llama-index") from error

__all__ = [
    "ConvostoreChatStore",
    "ConvostoreDBChatStore",
    "archive_boundary",
    "chat_message_to_write",
    "event_to_chat_message",
    "owner_for",
    "session_id_for",
]

W = TypeVar("W", MessageWrite, EventWrite)
KEY = "llama_index"
SESSION_KIND = "llama_index"
DEFAULT_NAMESPACE = "chat_store"
# How many times a replace or a delete reads again after another writer moved the log.
ATTEMPTS = 16
_ROLE_OF = {
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "chatbot": Role.ASSISTANT,
    "model": Role.ASSISTANT,
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
    "tool": Role.TOOL,
    "function": Role.TOOL,
}


def session_id_for(namespace: str, key: str) -> str:
    """The convostore session id of a chat store key."""
    return "llama-index:" + json.dumps([namespace, key], ensure_ascii=False, separators=(",", ":"))


def owner_for(namespace: str) -> User:
    """The user who owns a namespace's sessions."""
    return User(f"llama-index:{namespace}", namespace, kind="agent")


# ---------------------------------------------------------------- messages


def chat_message_to_write(message: ChatMessage, *, event_id: str | None = None) -> MessageWrite:
    """The write that stores one LlamaIndex message: whole, and as what it means."""
    if not isinstance(message, ChatMessage):
        raise InvalidArgumentError(f"expected a LlamaIndex ChatMessage, not {type(message)!r}")
    whole = message.model_dump(mode="json")
    role = _ROLE_OF.get(str(whole.get("role")), Role.USER)
    extra = whole.get("additional_kwargs") or {}
    tool_call_id = extra.get("tool_call_id") if role == Role.TOOL else None
    return MessageWrite(
        role,
        message.content or "",
        tool_calls=_tool_calls(whole),
        tool_call_id=str(tool_call_id) if tool_call_id else None,
        metadata={KEY: {"message": whole}},
        id=event_id,
    )


def event_to_chat_message(event: Event) -> ChatMessage | None:
    """The LlamaIndex message an event stands for, or None for an event that is none."""
    if not isinstance(event, Message):
        return None
    stored = stored_form(event, KEY)
    whole = stored.get("message") if stored is not None else None
    if isinstance(whole, Mapping):
        return ChatMessage.model_validate(dict(whole))
    extra: dict[str, Any] = {}
    if event.tool_call_id is not None:
        extra["tool_call_id"] = event.tool_call_id
    if event.tool_calls:
        extra["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in event.tool_calls
        ]
    return ChatMessage(role=str(event.role), content=event.content, additional_kwargs=extra)


def _tool_calls(whole: Mapping[str, Any]) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for index, block in enumerate(whole.get("blocks") or ()):
        if isinstance(block, Mapping) and block.get("block_type") == "tool_call":
            arguments = block.get("tool_kwargs")
            calls.append(
                ToolCall(
                    str(block.get("tool_call_id") or f"call-{index}"),
                    str(block.get("tool_name")),
                    dict(arguments) if isinstance(arguments, Mapping) else {"input": arguments},
                )
            )
    for index, call in enumerate((whole.get("additional_kwargs") or {}).get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            calls.append(
                ToolCall(
                    str(call.get("id") or f"call-{index}"),
                    str(function.get("name")),
                    tool_arguments(function.get("arguments")),
                )
            )
    return calls


# ---------------------------------------------------------------- the log of a key


@dataclass(frozen=True, slots=True)
class _Log:
    """A key's full log read once: the active view's members and what deletes removed."""

    events: list[Event]
    in_view: frozenset[str]
    deleted: frozenset[str]

    def archived(self) -> list[Message]:
        return [
            e
            for e in self.events
            if isinstance(e, Message)
            and not e.synthetic
            and e.id not in self.in_view
            and e.id not in self.deleted
        ]

    def every(self) -> list[Message]:
        """Active and archived messages, in log order."""
        return [
            e
            for e in self.events
            if isinstance(e, Message)
            and e.id not in self.deleted
            and (e.id in self.in_view or not e.synthetic)
        ]


def _replay(events: list[Event]) -> _Log:
    in_view: set[str] = set()
    deleted: set[str] = set()
    for event in events:
        if event.type == COMPACTION and isinstance(event.payload, Mapping):
            in_view = {str(i) for i in event.payload.get("kept_event_ids") or ()}
            deleted.update(str(i) for i in event.payload.get("deleted_event_ids") or ())
        else:
            in_view.add(event.id)
    return _Log(events, frozenset(in_view), frozenset(deleted))


class _KeyedLogs:
    """The operations both chat stores share, on the sessions of one namespace."""

    def __init__(self, store: Store | SyncStore, namespace: str) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise InvalidArgumentError("a LlamaIndex chat store's namespace must be a string")
        self.bridge = LoopBridge(store)
        self.store = self.bridge.store
        self.namespace = namespace
        self.owner = owner_for(namespace)
        self._created: set[str] = set()

    def session_id(self, key: str) -> str:
        if not isinstance(key, str):
            raise InvalidArgumentError(f"a chat store key must be a string, not {type(key)!r}")
        return session_id_for(self.namespace, key)

    async def ensure(self, key: str) -> str:
        session_id = self.session_id(key)
        if session_id not in self._created:
            await self.store.create_session_if_absent(
                self.owner,
                session_id=session_id,
                title=key[:200],
                kind=SESSION_KIND,
                metadata={KEY: {"namespace": self.namespace, "key": key}},
            )
            self._created.add(session_id)
        return session_id

    async def view(self, key: str) -> list[Message]:
        events = await self.store.read(self.session_id(key), EventFilter(active_view=True))
        return [e for e in events if isinstance(e, Message)]

    async def log(self, key: str) -> _Log:
        return _replay(await self.store.read(self.session_id(key)))

    async def append(self, key: str, messages: Sequence[ChatMessage]) -> None:
        writes = [chat_message_to_write(message) for message in messages]
        if not writes:
            return
        session_id = await self.ensure(key)
        if len(writes) == 1:
            await self.store.append_event(session_id, writes[0])
            return
        for _ in range(ATTEMPTS):
            version = await self.store.version(session_id)
            if await self.store.append_events(session_id, writes, expected_version=version):
                return
        raise _gave_up(key)

    async def rewrite(
        self,
        key: str,
        plan: Any,
        *,
        reason: str,
        create: bool = False,
    ) -> Any:
        """Run ``plan(view_events, log) -> (keep, deleted_ids, before, then, result)`` on a
        fresh read and write its boundary in one batch checked against the version read,
        reading again (a bounded number of times) when another writer moved the log.
        ``plan`` returns None when there is nothing to write."""
        session_id = await self.ensure(key) if create else self.session_id(key)
        for _ in range(ATTEMPTS):
            version = await self.store.version(session_id)
            if version == 0 and not create:
                return plan([], _Log([], frozenset(), frozenset()))[-1]
            view = await self.store.read(session_id, EventFilter(active_view=True))
            log = await self.log(key) if plan.needs_log else None
            keep, deleted, before, then, result = plan(view, log)
            if keep is None:
                return result
            batch = _boundary_batch(view, keep, deleted, before, then, reason)
            if await self.store.append_events(session_id, batch, expected_version=version):
                return result
        raise _gave_up(key)

    async def keys(self) -> list[str]:
        sessions: list[Session] = []
        cursor: str | None = None
        while True:
            page = await self.store.list_sessions(
                self.owner.id, PageRequest(size=100, cursor=cursor, order=SessionOrder.CREATED)
            )
            sessions.extend(s for s in page.items if s.kind == SESSION_KIND)
            cursor = page.next_cursor
            if cursor is None:
                break
        sessions.sort(key=lambda s: s.created_at)
        keys: list[str] = []
        for session in sessions:
            form = session.metadata.get(KEY) if isinstance(session.metadata, Mapping) else None
            if isinstance(form, Mapping) and isinstance(form.get("key"), str):
                keys.append(form["key"])
        return keys

    async def forget(self, key: str) -> bool:
        self._created.discard(self.session_id(key))
        return await self.store.delete_session(self.session_id(key))


def archive_boundary(event_id: str, kept_event_ids: Sequence[str]) -> EventWrite:
    """A boundary that leaves in the view only ``kept_event_ids``: what it drops is
    archived (an importer writes it after a key's messages)."""
    return EventWrite(
        COMPACTION,
        {"kept_event_ids": list(kept_event_ids), "reason": "archive"},
        id=event_id,
        synthetic=True,
    )


def _gave_up(key: str) -> ConflictError:
    return ConflictError(
        f"chat store key {key!r}: other writers changed it on each of {ATTEMPTS} attempts"
    )


def _boundary_batch(
    view: Sequence[Event],
    keep: Sequence[Event],
    deleted: Iterable[str],
    before: Sequence[AnyWrite],
    then: Sequence[AnyWrite],
    reason: str,
) -> list[AnyWrite]:
    """``before``, then a compaction boundary whose view is ``keep`` (a subsequence of
    ``view``) followed by ``then``, recording the ids a delete removed. The summaries an
    earlier compaction put at the head of the view follow its kept events in the log, so
    they are written again as this boundary's summaries to keep the view's order."""
    leading = 0
    while leading < len(view) and view[leading].synthetic and view[leading].type != COMPACTION:
        leading += 1
    summary_source = {event.id for event in view[:leading]}
    summaries: list[AnyWrite] = [
        replace(copy_write(event, synthetic=True), id=new_id())
        for event in keep
        if event.id in summary_source
    ]
    boundary = EventWrite(
        COMPACTION,
        {
            "kept_event_ids": [e.id for e in keep if e.id not in summary_source],
            "summary_event_ids": [str(w.id) for w in summaries],
            "deleted_event_ids": sorted(set(deleted)),
            "reason": reason,
        },
        synthetic=True,
    )
    return [*before, boundary, *summaries, *then]


def _with_new_id(write: W, event_id: str) -> W:
    return replace(write, id=event_id)


class _Plan:
    """A rewrite's plan: a callable with a flag saying whether it needs the full log."""

    def __init__(self, function: Any, needs_log: bool = False) -> None:
        self.function = function
        self.needs_log = needs_log

    def __call__(self, view: list[Event], log: _Log | None) -> Any:
        return self.function(view, log)


def _messages(events: Iterable[Event]) -> list[ChatMessage]:
    return [m for e in events if (m := event_to_chat_message(e)) is not None]


# ---------------------------------------------------------------- BaseChatStore


class ConvostoreChatStore(BaseChatStore):
    """LlamaIndex's `BaseChatStore` on a convostore store, blocking and async."""

    namespace: str = DEFAULT_NAMESPACE
    _logs: _KeyedLogs = PrivateAttr()

    def __init__(self, store: Store | SyncStore, *, namespace: str = DEFAULT_NAMESPACE) -> None:
        fields: dict[str, Any] = {"namespace": namespace}
        super().__init__(**fields)
        self._logs = _KeyedLogs(store, namespace)

    @classmethod
    def class_name(cls) -> str:
        return "ConvostoreChatStore"

    @property
    def store(self) -> Store:
        return self._logs.store

    # ------------------------------------------------------------ async, on the home loop

    async def _set(self, key: str, messages: list[ChatMessage]) -> None:
        writes = [chat_message_to_write(message) for message in messages]

        def plan(view: list[Event], log: _Log | None) -> Any:
            gone = [e.id for e in view if isinstance(e, Message)]
            return [], gone, (), writes, None

        await self._logs.rewrite(key, _Plan(plan), reason="set", create=True)

    async def _add(self, key: str, message: ChatMessage, idx: int | None) -> None:
        if idx is None:
            await self._logs.append(key, [message])
            return
        write = chat_message_to_write(message)

        def plan(view: list[Event], log: _Log | None) -> Any:
            # As list.insert: the message goes before the idx-th; the ones after it are
            # written again behind it (the log keeps their first writes).
            positions = [i for i, e in enumerate(view) if isinstance(e, Message)]
            at = idx if idx >= 0 else max(len(positions) + idx, 0)
            cut = positions[at] if at < len(positions) else len(view)
            tail = [copy_write(e) for e in view[cut:]]
            return view[:cut], (), (), [write, *tail], None

        await self._logs.rewrite(key, _Plan(plan), reason="insert", create=True)

    async def _get(self, key: str) -> list[ChatMessage]:
        return _messages(await self._logs.view(key))

    async def _delete_all(self, key: str) -> list[ChatMessage] | None:
        if await self.store.get_session(self._logs.session_id(key)) is None:
            return None
        messages = await self._get(key)
        await self._logs.forget(key)
        return messages

    async def _delete_at(self, key: str, idx: int) -> ChatMessage | None:
        def plan(view: list[Event], log: _Log | None) -> Any:
            messages = [e for e in view if isinstance(e, Message)]
            if not 0 <= idx < len(messages):
                return None, (), (), (), None
            target = messages[idx]
            keep = [e for e in view if e.id != target.id]
            return keep, [target.id], (), (), event_to_chat_message(target)

        result: ChatMessage | None = await self._logs.rewrite(key, _Plan(plan), reason="delete")
        return result

    async def _delete_last(self, key: str) -> ChatMessage | None:
        count = len(await self._logs.view(key))
        return await self._delete_at(key, count - 1) if count else None

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        await self._logs.bridge.call(self._set(key, list(messages)))

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        return await self._logs.bridge.call(self._get(key))

    async def async_add_message(
        self, key: str, message: ChatMessage, idx: int | None = None
    ) -> None:
        await self._logs.bridge.call(self._add(key, message, idx))

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        return await self._logs.bridge.call(self._delete_all(key))

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        return await self._logs.bridge.call(self._delete_at(key, idx))

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        return await self._logs.bridge.call(self._delete_last(key))

    async def aget_keys(self) -> list[str]:
        return await self._logs.bridge.call(self._logs.keys())

    # ------------------------------------------------------------ blocking

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        self._logs.bridge.run(self._set(key, list(messages)))

    def get_messages(self, key: str) -> list[ChatMessage]:
        return self._logs.bridge.run(self._get(key))

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        self._logs.bridge.run(self._add(key, message, idx))

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        return self._logs.bridge.run(self._delete_all(key))

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        return self._logs.bridge.run(self._delete_at(key, idx))

    def delete_last_message(self, key: str) -> ChatMessage | None:
        return self._logs.bridge.run(self._delete_last(key))

    def get_keys(self) -> list[str]:
        return self._logs.bridge.run(self._logs.keys())


# ---------------------------------------------------------------- AsyncDBChatStore


class ConvostoreDBChatStore(AsyncDBChatStore):
    """LlamaIndex's `AsyncDBChatStore` (what `Memory` keeps its queue in) on a
    convostore store: ``ACTIVE`` is the active view, ``ARCHIVED`` what the full log
    holds beyond it."""

    table_name: str
    _logs: _KeyedLogs = PrivateAttr()

    def __init__(self, store: Store | SyncStore, table_name: str = "llama_index_memory") -> None:
        fields: dict[str, Any] = {"table_name": table_name}
        super().__init__(**fields)
        self._logs = _KeyedLogs(store, table_name)

    @classmethod
    def class_name(cls) -> str:
        return "ConvostoreDBChatStore"

    @property
    def store(self) -> Store:
        return self._logs.store

    async def get_messages(
        self,
        key: str,
        status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[ChatMessage]:
        chosen = await self._logs.bridge.call(self._chosen(key, status))
        start = offset or 0
        chosen = chosen[start:] if limit is None else chosen[start : start + limit]
        return _messages(chosen)

    async def count_messages(
        self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE
    ) -> int:
        return len(await self._logs.bridge.call(self._chosen(key, status)))

    async def _chosen(self, key: str, status: MessageStatus | None) -> list[Message]:
        if status == MessageStatus.ACTIVE:
            return await self._logs.view(key)
        log = await self._logs.log(key)
        return log.archived() if status == MessageStatus.ARCHIVED else log.every()

    async def add_message(
        self, key: str, message: ChatMessage, status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        await self.add_messages(key, [message], status)

    async def add_messages(
        self,
        key: str,
        messages: list[ChatMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        if status == MessageStatus.ACTIVE:
            await self._logs.bridge.call(self._logs.append(key, list(messages)))
            return
        writes = [chat_message_to_write(message) for message in messages]
        if not writes:
            return
        writes = [_with_new_id(write, new_id()) for write in writes]

        def plan(view: list[Event], log: _Log | None) -> Any:
            return view, (), writes, (), None

        await self._logs.bridge.call(
            self._logs.rewrite(key, _Plan(plan), reason="archive", create=True)
        )

    async def set_messages(
        self,
        key: str,
        messages: list[ChatMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        writes = [chat_message_to_write(message) for message in messages]
        archived = status != MessageStatus.ACTIVE
        if archived:
            writes = [_with_new_id(write, new_id()) for write in writes]

        def plan(view: list[Event], log: _Log | None) -> Any:
            assert log is not None
            gone = [e.id for e in log.every()]
            if archived:
                return [], gone, writes, (), None
            return [], gone, (), writes, None

        await self._logs.bridge.call(
            self._logs.rewrite(key, _Plan(plan, needs_log=True), reason="set", create=True)
        )

    async def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        def plan(view: list[Event], log: _Log | None) -> Any:
            assert log is not None
            found = [e for e in log.every() if e.seq == idx]
            if not found:
                return None, (), (), (), None
            target = found[0]
            keep = [e for e in view if e.id != target.id]
            return keep, [target.id], (), (), event_to_chat_message(target)

        result: ChatMessage | None = await self._logs.bridge.call(
            self._logs.rewrite(key, _Plan(plan, needs_log=True), reason="delete")
        )
        return result

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        if status is None:
            await self._logs.bridge.call(self._logs.forget(key))
            return

        def plan(view: list[Event], log: _Log | None) -> Any:
            assert log is not None
            if status == MessageStatus.ACTIVE:
                gone = [e.id for e in view if isinstance(e, Message)]
                keep = [e for e in view if not isinstance(e, Message)]
            else:
                gone = [e.id for e in log.archived()]
                keep = view
            return (keep if gone else None), gone, (), (), None

        await self._logs.bridge.call(
            self._logs.rewrite(key, _Plan(plan, needs_log=True), reason="delete")
        )

    async def delete_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        return await self._drop_oldest(key, n, deleting=True)

    async def archive_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        return await self._drop_oldest(key, n, deleting=False)

    async def _drop_oldest(self, key: str, n: int, *, deleting: bool) -> list[ChatMessage]:
        def plan(view: list[Event], log: _Log | None) -> Any:
            oldest = [e for e in view if isinstance(e, Message)][: max(n, 0)]
            if not oldest:
                return None, (), (), (), []
            dropped = {e.id for e in oldest}
            keep = [e for e in view if e.id not in dropped]
            return keep, (dropped if deleting else ()), (), (), _messages(oldest)

        result: list[ChatMessage] = await self._logs.bridge.call(
            self._logs.rewrite(key, _Plan(plan), reason="delete_oldest" if deleting else "archive")
        )
        return result

    async def get_keys(self) -> list[str]:
        return await self._logs.bridge.call(self._logs.keys())
