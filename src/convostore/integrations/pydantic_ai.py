"""convostore as Pydantic AI's conversation store (extra ``pydantic-ai``).

- `ConvostoreConversationStore(store)`: a `pydantic_ai.conversation_store.ConversationStore`
  (``load`` a conversation, run the agent on it, ``save`` the result).

- For runs without a conversation object: `ConvostoreHistory(store, conversation_id)`, a
  capability that loads the stored history before a run and appends the run's new
  messages after it (``Agent(model, capabilities=[ConvostoreHistory(store, cid)])``), and
  `load_history(store, conversation_id, last=None)` / `save_messages(store,
  conversation_id, messages)`.

>>> import asyncio, convostore.sync
>>> from pydantic_ai import Agent
>>> from pydantic_ai.models.test import TestModel
>>> with convostore.sync.connect("sqlite:///chat.db") as store:
...     agent = Agent(TestModel(), capabilities=[ConvostoreHistory(store, "c1")])
...     _ = asyncio.run(agent.run("Hi"))
...     len(asyncio.run(load_history(store, "c1")))
2

A conversation is the convostore session of the same id, owned by its ``scope`` (a
convostore user of that id; none without a scope). Each entry is a convostore message
whose event id is the entry's id (user prompts, system prompts, tool returns and model
responses with their tool calls as convostore roles, tool calls and results), keeping
the message whole as `ModelMessagesTypeAdapter` writes it and its parent entry. The
record is a ``PYDANTIC_AI.RECORD`` event written in the same version-checked batch as the
entries it adds, so a conflict leaves neither; the newest record is the conversation's.

A fork keeps its new entries in its own session and reads the ones it shares from the
conversation it was forked from. `delete_record` writes a deleted record: the entries stay
in the log (other conversations' forks may share them), so to erase a conversation's
messages delete its session through the store's API. A conversation recreated after a
delete keeps its first scope as its session's owner.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from convostore.errors import ConflictError
from convostore.filters import EventFilter
from convostore.ids import new_id
from convostore.integrations._common import missing_framework
from convostore.integrations._loops import LoopBridge
from convostore.model import (
    MESSAGE,
    Event,
    EventWrite,
    Message,
    MessageWrite,
    PageRequest,
    Role,
    ToolCall,
    User,
)
from convostore.store import Store
from convostore.sync import SyncStore

try:
    from pydantic import TypeAdapter
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.conversation_store import (
        ConversationConflict,
        ConversationEntry,
        ConversationRecord,
        ConversationStore,
    )
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        RetryFeedbackPart,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import RunContext
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_framework("pydantic-ai-slim", "pydantic-ai") from error

__all__ = [
    "REGISTRY_SESSION",
    "ConvostoreConversationStore",
    "ConvostoreHistory",
    "load_history",
    "save_messages",
]

KEY = "pydantic_ai"
RECORD = "PYDANTIC_AI.RECORD"
REGISTERED = "PYDANTIC_AI.CONVERSATION"
SESSION_KIND = "pydantic_ai"
# Lists every conversation (the unscoped listing), one event each, in creation order.
REGISTRY_SESSION = "pydantic-ai:conversations"
# How many times a write reads again after another writer moved the log.
ATTEMPTS = 16
_RECORDS: TypeAdapter[ConversationRecord] = TypeAdapter(ConversationRecord)
# The sessions the history being read may use: the conversation's, then its forks' sources.
_LINEAGE: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "convostore_pydantic_ai_lineage", default=()
)


# ---------------------------------------------------------------- messages


def message_to_write(entry: ConversationEntry) -> MessageWrite:
    """The write that stores one entry: its message whole and as what it means."""
    message = entry.message
    whole = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]
    form = {"entry": {"parent_id": entry.parent_id, "kind": entry.kind}, "message": whole}
    metadata = {KEY: form}
    if isinstance(message, ModelResponse):
        calls = [
            ToolCall(part.tool_call_id, part.tool_name, part.args_as_dict())
            for part in message.parts
            if isinstance(part, ToolCallPart)
        ]
        text = "".join(part.content for part in message.parts if isinstance(part, TextPart))
        return MessageWrite(Role.ASSISTANT, text, tool_calls=calls, metadata=metadata, id=entry.id)
    texts: list[str] = []
    role = Role.SYSTEM
    tool_call_id: str | None = None
    for part in message.parts:
        if isinstance(part, UserPromptPart):
            role = Role.USER
            texts.append(part.content if isinstance(part.content, str) else _text(part.content))
        elif isinstance(part, SystemPromptPart):
            texts.append(part.content)
        elif isinstance(part, RetryFeedbackPart):
            role = Role.USER
            texts.append(part.model_response())
        elif isinstance(part, ToolReturnPart | RetryPromptPart):
            if role != Role.USER and tool_call_id is None and part.tool_call_id:
                role, tool_call_id = Role.TOOL, part.tool_call_id
            texts.append(
                part.model_response()
                if isinstance(part, RetryPromptPart)
                else part.model_response_str()
            )
    if role == Role.USER:
        tool_call_id = None
    return MessageWrite(
        role, "\n".join(texts), tool_call_id=tool_call_id, metadata=metadata, id=entry.id
    )


def event_to_entry(event: Event) -> ConversationEntry | None:
    """The entry an event stands for, or None for an event that is none."""
    if not isinstance(event, Message):
        return None
    form = event.metadata.get(KEY) if isinstance(event.metadata, Mapping) else None
    if isinstance(form, Mapping) and isinstance(form.get("message"), Mapping):
        entry = form.get("entry") if isinstance(form.get("entry"), Mapping) else {}
        (message,) = ModelMessagesTypeAdapter.validate_python([form["message"]])
        parent = entry.get("parent_id") if isinstance(entry, Mapping) else None
        return ConversationEntry(id=event.id, parent_id=parent, message=message)
    return None


def _text(content: Sequence[Any]) -> str:
    return "\n".join(item for item in content if isinstance(item, str))


def _orphan_return(message: ModelMessage) -> bool:
    """A request that answers tool calls of an earlier response."""
    return isinstance(message, ModelRequest) and any(
        isinstance(part, ToolReturnPart | RetryPromptPart) and part.tool_name
        for part in message.parts
    )


# ---------------------------------------------------------------- the store


def _record_of(events: Sequence[Event]) -> tuple[ConversationRecord | None, tuple[str, ...]]:
    for event in reversed(events):
        if event.type == RECORD and isinstance(event.payload, Mapping):
            payload = event.payload
            lineage = tuple(str(s) for s in payload.get("lineage") or ())
            if payload.get("deleted"):
                return None, lineage
            return _RECORDS.validate_python(payload["record"]), lineage
    return None, ()


class ConvostoreConversationStore(ConversationStore):
    """Pydantic AI's `ConversationStore` on a convostore store (async, from any event
    loop: each call goes to the loop the store runs on)."""

    def __init__(self, store: Store | SyncStore) -> None:
        self._bridge = LoopBridge(store)
        self.store = self._bridge.store
        self._known: set[str] = set()

    # ------------------------------------------------------------ reads

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        events = await self._bridge.call(
            self.store.read(conversation_id, EventFilter(types=(RECORD,), last=1))
        )
        record, lineage = _record_of(events)
        _LINEAGE.set((conversation_id, *lineage))
        return record

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        return await self._bridge.call(self._records(scope, limit))

    async def _records(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        if scope is None:
            registry = await self.store.read(REGISTRY_SESSION, EventFilter(types=(REGISTERED,)))
            ids = list(dict.fromkeys(str(e.payload) for e in registry))
        else:
            ids = []
            cursor: str | None = None
            while True:
                page = await self.store.list_sessions(scope, PageRequest(size=100, cursor=cursor))
                ids.extend(s.id for s in page.items if s.kind == SESSION_KIND)
                cursor = page.next_cursor
                if cursor is None:
                    break
        found = await asyncio.gather(
            *(self.store.read(i, EventFilter(types=(RECORD,), last=1)) for i in ids)
        )
        records = [r for events in found if (r := _record_of(events)[0]) is not None]
        if scope is not None:
            records = [r for r in records if r.scope == scope]
        records.sort(key=lambda r: r.updated_at, reverse=True)
        return records[:limit]

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        (entry,) = await self.read_history(entry_id, limit=1)
        return entry

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The entries up to ``head_id``, in one read of the conversation's log (and one of
        each conversation its forks share entries with)."""
        return await self._bridge.call(self._history(head_id, limit, _LINEAGE.get()))

    async def _history(
        self, head_id: str | None, limit: int | None, lineage: tuple[str, ...]
    ) -> list[ConversationEntry]:
        if head_id is None or limit == 0:
            return []
        found: dict[str, Event] = {}
        sessions = list(lineage)
        searched: set[str] = set()
        # With a limit, the head's conversation is read from its newest messages only; it
        # is read whole if the chain leads further back.
        partly: list[str] = []
        chain: list[ConversationEntry] = []
        entry_id: str | None = head_id
        while entry_id is not None and (limit is None or len(chain) < limit):
            event = found.get(entry_id)
            if event is None:
                if partly:
                    more, _ = await self._events(partly.pop(), None)
                    found.update(more)
                    continue
                if not sessions:
                    sessions = await self._all_conversations(searched)
                    if not sessions:
                        raise LookupError(f"no conversation entry {entry_id!r} in the store")
                session_id = sessions.pop(0)
                if session_id in searched:
                    continue
                searched.add(session_id)
                tail = limit + 1 if limit is not None and not found else None
                more, further = await self._events(session_id, tail)
                found.update(more)
                if tail is not None:
                    partly.append(session_id)
                sessions[:0] = [s for s in further if s not in searched]
                continue
            entry = event_to_entry(event)
            if entry is None:
                raise LookupError(f"event {entry_id!r} holds no conversation entry")
            chain.append(entry)
            entry_id = entry.parent_id
        chain.reverse()
        return chain

    async def _events(
        self, session_id: str, tail: int | None
    ) -> tuple[dict[str, Event], tuple[str, ...]]:
        """A conversation's message events by id (its newest ``tail`` only, if given) and
        the conversations its record says it shares entries with."""
        if tail is None:
            events = await self.store.read(session_id)
        else:
            events = await self.store.read(session_id, EventFilter(types=(MESSAGE,), last=tail))
        lineage = _record_of(events)[1]
        return {e.id: e for e in events if isinstance(e, Message)}, lineage

    async def _all_conversations(self, searched: set[str]) -> list[str]:
        # The slow path, for an entry read without its conversation's record.
        registry = await self.store.read(REGISTRY_SESSION, EventFilter(types=(REGISTERED,)))
        return [i for i in dict.fromkeys(str(e.payload) for e in registry) if i not in searched]

    # ------------------------------------------------------------ writes

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        await self._bridge.call(self._write(record, list(new_entries), expected_revision))

    async def _write(
        self,
        record: ConversationRecord,
        new_entries: list[ConversationEntry],
        expected_revision: str | None,
    ) -> None:
        session_id = record.conversation_id
        if expected_revision is None:
            await self._create(session_id, record.scope)
        lineage: tuple[str, ...] = ()
        if record.forked_from is not None:
            source = await self.store.read(record.forked_from, EventFilter(types=(RECORD,), last=1))
            lineage = (record.forked_from, *_record_of(source)[1])
        for _ in range(ATTEMPTS):
            version = await self.store.version(session_id)
            current = await self.store.read(session_id, EventFilter(types=(RECORD,), last=1))
            stored, stored_lineage = _record_of(current)
            if (stored.revision if stored is not None else None) != expected_revision:
                raise ConversationConflict(session_id)
            if stored is not None and record.forked_from is None:
                lineage = stored_lineage
            new_ids = {entry.id for entry in new_entries}
            head = record.head_id
            known_head = stored.head_id if stored is not None else None
            if head is not None and head not in new_ids and head != known_head:
                try:
                    await self._history(head, 1, (session_id, *lineage))
                except LookupError:
                    raise ConversationConflict(session_id) from None
            payload = {
                "record": _RECORDS.dump_python(record, mode="json"),
                "lineage": list(lineage),
            }
            writes: list[MessageWrite | EventWrite] = [message_to_write(e) for e in new_entries]
            writes.append(EventWrite(RECORD, payload, synthetic=True))
            if await self.store.append_events(session_id, writes, expected_version=version):
                return
        raise ConflictError(
            f"conversation {session_id!r}: other writers changed it on each of {ATTEMPTS} attempts"
        )

    async def _create(self, session_id: str, scope: str | None) -> None:
        if session_id in self._known:
            return
        owner = User(scope, scope) if scope is not None else None
        created = await self.store.create_session_if_absent(
            owner, session_id=session_id, kind=SESSION_KIND, metadata={"framework": "pydantic-ai"}
        )
        if created:
            await self.store.create_session_if_absent(
                None, session_id=REGISTRY_SESSION, kind=SESSION_KIND + ".registry"
            )
            await self.store.append_event(REGISTRY_SESSION, EventWrite(REGISTERED, session_id))
        self._known.add(session_id)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await self._bridge.call(self._delete(conversation_id, expected_revision))

    async def _delete(self, conversation_id: str, expected_revision: str) -> None:
        for _ in range(ATTEMPTS):
            version = await self.store.version(conversation_id)
            current = await self.store.read(conversation_id, EventFilter(types=(RECORD,), last=1))
            stored, lineage = _record_of(current)
            if stored is None or stored.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            tombstone = EventWrite(
                RECORD, {"deleted": True, "lineage": list(lineage)}, synthetic=True
            )
            if await self.store.append_events(
                conversation_id, [tombstone], expected_version=version
            ):
                return
        raise ConflictError(
            f"conversation {conversation_id!r}: other writers changed it on each of "
            f"{ATTEMPTS} attempts"
        )


# ---------------------------------------------------------------- without a conversation


async def load_history(
    store: Store | SyncStore, conversation_id: str, last: int | None = None
) -> list[ModelMessage]:
    """The conversation's stored messages, or its newest ``last`` widened back so they
    never start on a tool return whose call they leave out. [] for an unknown one."""
    conversations = ConvostoreConversationStore(store)
    record = await conversations.read_record(conversation_id)
    if record is None:
        return []
    history = await conversations.read_history(record.head_id)
    messages = [entry.message for entry in history]
    if last is None:
        return messages
    start = max(len(messages) - last, 0) if last > 0 else len(messages)
    while 0 < start < len(messages) and _orphan_return(messages[start]):
        start -= 1
    return messages[start:]


async def save_messages(
    store: Store | SyncStore,
    conversation_id: str,
    messages: Sequence[ModelMessage],
    *,
    scope: str | None = None,
) -> list[ConversationEntry]:
    """Append ``messages`` to the conversation (created if absent), after its head, with
    a new record, in one version-checked write. Returns the entries stored."""
    conversations = ConvostoreConversationStore(store)
    for _ in range(ATTEMPTS):
        record = await conversations.read_record(conversation_id)
        parent = record.head_id if record is not None else None
        entries: list[ConversationEntry] = []
        for message in messages:
            entries.append(ConversationEntry(parent_id=parent, message=message))
            parent = entries[-1].id
        if record is None:
            updated = ConversationRecord(
                conversation_id=conversation_id, head_id=parent, scope=scope
            )
        else:
            updated = replace(
                record, head_id=parent, revision=new_id(), updated_at=datetime.now(UTC)
            )
        try:
            await conversations.write_record(
                updated,
                new_entries=entries,
                expected_revision=record.revision if record is not None else None,
            )
        except ConversationConflict:
            continue
        return entries
    raise ConflictError(
        f"conversation {conversation_id!r}: other writers changed it on each of {ATTEMPTS} attempts"
    )


@dataclass
class ConvostoreHistory(AbstractCapability[Any]):
    """A capability that runs an agent on a stored conversation: the stored history goes
    before the run's messages, and the run's new messages are appended after it."""

    store: Store | SyncStore
    conversation_id: str
    last: int | None = None

    async def before_run(self, ctx: RunContext[Any]) -> None:
        history = await load_history(self.store, self.conversation_id, self.last)
        ctx.messages[:0] = history

    async def after_run(
        self, ctx: RunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        new = result.new_messages()
        if new:
            await save_messages(self.store, self.conversation_id, new)
        return result
