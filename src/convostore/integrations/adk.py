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

An ADK session is a convostore session owned by the ADK user (a convostore user with
the same id), of kind ``adk.<app_name>``. ADK scopes a session id by (app, user), so the
convostore id is `store_session_id` of the three (the ADK id is kept in the session's
metadata). Each ADK event is one convostore event that keeps the event whole (it reads
back equal) and is a message where it means one: user text, model text and function
calls, a function response. Other events (state changes, transfers, ...) are of type
``ADK.EVENT``.

`append_event` writes the event and, in the same version-checked batch, a synthetic
``ADK.SESSION_STATE`` record of the session-scoped state after it and the session's
update time (the event's timestamp): an event is never stored without its state. A
session object that another writer has moved past is refused with ADK's
`StaleSessionError` and nothing is written. ``app:`` and ``user:`` keys are shared by
many sessions, so they live in holder sessions (``adk-app:<app_name>``,
``adk-user:["<app_name>", "<user_id>"]``) as ``ADK.STATE_DELTA`` records, each added by
one write whose id comes from the event's, so a retried append adds it once;
``temp:`` keys are never stored.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from convostore.errors import EventIdConflictError, SessionExistsError
from convostore.errors import SessionNotFoundError as ConvostoreSessionNotFoundError
from convostore.filters import EventFilter
from convostore.integrations._common import (
    AnyWrite,
    framework_event_type,
    missing_framework,
    stored_form,
)
from convostore.model import (
    MESSAGE,
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
    "session_state_write",
    "store_session_id",
    "user_holder_id",
]

KEY = "adk"
EVENT_TYPE = framework_event_type("ADK", "EVENT")
STATE_TYPE = framework_event_type("ADK", "SESSION_STATE")
DELTA_TYPE = framework_event_type("ADK", "STATE_DELTA")
USER_TYPE = framework_event_type("ADK", "USER")
HOLDER_KIND = "adk.state"
_EVENT_TYPES = (MESSAGE, EVENT_TYPE)
_EVENT_IDS = uuid.UUID("0b8f3c52-62d4-4a57-8f0e-2b6a7c1d9e40")
_SESSION_IDS = uuid.UUID("5d0c2a6e-8f1b-4c3d-9a7e-6b2f1e0d4c58")
_PAGE = 100
_KNOWN_STATES = 1024


class ConvostoreSessionService(BaseSessionService):
    """ADK's `BaseSessionService` on a convostore store of any backend."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # The session-scoped state each session had at the version this service last
        # wrote or read it (so an append needs no read of it), newest last.
        self._known: OrderedDict[str, tuple[int, dict[str, Any]]] = OrderedDict()

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
        stored_id = store_session_id(app_name, user_id, session_id)
        app_delta, user_delta, session_state = _split_state(_json_safe(state or {}))
        form = {"app_name": app_name, "user_id": user_id, "session_id": session_id}
        try:
            stored = await self.store.create_session(
                User(user_id, user_id),
                session_id=stored_id,
                kind=session_kind(app_name),
                metadata={KEY: {**form, "state": session_state}},
            )
        except SessionExistsError as error:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from error
        await self.add_user(app_name, user_id)
        origin = f"create\0{stored_id}"
        await self.add_holder_delta(app_holder_id(app_name), app_delta, origin)
        await self.add_holder_delta(user_holder_id(app_name, user_id), user_delta, origin)
        self._remember(stored_id, 0, session_state)
        app_state, user_state = await asyncio.gather(
            self._holder_state(app_holder_id(app_name)),
            self._holder_state(user_holder_id(app_name, user_id)),
        )
        return self._session(
            stored, session_state, app_state, user_state, [], 0, stored.created_at.timestamp()
        )

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        stored_id = store_session_id(app_name, user_id, session_id)
        stored = await self.store.get_session(stored_id)
        if stored is None or not _belongs(stored, app_name, user_id):
            return None
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
                stored_id,
                EventFilter(active_view=True, types=_EVENT_TYPES, since=since, last=recent),
            )
            found = [adk for event in read if (adk := event_to_adk_event(event)) is not None]
            return found if recent is None else found[-recent:]

        events, (state, updated), app_state, user_state = await asyncio.gather(
            read_events(),
            self._session_state(stored),
            self._holder_state(app_holder_id(app_name)),
            self._holder_state(user_holder_id(app_name, user_id)),
        )
        self._remember(stored_id, stored.version, state)
        return self._session(stored, state, app_state, user_state, events, stored.version, updated)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (of one user, or of every user who has one), with their
        state and without events, oldest update first as ADK orders them."""
        users = [user_id] if user_id is not None else await self._users(app_name)
        app_state = await self._holder_state(app_holder_id(app_name))
        found: list[Session] = []
        for user in users:
            user_state = await self._holder_state(user_holder_id(app_name, user))
            async for stored in self._sessions_of(user, app_name):
                state, updated = await self._session_state(stored)
                found.append(
                    self._session(stored, state, app_state, user_state, [], stored.version, updated)
                )
        found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=found)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        stored_id = store_session_id(app_name, user_id, session_id)
        stored = await self.store.get_session(stored_id)
        if stored is not None and _belongs(stored, app_name, user_id):
            await self.store.delete_session(stored_id)
        self._known.pop(stored_id, None)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._holder_state(user_holder_id(app_name, user_id))

    # ------------------------------------------------------------------ events

    async def append_event(self, session: Session, event: AdkEvent) -> AdkEvent:
        """Store the event, its session-scoped state and the session's update time in one
        write, checked against the log's version the session object was read at (a
        session another writer moved past raises `StaleSessionError` and writes
        nothing); then its ``app:`` and ``user:`` state, each one idempotent write."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        stored_id = store_session_id(session.app_name, session.user_id, session.id)
        marker = session._storage_update_marker
        version = int(marker) if marker is not None else await self._version_of(stored_id)
        state = await self._state_at(stored_id, version)
        delta = _json_safe(dict(event.actions.state_delta or {})) if event.actions else {}
        app_delta, user_delta, session_delta = _split_state(delta)
        state = {**state, **session_delta}
        write = adk_event_to_write(stored_id, event)
        for attempt in range(2):
            writes = [write, session_state_write(write.id, state, event.timestamp)]
            try:
                applied = await self.store.append_events(stored_id, writes, version)
            except EventIdConflictError:
                applied = False
            if applied:
                break
            self._known.pop(stored_id, None)
            stored = await self._stored_event(stored_id, write.id)
            if stored is not None and _same_event(stored, event):
                # A re-delivery (the same event again): nothing is written twice and
                # the state is not applied twice; what the first delivery left to do
                # (the shared state) is completed, idempotently.
                await self._add_shared_state(session, write.id, app_delta, user_delta)
                return event
            if stored is not None and attempt == 0:
                # Another event under an id already stored: it gets an id of its own.
                write = replace(write, id=str(uuid.uuid4()))
                continue
            if await self.store.get_session(stored_id) is None:
                raise AdkSessionNotFoundError(f"Session {session.id} not found.")
            raise StaleSessionError(
                "The session was changed by another writer since it was read: read it "
                "again with get_session and retry."
            )
        self._remember(stored_id, version + 1, state)
        await self._add_shared_state(session, write.id, app_delta, user_delta)
        session._storage_update_marker = str(version + 1)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    async def _add_shared_state(
        self,
        session: Session,
        event_id: str | None,
        app_delta: Mapping[str, Any],
        user_delta: Mapping[str, Any],
    ) -> None:
        origin = f"event\0{event_id}"
        await self.add_holder_delta(app_holder_id(session.app_name), app_delta, origin)
        await self.add_holder_delta(
            user_holder_id(session.app_name, session.user_id), user_delta, origin
        )

    async def _stored_event(self, stored_id: str, event_id: str | None) -> Event | None:
        if event_id is None:
            return None
        for stored in await self.store.read(stored_id, EventFilter(types=_EVENT_TYPES)):
            if stored.id == event_id:
                return stored
        return None

    # ------------------------------------------------------------------ holders

    async def add_user(self, app_name: str, user_id: str) -> None:
        """Record that the user has sessions in the app (what listing every user reads):
        one idempotent write."""
        holder_id = app_holder_id(app_name)
        record = EventWrite(
            USER_TYPE,
            {"user_id": user_id},
            id=str(uuid.uuid5(_EVENT_IDS, f"user\0{holder_id}\0{user_id}")),
            synthetic=True,
        )
        await self._append_to_holder(holder_id, record)

    async def add_holder_delta(self, holder_id: str, delta: Mapping[str, Any], origin: str) -> None:
        """Add ``delta`` to the state of an app's or a user's holder session, as one
        write whose id comes from ``origin`` (the write it belongs to), so a retry of
        that write adds it once. Nothing for an empty delta."""
        if not delta:
            return
        record = EventWrite(
            DELTA_TYPE,
            {"delta": dict(delta)},
            id=str(uuid.uuid5(_EVENT_IDS, f"delta\0{holder_id}\0{origin}")),
            synthetic=True,
        )
        await self._append_to_holder(holder_id, record)

    async def _append_to_holder(self, holder_id: str, record: EventWrite) -> None:
        try:
            await self.store.append_event(holder_id, record)
            return
        except ConvostoreSessionNotFoundError:
            await self.store.create_session_if_absent(
                None, session_id=holder_id, kind=HOLDER_KIND, metadata={KEY: {"holder": True}}
            )
        await self.store.append_event(holder_id, record)

    async def _holder_state(self, holder_id: str) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for record in await self.store.read(holder_id, EventFilter(types=(DELTA_TYPE,))):
            if isinstance(record.payload, Mapping):
                state.update(record.payload.get("delta", {}))
        return state

    async def _users(self, app_name: str) -> list[str]:
        records = await self.store.read(app_holder_id(app_name), EventFilter(types=(USER_TYPE,)))
        users = [str(r.payload["user_id"]) for r in records if isinstance(r.payload, Mapping)]
        return list(dict.fromkeys(users))

    # ------------------------------------------------------------------ inside

    async def _version_of(self, stored_id: str) -> int:
        stored = await self.store.get_session(stored_id)
        if stored is None:
            raise AdkSessionNotFoundError(f"Session {stored_id} not found.")
        return stored.version

    async def _state_at(self, stored_id: str, version: int) -> dict[str, Any]:
        """The session-scoped state as stored at ``version`` (as read now: an append
        checked against ``version`` is refused if the log moved since)."""
        known = self._known.get(stored_id)
        if known is not None and known[0] == version:
            return dict(known[1])
        stored = await self.store.get_session(stored_id)
        if stored is None:
            raise AdkSessionNotFoundError(f"Session {stored_id} not found.")
        state, _ = await self._session_state(stored)
        return state

    async def _session_state(self, stored: StoredSession) -> tuple[dict[str, Any], float]:
        """The session-scoped state and the last update time: the newest state record's,
        or, before the first event, the state and time of the session's creation."""
        records = await self.store.read(stored.id, EventFilter(types=(STATE_TYPE,), last=1))
        for record in records[-1:]:
            if isinstance(record.payload, Mapping):
                return (
                    dict(record.payload.get("state", {})),
                    float(record.payload.get("last_update_time", record.created_at.timestamp())),
                )
        return dict(_holder(stored).get("state", {})), stored.created_at.timestamp()

    def _remember(self, stored_id: str, version: int, state: Mapping[str, Any]) -> None:
        self._known[stored_id] = (version, dict(state))
        self._known.move_to_end(stored_id)
        while len(self._known) > _KNOWN_STATES:
            self._known.popitem(last=False)

    def _session(
        self,
        stored: StoredSession,
        session_state: Mapping[str, Any],
        app_state: Mapping[str, Any],
        user_state: Mapping[str, Any],
        events: list[AdkEvent],
        version: int,
        last_update_time: float,
    ) -> Session:
        form = _holder(stored)
        state = dict(session_state)
        state.update({State.APP_PREFIX + k: v for k, v in app_state.items()})
        state.update({State.USER_PREFIX + k: v for k, v in user_state.items()})
        session = Session(
            id=str(form.get("session_id", stored.id)),
            app_name=str(form.get("app_name", "")),
            user_id=str(form.get("user_id", stored.owner_id or "")),
            state=state,
            events=events,
            last_update_time=last_update_time,
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


def session_state_write(event_id: str | None, state: Mapping[str, Any], at: float) -> EventWrite:
    """The record, written in the same batch as the event (id ``event_id``), of the
    session-scoped state after it and the session's update time (the event's)."""
    return EventWrite(
        STATE_TYPE,
        {"state": dict(state), "last_update_time": at},
        id=str(uuid.uuid5(_EVENT_IDS, f"state\0{event_id}")) if event_id else None,
        created_at=datetime.fromtimestamp(at, UTC),
        synthetic=True,
    )


def store_session_id(app_name: str, user_id: str, session_id: str) -> str:
    """The convostore session id of ADK session ``session_id`` of that app and user: ADK
    scopes a session id by (app, user), so two users may each have a session ``s1``."""
    return str(uuid.uuid5(_SESSION_IDS, json.dumps([app_name, user_id, session_id])))


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


def _same_event(stored: Event, event: AdkEvent) -> bool:
    found = event_to_adk_event(stored)
    return found is not None and found.model_dump(mode="json") == event.model_dump(mode="json")


def session_kind(app_name: str) -> str:
    return f"adk.{app_name}"


def app_holder_id(app_name: str) -> str:
    return f"adk-app:{app_name}"


def user_holder_id(app_name: str, user_id: str) -> str:
    return f"adk-user:{json.dumps([app_name, user_id])}"


def _holder(session: StoredSession | None) -> Mapping[str, Any]:
    if session is None:
        return {}
    form = session.metadata.get(KEY)
    return form if isinstance(form, Mapping) else {}


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
