"""convostore as Google ADK's session service (extra ``adk``): give it to a runner,
``Runner(app_name="app", agent=agent, session_service=ConvostoreSessionService(store))``.

>>> import asyncio
>>> import convostore
>>> async def topic() -> str:
...     async with await convostore.connect("sqlite:///chat.db") as store:
...         service = ConvostoreSessionService(store)
...         session = await service.create_session(
...             app_name="app", user_id="ada", state={"topic": "plans"}
...         )
...         loaded = await service.get_session(
...             app_name="app", user_id="ada", session_id=session.id
...         )
...         return loaded.state["topic"]
>>> asyncio.run(topic())
'plans'

An ADK session is a convostore session with the same id, owned by the ADK user (a
convostore user with the same id) and of kind ``adk.<app_name>``. Each ADK event is one
convostore event that keeps the event whole (it reads back equal) and is a message where
it means one: user text, model text and function calls, a function response. Other
events (state changes, transfers, ...) are of type ``ADK.EVENT``.

State: session-scoped keys live in the session's metadata; ``app:`` keys in a holder
session ``adk-app:<app_name>`` and ``user:`` keys in ``adk-user:<app_name>:<user_id>``,
written under the store's stamp check; ``temp:`` keys are never stored. A session
object that another writer has moved past is refused by `append_event` with ADK's
`StaleSessionError`, by the log's version checked in the write itself.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from convostore.errors import SessionExistsError, StaleObjectError
from convostore.filters import EventFilter
from convostore.integrations._common import (
    AnyWrite,
    framework_event_type,
    missing_framework,
    stored_form,
)
from convostore.model import (
    Event,
    EventWrite,
    Message,
    MessageWrite,
    PageRequest,
    Role,
    SessionFilter,
    ToolCall,
    User,
)
from convostore.model import Session as StoredSession
from convostore.store import Store

try:
    from google.adk.errors._stale_session_error import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import (
        SessionNotFoundError as AdkSessionNotFoundError,
    )
    from google.adk.events.event import Event as AdkEvent
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session
    from google.adk.sessions.state import State
    from google.genai import types
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_framework("google-adk", "adk") from error

__all__ = [
    "ConvostoreSessionService",
    "adk_event_to_write",
    "app_holder_id",
    "event_to_adk_event",
    "session_kind",
    "user_holder_id",
]

KEY = "adk"
EVENT_TYPE = framework_event_type("ADK", "EVENT")
_EVENT_IDS = uuid.UUID("0b8f3c52-62d4-4a57-8f0e-2b6a7c1d9e40")
_PAGE = 100


class ConvostoreSessionService(BaseSessionService):
    """ADK's `BaseSessionService` on a convostore store of any backend."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ------------------------------------------------------------------ sessions

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        session_id = session_id.strip() if session_id else str(uuid.uuid4())
        deltas = _split_state(_json_safe(state or {}))
        try:
            stored = await self.store.create_session(
                User(user_id, user_id),
                session_id=session_id,
                kind=session_kind(app_name),
                metadata={KEY: {"app_name": app_name, "user_id": user_id, "state": deltas[2]}},
            )
        except SessionExistsError as error:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from error
        app_state = await self.merge_holder_state(app_holder_id(app_name), deltas[0])
        user_state = await self.merge_holder_state(user_holder_id(app_name, user_id), deltas[1])
        return self._session(stored, app_state, user_state, [], 0)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        stored = await self.store.get_session(session_id)
        if stored is None or not _belongs(stored, app_name, user_id):
            return None
        version = stored.version
        recent = config.num_recent_events if config else None
        since = (
            datetime.fromtimestamp(config.after_timestamp, UTC)
            if config and config.after_timestamp
            else None
        )

        async def read_events() -> list[AdkEvent]:
            if recent == 0:
                return []
            read = await self.store.read(
                session_id, EventFilter(active_view=True, since=since, last=recent)
            )
            found = [adk for event in read if (adk := event_to_adk_event(event)) is not None]
            return found if recent is None else found[-recent:]

        events, app_state, user_state = await asyncio.gather(
            read_events(),
            self._holder_state(app_holder_id(app_name)),
            self._holder_state(user_holder_id(app_name, user_id)),
        )
        return self._session(stored, app_state, user_state, events, version)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (of one user, or of every user who has one), without
        events, oldest activity first as ADK orders them."""
        app_holder = await self.store.get_session(app_holder_id(app_name))
        if user_id is not None:
            users = [user_id]
        else:
            users = list(_holder(app_holder).get("users", [])) if app_holder else []
        app_state = dict(_holder(app_holder).get("state", {})) if app_holder else {}
        found: list[Session] = []
        for user in users:
            user_state = await self._holder_state(user_holder_id(app_name, user))
            async for stored in self._sessions_of(user, app_name):
                found.append(self._session(stored, app_state, user_state, [], stored.version))
        found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=found)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        stored = await self.store.get_session(session_id)
        if stored is not None and _belongs(stored, app_name, user_id):
            await self.store.delete_session(session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._holder_state(user_holder_id(app_name, user_id))

    # ------------------------------------------------------------------ events

    async def append_event(self, session: Session, event: AdkEvent) -> AdkEvent:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        write = adk_event_to_write(session.id, event)
        marker = session._storage_update_marker
        if marker is None:
            stored = await self.store.get_session(session.id)
            if stored is None:
                raise AdkSessionNotFoundError(f"Session {session.id} not found.")
            version = stored.version
        else:
            version = int(marker)
        if not await self.store.append_events(session.id, [write], expected_version=version):
            if await self.store.get_session(session.id) is None:
                raise AdkSessionNotFoundError(f"Session {session.id} not found.")
            raise StaleSessionError(
                "The session was changed by another writer since it was read: read it "
                "again with get_session and retry."
            )
        session._storage_update_marker = str(version + 1)
        delta = _json_safe(dict(event.actions.state_delta or {})) if event.actions else {}
        app_delta, user_delta, session_delta = _split_state(delta)
        if session_delta:
            await self._store_session_state(session.id, session_delta)
        if app_delta:
            await self.merge_holder_state(app_holder_id(session.app_name), app_delta)
        if user_delta:
            await self.merge_holder_state(
                user_holder_id(session.app_name, session.user_id), user_delta
            )
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    # ------------------------------------------------------------------ inside

    def _session(
        self,
        stored: StoredSession,
        app_state: Mapping[str, Any],
        user_state: Mapping[str, Any],
        events: list[AdkEvent],
        version: int,
    ) -> Session:
        form = _holder(stored)
        state = dict(form.get("state", {}))
        state.update({State.APP_PREFIX + k: v for k, v in app_state.items()})
        state.update({State.USER_PREFIX + k: v for k, v in user_state.items()})
        session = Session(
            id=stored.id,
            app_name=str(form.get("app_name", "")),
            user_id=str(form.get("user_id", stored.owner_id or "")),
            state=state,
            events=events,
            last_update_time=stored.last_activity_at.timestamp(),
        )
        session._storage_update_marker = str(version)
        return session

    async def _sessions_of(self, user_id: str, app_name: str) -> AsyncIterator[StoredSession]:
        cursor: str | None = None
        while True:
            page = await self.store.list_sessions(
                user_id,
                PageRequest(size=_PAGE, cursor=cursor),
                SessionFilter(kind=session_kind(app_name)),
            )
            for stored in page.items:
                if _belongs(stored, app_name, user_id):
                    yield stored
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def _holder_state(self, holder_id: str) -> dict[str, Any]:
        holder = await self.store.get_session(holder_id)
        return dict(_holder(holder).get("state", {})) if holder else {}

    async def merge_holder_state(self, holder_id: str, delta: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``delta`` into the state of an app's or a user's holder session
        (creating it; a user is also recorded in the app's holder); returns the state as
        stored. Writes nothing when the state already holds ``delta``."""
        if holder_id.startswith("adk-user:"):
            app_name, user_id = _user_of_holder(holder_id)
            await self.add_user(app_name, user_id)
        while True:
            holder = await self.store.get_session(holder_id)
            if holder is None:
                await self.store.create_session_if_absent(
                    None, session_id=holder_id, kind="adk.state", metadata={KEY: {"state": {}}}
                )
                continue
            form = dict(_holder(holder))
            state = dict(form.get("state", {}))
            if all(key in state and state[key] == value for key, value in delta.items()):
                return state
            state.update(delta)
            form["state"] = state
            try:
                await self.store.update_session(_with_form(holder, form))
            except StaleObjectError:
                continue
            return state

    async def add_user(self, app_name: str, user_id: str) -> None:
        """Record that the user has sessions in the app (what listing every user reads)."""
        holder_id = app_holder_id(app_name)
        while True:
            holder = await self.store.get_session(holder_id)
            if holder is None:
                await self.store.create_session_if_absent(
                    None, session_id=holder_id, kind="adk.state", metadata={KEY: {"state": {}}}
                )
                continue
            form = dict(_holder(holder))
            users = list(form.get("users", []))
            if user_id in users:
                return
            form["users"] = [*users, user_id]
            try:
                await self.store.update_session(_with_form(holder, form))
            except StaleObjectError:
                continue
            return

    async def _store_session_state(self, session_id: str, delta: Mapping[str, Any]) -> None:
        while True:
            stored = await self.store.get_session(session_id)
            if stored is None:
                return
            form = dict(_holder(stored))
            form["state"] = {**dict(form.get("state", {})), **delta}
            try:
                await self.store.update_session(_with_form(stored, form))
            except StaleObjectError:
                continue
            return


def adk_event_to_write(session_id: str, event: AdkEvent) -> AnyWrite:
    """The write that stores one ADK event: whole, and as a message where it means one."""
    whole = event.model_dump(mode="json", exclude_none=True)
    metadata = {KEY: {"event": whole}}
    event_id = str(uuid.uuid5(_EVENT_IDS, f"{session_id}\0{event.id}")) if event.id else None
    created_at = datetime.fromtimestamp(event.timestamp, UTC)
    parts = event.content.parts if event.content and event.content.parts else []
    texts = [part.text for part in parts if part.text and not part.thought]
    calls = [part.function_call for part in parts if part.function_call]
    responses = [part.function_response for part in parts if part.function_response]
    text = "\n".join(texts)
    if responses and len(responses) == 1 and not calls:
        response = responses[0]
        return MessageWrite(
            Role.TOOL,
            json.dumps(response.response, default=str, sort_keys=True),
            tool_call_id=response.id or response.name or "",
            metadata=metadata,
            id=event_id,
            created_at=created_at,
        )
    if (texts or calls) and not responses:
        role = Role.USER if event.author == "user" else Role.ASSISTANT
        tool_calls = [
            ToolCall(call.id or f"{event.id}-{index}", call.name or "", dict(call.args or {}))
            for index, call in enumerate(calls)
        ]
        if role == Role.USER and tool_calls:
            role = Role.ASSISTANT
        return MessageWrite(
            role, text, tool_calls=tool_calls, metadata=metadata, id=event_id, created_at=created_at
        )
    return EventWrite(EVENT_TYPE, whole, id=event_id, created_at=created_at)


def event_to_adk_event(event: Event) -> AdkEvent | None:
    """The ADK event a convostore event stands for: the stored event itself, or, for a
    message written another way, the message as an ADK event."""
    stored = stored_form(event, KEY)
    whole = stored.get("event") if stored is not None else None
    if whole is None and event.type == EVENT_TYPE:
        whole = event.payload
    if isinstance(whole, Mapping):
        return AdkEvent.model_validate(dict(whole))
    if not isinstance(event, Message):
        return None
    parts: list[types.Part] = []
    if event.role == Role.TOOL:
        try:
            response = json.loads(event.content)
        except json.JSONDecodeError:
            response = {"result": event.content}
        if not isinstance(response, dict):
            response = {"result": response}
        parts.append(
            types.Part(
                function_response=types.FunctionResponse(
                    id=event.tool_call_id, name=event.tool_call_id, response=response
                )
            )
        )
    else:
        if event.content:
            parts.append(types.Part(text=event.content))
        for call in event.tool_calls:
            args = call.arguments if isinstance(call.arguments, dict) else {"value": call.arguments}
            parts.append(
                types.Part(function_call=types.FunctionCall(id=call.id, name=call.name, args=args))
            )
    author = "user" if event.role in (Role.USER, Role.TOOL) else event.author_id or "model"
    role = "user" if event.role in (Role.USER, Role.TOOL) else "model"
    return AdkEvent(
        id=event.id,
        author=author,
        content=types.Content(role=role, parts=parts),
        timestamp=event.created_at.timestamp(),
    )


def session_kind(app_name: str) -> str:
    return f"adk.{app_name}"


def app_holder_id(app_name: str) -> str:
    return f"adk-app:{app_name}"


def user_holder_id(app_name: str, user_id: str) -> str:
    return f"adk-user:{json.dumps([app_name, user_id])}"


def _user_of_holder(holder_id: str) -> tuple[str, str]:
    app_name, user_id = json.loads(holder_id.removeprefix("adk-user:"))
    return str(app_name), str(user_id)


def _holder(session: StoredSession | None) -> Mapping[str, Any]:
    if session is None:
        return {}
    form = session.metadata.get(KEY)
    return form if isinstance(form, Mapping) else {}


def _with_form(session: StoredSession, form: Mapping[str, Any]) -> StoredSession:
    from dataclasses import replace

    return replace(session, metadata={**dict(session.metadata), KEY: dict(form)})


def _belongs(session: StoredSession, app_name: str, user_id: str) -> bool:
    form = _holder(session)
    return form.get("app_name") == app_name and form.get("user_id") == user_id


def _split_state(
    state: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(app, user, session) deltas of a state mapping; ``temp:`` keys are dropped."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


def _json_safe(state: Mapping[str, Any]) -> dict[str, Any]:
    """The state as JSON holds it: a value JSON cannot hold becomes its string."""
    safe: dict[str, Any] = json.loads(json.dumps(dict(state), default=str))
    return safe
