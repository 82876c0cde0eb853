"""convostore as the OpenAI Agents SDK's session store (extra ``openai-agents``): run
an agent with it, ``await Runner.run(agent, "Hello", session=session)``.

>>> import asyncio
>>> import convostore
>>> async def items() -> list[object]:
...     async with await convostore.connect("sqlite:///chat.db") as store:
...         session = ConvostoreSession("conversation-1", store)
...         await session.add_items([{"role": "user", "content": "Hello"}])
...         return list(await session.get_items())
>>> asyncio.run(items())
[{'role': 'user', 'content': 'Hello'}]

Every item is kept whole (it reads back equal) and is also written as what it means in
convostore's model where it has a meaning: user, assistant and system messages;
function calls as an assistant message's tool calls, their outputs as tool messages.
Other items (reasoning, hosted tool calls, ...) are events of type
``OPENAI_AGENTS.<ITEM TYPE>``. `pop_item` and `clear_session` append a record (a
compaction boundary) instead of rewriting the log, and reads follow the active view.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from convostore.compaction import CompactionStrategy, CompactionTrigger, Summarize
from convostore.errors import InvalidArgumentError
from convostore.integrations._common import (
    ATTEMPTS,
    AnyWrite,
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

try:
    from agents.memory.session import SessionABC
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_framework("openai-agents", "openai-agents") from error

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session import OpenAIResponsesCompactionArgs

__all__ = ["Compaction", "ConvostoreSession", "event_to_items", "item_to_write"]

KEY = "openai_agents"
EVENT_PREFIX = "OPENAI_AGENTS"
_ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT, "system": Role.SYSTEM}


@dataclass(frozen=True, slots=True)
class Compaction:
    """How `ConvostoreSession.run_compaction` compacts: a convostore strategy, the
    summarizer of what leaves the view, and an optional trigger (ignored when the SDK
    forces a compaction)."""

    strategy: CompactionStrategy
    summarize: Summarize
    trigger: CompactionTrigger | None = None


class ConvostoreSession(SessionABC):
    """The SDK's `Session` (and compaction-aware session) on a convostore store.

    ``session_id`` is the convostore session's id; the session is created (ownerless,
    kind ``"chat"``) on the first `add_items`."""

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        session_settings: SessionSettings | None = None,
        compaction: Compaction | None = None,
    ) -> None:
        self.session_id = session_id
        self.store = store
        self.session_settings = session_settings
        self.compaction = compaction
        self._created = False

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The newest ``limit`` items (all by default), oldest first."""
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted <= 0:
            return []
        events = await read_view(self.store, self.session_id, last=wanted)
        items = _items(events)
        if wanted is not None and len(items) < wanted and len(events) >= wanted:
            # Some events in the window carried no item: widen to the whole view.
            items = _items(await read_view(self.store, self.session_id))
        return items if wanted is None else items[-wanted:]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items in order, in one batch."""
        if not items:
            return
        writes = [item_to_write(cast(Mapping[str, Any], item)) for item in items]
        await self._ensure_session()
        await append_all(self.store, self.session_id, writes)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item from the view and return it; None when empty. Recorded
        by a version-checked boundary, so concurrent pops never return the same item."""
        for _ in range(ATTEMPTS):
            version = await self.store.version(self.session_id)
            view = await read_view(self.store, self.session_id)
            position = _last_item_event(view)
            if position is None:
                return None
            event = view[position]
            items = event_to_items(event)
            popped, rest = items[-1], items[:-1]
            keep = [e for i, e in enumerate(view) if i != position]
            # An event that stood for several items leaves the others behind it.
            then: list[AnyWrite] = [item_to_write(item) for item in rest]
            if await rewrite_view(
                self.store, self.session_id, version, view, keep, then, reason="pop_item"
            ):
                return cast("TResponseInputItem", popped)
        raise gave_up("pop_item", self.session_id)

    async def clear_session(self) -> None:
        """Empty the view. The log keeps every event; the store's API still reads them."""
        for _ in range(ATTEMPTS):
            version = await self.store.version(self.session_id)
            if version == 0:
                return
            view = await read_view(self.store, self.session_id)
            if not view:
                return
            if await rewrite_view(
                self.store, self.session_id, version, view, [], reason="clear_session"
            ):
                return
        raise gave_up("clear_session", self.session_id)

    async def run_compaction(self, args: OpenAIResponsesCompactionArgs | None = None) -> None:
        """Compact with the configured `Compaction`; nothing when none is configured."""
        if self.compaction is None or await self.store.version(self.session_id) == 0:
            return
        force = bool(args.get("force")) if args else False
        await self.store.compact(
            self.session_id,
            self.compaction.strategy,
            self.compaction.summarize,
            None if force else self.compaction.trigger,
        )

    async def _ensure_session(self) -> None:
        if not self._created:
            await self.store.create_session_if_absent(
                None, session_id=self.session_id, metadata={"framework": "openai-agents"}
            )
            self._created = True


def item_to_write(item: Mapping[str, Any]) -> AnyWrite:
    """The write that stores one SDK item: whole, and as what it means where it has a
    meaning in convostore's model."""
    if not isinstance(item, Mapping):
        raise InvalidArgumentError(f"an OpenAI Agents item is a mapping, not {type(item).__name__}")
    whole = {KEY: {"item": dict(item)}}
    kind = item.get("type")
    role = item.get("role")
    if kind in (None, "message") and role in ("user", "assistant", "system", "developer"):
        return MessageWrite(
            _ROLES.get(str(role), Role.SYSTEM), _text(item.get("content")), metadata=whole
        )
    if kind == "function_call" and isinstance(item.get("call_id"), str):
        call = ToolCall(item["call_id"], str(item.get("name", "")), _arguments(item))
        return MessageWrite(Role.ASSISTANT, "", tool_calls=[call], metadata=whole)
    if kind == "function_call_output" and isinstance(item.get("call_id"), str):
        return MessageWrite(
            Role.TOOL, _text(item.get("output")), tool_call_id=item["call_id"], metadata=whole
        )
    return EventWrite(framework_event_type(EVENT_PREFIX, str(kind or "item")), dict(item))


def event_to_items(event: Event) -> list[dict[str, Any]]:
    """The SDK items an event stands for: the stored item itself, or, for an event
    written another way, its messages and tool calls as items."""
    stored = stored_form(event, KEY)
    if stored is not None and isinstance(stored.get("item"), Mapping):
        return [dict(stored["item"])]
    if event.type.startswith(EVENT_PREFIX + ".") and isinstance(event.payload, Mapping):
        return [dict(event.payload)]
    if not isinstance(event, Message):
        return []
    if event.role == Role.TOOL:
        return [
            {
                "type": "function_call_output",
                "call_id": event.tool_call_id or "",
                "output": event.content,
            }
        ]
    items: list[dict[str, Any]] = []
    if event.content or not event.tool_calls:
        items.append({"role": event.role.value, "content": event.content})
    for call in event.tool_calls:
        arguments = (
            call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        )
        items.append(
            {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments}
        )
    return items


def _items(events: list[Event]) -> list[TResponseInputItem]:
    return [cast("TResponseInputItem", item) for event in events for item in event_to_items(event)]


def _last_item_event(view: list[Event]) -> int | None:
    for position in range(len(view) - 1, -1, -1):
        if event_to_items(view[position]):
            return position
    return None


def _text(content: Any) -> str:
    """The text of a message's content: a string, or its text parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text", part.get("refusal"))
                if isinstance(text, str):
                    parts.append(text)
        return "\n".join(parts)
    return json.dumps(content, default=str)


def _arguments(item: Mapping[str, Any]) -> Any:
    raw = item.get("arguments", "")
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return raw
