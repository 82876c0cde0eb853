"""convostore as Strands Agents' session repository (extra ``strands``): give it to a
session manager, ``Agent(session_manager=RepositorySessionManager(session_id="chat-1",
session_repository=ConvostoreSessionRepository(store)))``, or use
``ConvostoreSessionManager("chat-1", store)``.

>>> import convostore.sync
>>> from strands.types.session import Session, SessionAgent, SessionMessage, SessionType
>>> with convostore.sync.connect("sqlite:///chat.db") as store:
...     repository = ConvostoreSessionRepository(store)
...     session = repository.create_session(Session("chat-1", SessionType.AGENT))
...     repository.create_agent("chat-1", SessionAgent("helper", {"mood": "calm"}, {}))
...     hello = {"role": "user", "content": [{"text": "Hello"}]}
...     repository.create_message("chat-1", "helper", SessionMessage.from_message(hello, 0))
...     [m.message["content"][0]["text"] for m in repository.list_messages("chat-1", "helper")]
['Hello']

A Strands session is a convostore session with the same id (kind ``strands``). Each
agent (and each multi-agent: a swarm, a graph) is a part of it (`Store.find_part`) held
with an agent user ``strands.agent:<agent_id>`` (``strands.multi_agent:<id>``), whose
metadata holds the agent's state; the agent's messages are that part's log. Every
message keeps Strands' own form (it reads back equal) and is what it means in
convostore's model: text, tool uses as the assistant message's tool calls, each tool
result a tool message, so a restore never splits a tool use from its result. A message
updated (a guardrail's redaction) is rewritten in the active view by one
version-checked write; the full log keeps the original.

The methods block: Strands calls them from the agent's own event loop thread. With a
`convostore.sync` store they work from any thread and inside any running loop; with an
async store they run on that store's loop, so they must be called from another thread
(on the store's own loop they raise). Every failure is Strands' `SessionException`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from convostore.errors import (
    EventIdConflictError,
    SessionExistsError,
    SessionNotFoundError,
    StaleObjectError,
    StoreError,
)
from convostore.filters import EventFilter
from convostore.ids import new_id
from convostore.integrations._common import (
    ATTEMPTS,
    AnyWrite,
    StoreRunner,
    append_all,
    copy_write,
    gave_up,
    missing_framework,
    rewrite_view,
    stored_form,
)
from convostore.model import MESSAGE, Event, Message, MessageWrite, Role, ToolCall, User
from convostore.model import Session as StoredSession
from convostore.store import Store
from convostore.sync import SyncStore

try:
    from strands.session.repository_session_manager import RepositorySessionManager
    from strands.session.session_repository import SessionRepository
    from strands.types.exceptions import SessionException
    from strands.types.session import (
        Session,
        SessionAgent,
        SessionMessage,
        SessionType,
        encode_bytes_values,
    )
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_framework("strands-agents", "strands") from error

if TYPE_CHECKING:
    from strands.multiagent.base import MultiAgentBase

__all__ = [
    "ConvostoreSessionManager",
    "ConvostoreSessionRepository",
    "agent_user",
    "message_writes",
    "multi_agent_user",
]

T = TypeVar("T")
KEY = "strands"
SESSION_KIND = "strands"
AGENT_KIND = "strands.agent"
MULTI_AGENT_KIND = "strands.multi_agent"
_MESSAGES = EventFilter(active_view=True, types=(MESSAGE,))
_MESSAGE_IDS = uuid.UUID("7c1e9b24-3a5f-4d8e-b6c2-9f0a1d3e5b47")


def agent_user(agent_id: str) -> User:
    """The convostore user an agent's part is held with."""
    return User(f"strands.agent:{agent_id}", agent_id, kind="agent")


def multi_agent_user(multi_agent_id: str) -> User:
    """The convostore user a multi-agent's part is held with."""
    return User(f"strands.multi_agent:{multi_agent_id}", multi_agent_id, kind="agent")


class ConvostoreSessionRepository(SessionRepository):
    """Strands' `SessionRepository` on a convostore store of any backend (a
    `convostore.sync` store, or an async store whose loop runs in another thread).

    Each blocking method has an async twin (``acreate_session``, ...) for code on the
    store's own loop."""

    def __init__(self, store: Store | SyncStore) -> None:
        self._runner = StoreRunner(store)
        self.store: Store = self._runner.store
        # The part of each (session, agent) that holds messages: a part's id never
        # changes, so appending a message needs no lookup once it is known.
        self._part_ids: dict[tuple[str, str], str] = {}

    # ------------------------------------------------------------------ blocking

    def create_session(self, session: Session, **kwargs: Any) -> Session:
        return self._run(self.acreate_session(session))

    def read_session(self, session_id: str, **kwargs: Any) -> Session | None:
        return self._run(self.aread_session(session_id))

    def delete_session(self, session_id: str, **kwargs: Any) -> None:
        self._run(self.adelete_session(session_id))

    def create_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        self._run(self.acreate_agent(session_id, session_agent))

    def read_agent(self, session_id: str, agent_id: str, **kwargs: Any) -> SessionAgent | None:
        return self._run(self.aread_agent(session_id, agent_id))

    def update_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        self._run(self.aupdate_agent(session_id, session_agent))

    def create_message(
        self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any
    ) -> None:
        self._run(self.acreate_message(session_id, agent_id, session_message))

    def read_message(
        self, session_id: str, agent_id: str, message_id: int, **kwargs: Any
    ) -> SessionMessage | None:
        return self._run(self.aread_message(session_id, agent_id, message_id))

    def update_message(
        self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any
    ) -> None:
        self._run(self.aupdate_message(session_id, agent_id, session_message))

    def list_messages(
        self,
        session_id: str,
        agent_id: str,
        limit: int | None = None,
        offset: int = 0,
        **kwargs: Any,
    ) -> list[SessionMessage]:
        return self._run(self.alist_messages(session_id, agent_id, limit, offset))

    def create_multi_agent(
        self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any
    ) -> None:
        self._run(
            self.acreate_multi_agent(session_id, multi_agent.id, multi_agent.serialize_state())
        )

    def read_multi_agent(
        self, session_id: str, multi_agent_id: str, **kwargs: Any
    ) -> dict[str, Any] | None:
        return self._run(self.aread_multi_agent(session_id, multi_agent_id))

    def update_multi_agent(
        self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any
    ) -> None:
        self._run(
            self.aupdate_multi_agent(session_id, multi_agent.id, multi_agent.serialize_state())
        )

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        try:
            return self._runner.run(coroutine)
        except SessionException:
            raise
        except (StoreError, RuntimeError, ValueError, TypeError) as error:
            raise SessionException(f"convostore: {error}") from error

    # ------------------------------------------------------------------ sessions

    async def acreate_session(self, session: Session) -> Session:
        try:
            await self.store.create_session(
                None,
                session_id=session.session_id,
                kind=SESSION_KIND,
                metadata={KEY: {"session": _json(session.to_dict())}},
            )
        except SessionExistsError as error:
            raise SessionException(f"Session {session.session_id} already exists") from error
        return session

    async def aread_session(self, session_id: str) -> Session | None:
        form = _form(await self.store.get_session(session_id)).get("session")
        if not isinstance(form, Mapping):
            return None
        session = Session.from_dict(dict(form))
        session.session_type = SessionType(session.session_type)
        return session

    async def adelete_session(self, session_id: str) -> None:
        if await self.aread_session(session_id) is None:
            raise SessionException(f"Session {session_id} does not exist")
        await self.store.delete_session(session_id)
        for key in [key for key in self._part_ids if key[0] == session_id]:
            del self._part_ids[key]

    # ------------------------------------------------------------------ agents

    async def acreate_agent(self, session_id: str, session_agent: SessionAgent) -> None:
        await self._require_session(session_id)
        part = await self.store.find_or_create_part(
            session_id, agent_user(session_agent.agent_id), kind=AGENT_KIND
        )
        await self._write_form(part, "agent", session_agent.to_dict())

    async def aread_agent(self, session_id: str, agent_id: str) -> SessionAgent | None:
        form = await self._part_form(session_id, agent_user(agent_id), "agent")
        return None if form is None else SessionAgent.from_dict(dict(form))

    async def aupdate_agent(self, session_id: str, session_agent: SessionAgent) -> None:
        part = await self._require_agent(session_id, session_agent.agent_id)
        previous = _form(part).get("agent", {})
        session_agent.created_at = previous.get("created_at", session_agent.created_at)
        await self._write_form(part, "agent", session_agent.to_dict())

    # ------------------------------------------------------------------ messages

    async def acreate_message(
        self, session_id: str, agent_id: str, session_message: SessionMessage
    ) -> None:
        part_id = await self._part_id(session_id, agent_id)
        writes = message_writes(agent_id, session_message, part_id)
        try:
            await append_all(self.store, part_id, writes)
        except SessionNotFoundError as error:
            self._part_ids.pop((session_id, agent_id), None)
            raise SessionException(f"Session {session_id} does not exist") from error
        except EventIdConflictError as error:
            raise SessionException(
                f"Message {session_message.message_id} already exists in agent {agent_id} "
                f"in session {session_id}"
            ) from error

    async def acreate_messages(
        self, session_id: str, agent_id: str, session_messages: Sequence[SessionMessage]
    ) -> None:
        """Append several messages of one agent in one all-or-nothing write."""
        if not session_messages:
            return
        part = await self._require_agent(session_id, agent_id)
        writes = [w for m in session_messages for w in message_writes(agent_id, m, part.id)]
        await append_all(self.store, part.id, writes)

    async def aread_message(
        self, session_id: str, agent_id: str, message_id: int
    ) -> SessionMessage | None:
        part = await self._agent_part(session_id, agent_id)
        if part is None:
            return None
        return _messages(await self.store.read(part.id, _MESSAGES)).get(message_id)

    async def aupdate_message(
        self, session_id: str, agent_id: str, session_message: SessionMessage
    ) -> None:
        """Rewrite the message in the agent's active view, in its place: its events and
        those after it are written again after one compaction boundary, all in one
        version-checked write (the full log keeps the original)."""
        part = await self._require_agent(session_id, agent_id)
        index = session_message.message_id
        for _ in range(ATTEMPTS):
            version = await self.store.version(part.id)
            view = await self.store.read(part.id, EventFilter(active_view=True))
            positions = [i for i, e in enumerate(view) if _index_of(e) == index]
            previous = _messages(view).get(index)
            if previous is None or not positions:
                raise SessionException(f"Message {index} does not exist in session {session_id}")
            session_message.created_at = previous.created_at
            first = positions[0]
            then: list[AnyWrite] = [
                replace(write, id=new_id()) for write in message_writes(agent_id, session_message)
            ]
            then += [copy_write(e) for i, e in enumerate(view) if i > first and i not in positions]
            if await rewrite_view(
                self.store, part.id, version, view, view[:first], then, reason="update_message"
            ):
                return
        raise gave_up("update_message", part.id)

    async def alist_messages(
        self, session_id: str, agent_id: str, limit: int | None = None, offset: int = 0
    ) -> list[SessionMessage]:
        part = await self._agent_part(session_id, agent_id)
        if part is None:
            return []
        found = _messages(await self.store.read(part.id, _MESSAGES))
        ordered = [found[index] for index in sorted(found)]
        return ordered[offset:] if limit is None else ordered[offset : offset + limit]

    # ------------------------------------------------------------------ multi-agents

    async def acreate_multi_agent(
        self, session_id: str, multi_agent_id: str, state: Mapping[str, Any]
    ) -> None:
        await self._require_session(session_id)
        part = await self.store.find_or_create_part(
            session_id, multi_agent_user(multi_agent_id), kind=MULTI_AGENT_KIND
        )
        await self._write_form(part, "multi_agent", state)

    async def aread_multi_agent(
        self, session_id: str, multi_agent_id: str
    ) -> dict[str, Any] | None:
        form = await self._part_form(session_id, multi_agent_user(multi_agent_id), "multi_agent")
        return None if form is None else dict(form)

    async def aupdate_multi_agent(
        self, session_id: str, multi_agent_id: str, state: Mapping[str, Any]
    ) -> None:
        part = await self.store.find_part(session_id, multi_agent_user(multi_agent_id))
        if part is None or "multi_agent" not in _form(part):
            raise SessionException(
                f"MultiAgent state {multi_agent_id} in session {session_id} does not exist"
            )
        await self._write_form(part, "multi_agent", state)

    # ------------------------------------------------------------------ inside

    async def _require_session(self, session_id: str) -> None:
        if await self.aread_session(session_id) is None:
            raise SessionException(f"Session {session_id} does not exist")

    async def _agent_part(self, session_id: str, agent_id: str) -> StoredSession | None:
        part = await self.store.find_part(session_id, agent_user(agent_id))
        return part if part is not None and "agent" in _form(part) else None

    async def _part_id(self, session_id: str, agent_id: str) -> str:
        known = self._part_ids.get((session_id, agent_id))
        if known is None:
            known = self._part_ids[(session_id, agent_id)] = (
                await self._require_agent(session_id, agent_id)
            ).id
        return known

    async def _require_agent(self, session_id: str, agent_id: str) -> StoredSession:
        part = await self._agent_part(session_id, agent_id)
        if part is None:
            await self._require_session(session_id)
            raise SessionException(f"Agent {agent_id} does not exist in session {session_id}")
        return part

    async def _part_form(
        self, session_id: str, held_with: User, name: str
    ) -> Mapping[str, Any] | None:
        part = await self.store.find_part(session_id, held_with)
        form = _form(part).get(name)
        return form if isinstance(form, Mapping) else None

    async def _write_form(self, part: StoredSession, name: str, value: Mapping[str, Any]) -> None:
        """Replace what the part holds under ``name`` (the latest write wins, as in
        Strands' own stores), under the store's stamp check."""
        for _ in range(ATTEMPTS):
            form = {**_form(part), name: _json(value)}
            try:
                await self.store.update_session(
                    replace(part, metadata={**dict(part.metadata), KEY: form})
                )
                return
            except StaleObjectError:
                fresh = await self.store.get_session(part.id)
                if fresh is None:
                    raise SessionException(f"Session {part.part_of} was deleted") from None
                part = fresh
        raise gave_up(f"writing the {name} state", part.id)


class ConvostoreSessionManager(RepositorySessionManager, ConvostoreSessionRepository):
    """A `RepositorySessionManager` on a convostore store, in one line:
    ``Agent(session_manager=ConvostoreSessionManager("chat-1", store))``. It is its own
    repository, as Strands' `FileSessionManager` is."""

    def __init__(self, session_id: str, store: Store | SyncStore, **kwargs: Any) -> None:
        ConvostoreSessionRepository.__init__(self, store)
        RepositorySessionManager.__init__(
            self, session_id=session_id, session_repository=self, **kwargs
        )


def message_writes(
    agent_id: str, session_message: SessionMessage, part_id: str | None = None
) -> list[MessageWrite]:
    """The writes that store one Strands message: its text, tool uses as tool calls of
    an assistant message, each tool result a tool message; the first keeps the message
    whole (in Strands' JSON form), the others name the same index. With ``part_id`` (the
    agent's part) their ids come from it and the index, so writing the message again is
    refused as a repeat."""
    whole = session_message.to_dict()
    message = session_message.to_message()
    index = session_message.message_id
    created_at = _time(session_message.created_at)
    blocks = [b for b in message.get("content", []) if isinstance(b, Mapping)]
    texts = [str(b["text"]) for b in blocks if "text" in b]
    uses = [b["toolUse"] for b in blocks if isinstance(b.get("toolUse"), Mapping)]
    results = [b["toolResult"] for b in blocks if isinstance(b.get("toolResult"), Mapping)]
    # (role, content, author, tool calls, tool call id) of each write, in log order.
    parts: list[tuple[Role, str, User | None, list[ToolCall], str | None]] = [
        (Role.TOOL, _result_text(r), None, [], str(r.get("toolUseId", ""))) for r in results
    ]
    if message.get("role") == "assistant":
        calls = [
            ToolCall(str(u.get("toolUseId", "")), str(u.get("name", "")), _json(u.get("input")))
            for u in uses
        ]
        parts.insert(0, (Role.ASSISTANT, "\n".join(texts), agent_user(agent_id), calls, None))
    elif texts or not parts:
        parts.append((Role.USER, "\n".join(texts), None, [], None))
    return [
        MessageWrite(
            role,
            content,
            author=author,
            tool_calls=calls,
            tool_call_id=call_id,
            created_at=created_at,
            id=None
            if part_id is None
            else str(uuid.uuid5(_MESSAGE_IDS, f"{part_id}\0{index}\0{position}")),
            metadata={
                KEY: {"agent_id": agent_id, "message_id": index, "message": whole}
                if position == 0
                else {"agent_id": agent_id, "message_id": index, "part": position}
            },
        )
        for position, (role, content, author, calls, call_id) in enumerate(parts)
    ]


def _messages(events: Sequence[Event]) -> dict[int, SessionMessage]:
    """The Strands messages the events hold, by index (a later event for an index, from
    an update, wins)."""
    found: dict[int, SessionMessage] = {}
    for event in events:
        form = stored_form(event, KEY)
        if form is None or not isinstance(event, Message):
            continue
        whole = form.get("message")
        index = form.get("message_id")
        if isinstance(whole, Mapping) and isinstance(index, int):
            found[index] = SessionMessage.from_dict(dict(whole))
    return found


def _index_of(event: Event) -> int | None:
    form = stored_form(event, KEY)
    index = form.get("message_id") if form is not None else None
    return index if isinstance(index, int) else None


def _result_text(result: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for block in result.get("content", []) or []:
        if not isinstance(block, Mapping):
            continue
        if "text" in block:
            parts.append(str(block["text"]))
        elif "json" in block:
            parts.append(json.dumps(_json(block["json"]), sort_keys=True))
    return "\n".join(parts)


def _form(session: StoredSession | None) -> Mapping[str, Any]:
    if session is None:
        return {}
    form = session.metadata.get(KEY)
    return form if isinstance(form, Mapping) else {}


def _json(value: Any) -> Any:
    """The value as JSON holds it: bytes base64-encoded as Strands encodes them, and a
    value JSON cannot hold as its string."""
    return json.loads(json.dumps(encode_bytes_values(value), default=str))


def _time(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
