"""What every request handler reaches: the store, the keys, the scope checks, the
wake-ups of live streams and the background jobs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import orjson
from fastapi import Depends, HTTPException, Request, Response

from convostore.compaction import Summarize
from convostore.errors import SessionNotFoundError
from convostore.keys import ApiKey, KeyRing, is_reserved_session
from convostore.model import Session
from convostore.server.names import Names
from convostore.server.observe import Observer
from convostore.store import Store

__all__ = ["KEY_SCOPE", "Context", "Key", "Wakeups", "context", "current_key", "json_response"]

KEY_SCOPE = "convostore.key"


class Wakeups:
    """Wakes the live streams of a session when this server appended to it. Writes by
    other processes are found by each stream's periodic look."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self.closed = False

    def close(self) -> None:
        """The server is stopping: every stream ends at its next look."""
        self.closed = True
        self.notify_all()

    def notify(self, session_id: str) -> None:
        for event in self._waiting.get(session_id, ()):
            event.set()

    def notify_all(self) -> None:
        for waiting in self._waiting.values():
            for event in waiting:
                event.set()

    async def wait(self, session_id: str, seconds: float) -> None:
        """Until this server writes to the session, or ``seconds`` pass, or it closes."""
        if self.closed:
            return
        event = asyncio.Event()
        waiting = self._waiting.setdefault(session_id, set())
        waiting.add(event)
        try:
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            pass
        finally:
            waiting.discard(event)
            if not waiting:
                self._waiting.pop(session_id, None)


@dataclass(slots=True)
class Job:
    id: str
    kind: str
    state: str = "running"
    done: int = 0
    total: int | None = None
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    task: asyncio.Task[None] | None = None


@dataclass(slots=True)
class Context:
    store: Store
    keys: KeyRing
    summarize: Summarize | None
    poll_interval: float
    observer: Observer = field(default_factory=Observer)
    wakeups: Wakeups = field(default_factory=Wakeups)
    jobs: dict[str, Job] = field(default_factory=dict)

    async def session(self, key: ApiKey, session_id: str) -> Session:
        """The session the key names ``session_id`` (in its owner's names, see
        `convostore.server.names`), if the key may see it; otherwise 404, as for a
        missing one."""
        names = Names.of(key)
        for candidate in dict.fromkeys((names.id_in(session_id), session_id)):
            if is_reserved_session(candidate):
                continue
            found = await self.store.get_session(candidate)
            if found is not None and key.can_see(found.owner_id):
                return found
        raise SessionNotFoundError(f"no session {session_id!r}")

    def owner_scope(self, key: ApiKey, owner_id: str | None) -> str:
        """The owner a listing or search keeps to: the key's own, or (admin keys only)
        the one named."""
        if owner_id is None:
            if key.owner_id is None:
                raise HTTPException(422, "an admin key without an owner must name owner_id")
            return key.owner_id
        if not key.can_see(owner_id):
            raise HTTPException(403, "this key reaches only its own owner's sessions")
        return owner_id

    def require_admin(self, key: ApiKey) -> None:
        if not key.admin:
            raise HTTPException(403, "this needs an admin key")

    def changed(self, session_id: str) -> None:
        self.wakeups.notify(session_id)


async def context(request: Request) -> Context:
    # A coroutine: FastAPI would run a plain function in a thread, on every request.
    ctx: Context = request.app.state.convostore
    return ctx


async def current_key(request: Request) -> ApiKey:
    """The request's key, checked by the gate (`convostore.server.app.Gate`) from the
    request's head before any of its body was read."""
    key = request.scope.get(KEY_SCOPE)
    if not isinstance(key, ApiKey):
        raise HTTPException(
            401, "a valid API key is needed", headers={"WWW-Authenticate": "Bearer"}
        )
    return key


def json_response(content: Any, status_code: int = 200) -> Response:
    """``content`` (JSON values only) as a JSON response, serialized once by orjson: the
    hot routes skip FastAPI's validation of what they built themselves."""
    try:
        body = orjson.dumps(content)
    except TypeError:  # an integer beyond 64 bits in a payload
        body = json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(body, status_code=status_code, media_type="application/json")


Ctx = Annotated[Context, Depends(context)]
Key = Annotated[ApiKey, Depends(current_key)]
OnChange = Callable[[str], None]
