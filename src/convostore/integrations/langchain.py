"""convostore as LangChain's chat message history (extra ``langchain``), for
``RunnableWithMessageHistory(chain, lambda sid: ConvostoreChatMessageHistory(sid, store))``.

>>> import convostore.sync
>>> from langchain_core.messages import AIMessage, HumanMessage
>>> with convostore.sync.connect("sqlite:///chat.db") as store:
...     history = ConvostoreChatMessageHistory("conversation-1", store)
...     history.add_messages([HumanMessage("Hi"), AIMessage("Hello!")])
...     [message.content for message in history.messages]
['Hi', 'Hello!']

Human, AI (with their tool calls), tool and system messages are convostore messages and
read back equal (each keeps LangChain's own form too). Other message types are events
of type ``LANGCHAIN.<TYPE>``. `clear` appends a record (a compaction boundary): the log
keeps every message, and reads follow the active view.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from convostore.errors import InvalidArgumentError
from convostore.integrations._common import (
    ATTEMPTS,
    AnyWrite,
    StoreRunner,
    append_all,
    framework_event_type,
    gave_up,
    missing_framework,
    read_view,
    rewrite_view,
    stored_form,
)
from convostore.model import Event, EventWrite, Message, MessageWrite, Role, ToolCall
from convostore.store import Store
from convostore.sync import SyncStore

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        messages_from_dict,
    )
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_framework("langchain-core", "langchain") from error

__all__ = ["ConvostoreChatMessageHistory", "event_to_message", "message_to_write"]

KEY = "langchain"
EVENT_PREFIX = "LANGCHAIN"
_ROLE_OF_TYPE = {"human": Role.USER, "ai": Role.ASSISTANT, "system": Role.SYSTEM}
_ROLE_OF_CHAT_ROLE = {"user": Role.USER, "assistant": Role.ASSISTANT, "system": Role.SYSTEM}


class ConvostoreChatMessageHistory(BaseChatMessageHistory):
    """LangChain's `BaseChatMessageHistory` on a convostore store, async and sync.

    ``session_id`` is the convostore session's id; the session is created (ownerless) on
    the first write. The blocking methods need a `convostore.sync` store, or an async
    store whose event loop runs in another thread."""

    def __init__(self, session_id: str, store: Store | SyncStore) -> None:
        self.session_id = session_id
        self._runner = StoreRunner(store)
        self.store = self._runner.store
        self._created = False

    # ------------------------------------------------------------------ async

    async def aget_messages(self) -> list[BaseMessage]:
        events = await read_view(self.store, self.session_id)
        return [message for event in events if (message := event_to_message(event))]

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        writes = [message_to_write(message) for message in messages]
        if not writes:
            return
        if not self._created:
            await self.store.create_session_if_absent(
                None, session_id=self.session_id, metadata={"framework": "langchain"}
            )
            self._created = True
        await append_all(self.store, self.session_id, writes)

    async def aclear(self) -> None:
        for _ in range(ATTEMPTS):
            version = await self.store.version(self.session_id)
            if version == 0:
                return
            view = await read_view(self.store, self.session_id)
            if not view or await rewrite_view(
                self.store, self.session_id, version, view, [], reason="clear"
            ):
                return
        raise gave_up("clear", self.session_id)

    # ------------------------------------------------------------------ blocking

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return self._runner.run(self.aget_messages())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self._runner.run(self.aadd_messages(list(messages)))

    def clear(self) -> None:
        self._runner.run(self.aclear())


def message_to_write(message: BaseMessage) -> AnyWrite:
    """The write that stores one LangChain message: whole, and as what it means."""
    if not isinstance(message, BaseMessage):
        raise InvalidArgumentError(f"expected a LangChain message, not {type(message).__name__}")
    whole = {"type": message.type, "data": message.model_dump(mode="json")}
    metadata = {KEY: {"message": whole}}
    text = _text(message.content)
    if isinstance(message, AIMessage):
        calls = [
            ToolCall(call.get("id") or f"call-{index}", call["name"], dict(call["args"]))
            for index, call in enumerate(message.tool_calls)
        ]
        return MessageWrite(Role.ASSISTANT, text, tool_calls=calls, metadata=metadata)
    if isinstance(message, ToolMessage):
        return MessageWrite(
            Role.TOOL, text, tool_call_id=str(message.tool_call_id), metadata=metadata
        )
    role = _ROLE_OF_TYPE.get(message.type)
    if isinstance(message, ChatMessage):
        role = _ROLE_OF_CHAT_ROLE.get(message.role)
    if role is not None:
        return MessageWrite(role, text, metadata=metadata)
    return EventWrite(framework_event_type(EVENT_PREFIX, message.type), whole)


def event_to_message(event: Event) -> BaseMessage | None:
    """The LangChain message an event stands for, or None for an event that is no
    message (a compaction boundary, another framework's own record)."""
    stored = stored_form(event, KEY)
    whole = stored.get("message") if stored is not None else None
    if whole is None and event.type.startswith(EVENT_PREFIX + "."):
        whole = event.payload
    if isinstance(whole, Mapping) and "type" in whole and "data" in whole:
        return messages_from_dict([dict(whole)])[0]
    if not isinstance(event, Message):
        return None
    if event.role == Role.USER:
        return HumanMessage(event.content)
    if event.role == Role.SYSTEM:
        return SystemMessage(event.content)
    if event.role == Role.TOOL:
        return ToolMessage(event.content, tool_call_id=event.tool_call_id or "")
    return AIMessage(
        event.content,
        tool_calls=[
            {"id": call.id, "name": call.name, "args": _args(call.arguments), "type": "tool_call"}
            for call in event.tool_calls
        ],
    )


def _args(arguments: Any) -> dict[str, Any]:
    return dict(arguments) if isinstance(arguments, Mapping) else {"arguments": arguments}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content or ():
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "\n".join(parts)
