"""convostore as Microsoft Agent Framework's history provider (extra ``agent-framework``).

``Agent(client=client, context_providers=[ConvostoreHistoryProvider(store)])`` keeps each
session's history in the store:

>>> import asyncio, convostore.sync
>>> from agent_framework import Message
>>> with convostore.sync.connect("sqlite:///chat.db") as store:
...     history = ConvostoreHistoryProvider(store)
...     asyncio.run(history.save_messages("s1", [Message("user", ["Hi"])]))
...     [message.text for message in asyncio.run(history.get_messages("s1"))]
['Hi']

The framework's session id is the convostore session's id (``agent-framework:default``
for none); the session is created (ownerless) on the first save. A message is a
convostore message (function calls and results are tool calls and results) and keeps the
framework's own form, so it reads back as it was saved, values JSON cannot strictly hold
(NaN, infinities) included. A save stores only what is new, by the framework's own rule
(`filter_new_messages`: a message's id, else its content), in one write checked against
the log's version, so a run saved twice (as middleware may) stores nothing twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from convostore.errors import ConflictError, InvalidArgumentError
from convostore.filters import EventFilter
from convostore.integrations._common import missing_framework, stored_form, tool_arguments
from convostore.integrations._loops import LoopBridge
from convostore.model import MESSAGE, Event, Message, MessageWrite, Role, ToolCall
from convostore.store import Store
from convostore.sync import SyncStore

try:
    from agent_framework import Content, HistoryProvider
    from agent_framework import Message as AfMessage
    from agent_framework._sessions import filter_new_messages
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_framework("agent-framework-core", "agent-framework") from error

__all__ = ["ConvostoreHistoryProvider", "event_to_message", "message_to_write"]

KEY = "agent_framework"
DEFAULT_SESSION_ID = "agent-framework:default"
# How many times a save reads again after another writer moved the log.
ATTEMPTS = 16
_ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT, "system": Role.SYSTEM, "tool": Role.TOOL}


class ConvostoreHistoryProvider(HistoryProvider):
    """Agent Framework's `HistoryProvider` on a convostore store (async, from any
    event loop: each call goes to the loop the store runs on)."""

    DEFAULT_SOURCE_ID = "convostore"

    def __init__(
        self,
        store: Store | SyncStore,
        *,
        source_id: str = DEFAULT_SOURCE_ID,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        skip_excluded: bool = False,
    ) -> None:
        super().__init__(
            source_id,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        self._bridge = LoopBridge(store)
        self.store = self._bridge.store
        self.skip_excluded = skip_excluded
        self._created: set[str] = set()

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[AfMessage]:
        messages = await self._bridge.call(self._read(_session(session_id)))
        if self.skip_excluded:
            messages = [m for m in messages if not m.additional_properties.get("_excluded")]
        return messages

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[AfMessage],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if messages:
            await self._bridge.call(self._save(_session(session_id), list(messages)))

    async def _read(self, session_id: str, last: int | None = None) -> list[AfMessage]:
        view = EventFilter(active_view=True, types=(MESSAGE,), last=last)
        events = await self.store.read(session_id, view)
        return [m for e in events if (m := event_to_message(e)) is not None]

    async def _save(self, session_id: str, messages: list[AfMessage]) -> None:
        if session_id not in self._created:
            await self.store.create_session_if_absent(
                None, session_id=session_id, metadata={"framework": "agent-framework"}
            )
            self._created.add(session_id)
        for _ in range(ATTEMPTS):
            version = await self.store.version(session_id)
            # The framework's rule compares at most as many stored messages as are saved,
            # unless the stored ones are fewer: the newest len + 1 decide as all would.
            stored = await self._read(session_id, last=len(messages) + 1)
            new = filter_new_messages(stored, messages)
            if not new:
                return
            writes = [message_to_write(message) for message in new]
            if await self.store.append_events(session_id, writes, expected_version=version):
                return
        raise ConflictError(
            f"agent framework session {session_id!r}: other writers changed it on each of "
            f"{ATTEMPTS} attempts"
        )


def _session(session_id: str | None) -> str:
    return DEFAULT_SESSION_ID if session_id is None else session_id


def message_to_write(message: AfMessage) -> MessageWrite:
    """The write that stores one Agent Framework message: whole, and as what it means."""
    if not isinstance(message, AfMessage):
        raise InvalidArgumentError(f"expected an Agent Framework Message, not {type(message)!r}")
    whole = message.to_dict()
    calls: list[ToolCall] = []
    result_of: str | None = None
    results: list[str] = []
    for index, content in enumerate(message.contents):
        if content.type == "function_call":
            calls.append(
                ToolCall(
                    str(content.call_id or f"call-{index}"),
                    str(content.name),
                    _finite(tool_arguments(content.arguments)),
                )
            )
        elif content.type == "function_result":
            if result_of is None and content.call_id:
                result_of = str(content.call_id)
            if content.result is not None:
                results.append(_as_text(content.result))
    role = _ROLES.get(str(message.role), Role.ASSISTANT)
    return MessageWrite(
        Role.TOOL if result_of is not None else role,
        message.text or "\n".join(results),
        tool_calls=calls,
        tool_call_id=result_of,
        metadata={KEY: _kept(whole)},
    )


def event_to_message(event: Event) -> AfMessage | None:
    """The Agent Framework message an event stands for, or None for an event that is none."""
    if not isinstance(event, Message):
        return None
    stored = stored_form(event, KEY)
    if stored is not None:
        if isinstance(stored.get("message_json"), str):
            return AfMessage.from_dict(json.loads(stored["message_json"]))
        if isinstance(stored.get("message"), Mapping):
            return AfMessage.from_dict(dict(stored["message"]))
    contents: list[Content] = []
    if event.role == Role.TOOL and event.tool_call_id is not None:
        contents.append(
            Content.from_function_result(call_id=event.tool_call_id, result=event.content)
        )
    elif event.content:
        contents.append(Content.from_text(event.content))
    for call in event.tool_calls:
        contents.append(
            Content.from_function_call(call_id=call.id, name=call.name, arguments=call.arguments)
        )
    return AfMessage(str(event.role), contents, message_id=event.id)


def _kept(whole: dict[str, Any]) -> dict[str, Any]:
    """The framework's form as stored: as it is when JSON holds it strictly, else as the
    JSON text Python writes (NaN, Infinity), which reads back the same values."""
    try:
        json.dumps(whole, allow_nan=False)
    except ValueError:
        return {"message_json": json.dumps(whole, allow_nan=True)}
    except TypeError:
        return {"message_json": json.dumps(whole, allow_nan=True, default=str)}
    return {"message": whole}


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str)
    except ValueError:
        return str(value)


def _finite(value: Any) -> Any:
    """``value`` with the floats JSON cannot hold as their names (the stored form keeps
    the values themselves)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
