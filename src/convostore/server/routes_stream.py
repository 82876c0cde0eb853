"""Server-Sent Events: a session's log as it grows, and its lifecycle.

Each event appended is sent as ``event: message`` (a MESSAGE) or ``event: event``,
with its ``seq`` as the SSE id, so a client that reconnects with ``Last-Event-ID``
resumes right after the last event it saw. ``event: session`` carries the session
when its title, metadata or expiry change; ``event: deleted`` ends the stream when the
session is deleted, however it was (directly, as a part, by expiry, by another
process), and ``event: revoked`` when the stream's key is revoked. Writes through this
server wake the stream at once; writes by other processes, deletions and revocations
are found every ``poll_interval`` seconds.

A stream follows the session it opened, not its id: a session created later under the
same id is another one, and the stream ends with ``deleted`` before any of its events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Query
from fastapi.responses import StreamingResponse

from convostore.filters import EventFilter
from convostore.keys import ApiKey
from convostore.model import MESSAGE, Session
from convostore.records import event_to_json, session_to_json
from convostore.server.context import Context, Ctx, Key
from convostore.server.names import Names
from convostore.server.openapi import problems
from convostore.server.schemas import INT64_MAX

router = APIRouter(prefix="/v1")

PAGE = 200
KEEPALIVE_SECONDS = 15.0


def _frame(kind: str, data: Any, event_id: int | None = None) -> str:
    head = "" if event_id is None else f"id: {event_id}\n"
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"{head}event: {kind}\ndata: {body}\n\n"


def _lifecycle(session: Session) -> tuple[Any, ...]:
    return (session.title, dict(session.metadata), session.expires_at)


def _identity(session: Session) -> tuple[Any, ...]:
    # What never changes in a session's life; a session recreated under its id differs.
    return (session.owner_id, session.created_at, session.kind, session.part_of)


async def _stream(ctx: Context, key: ApiKey, session: Session, after: int) -> AsyncIterator[str]:
    ctx.observer.stream_opened()
    try:
        async for frame in _frames(ctx, key, session, after):
            yield frame
    finally:
        ctx.observer.stream_closed()


async def _frames(ctx: Context, key: ApiKey, session: Session, after: int) -> AsyncIterator[str]:
    yield f"retry: {int(ctx.poll_interval * 1000)}\n\n"
    names = Names.of(key)
    shown = names.id_out(session.id)
    identity, seen = _identity(session), _lifecycle(session)
    quiet = 0.0
    while True:
        if ctx.wakeups.closed:
            # The server stops: the client reconnects (to it or another) by Last-Event-ID.
            return
        if not await ctx.keys.is_live(key.id):
            yield _frame("revoked", {"id": shown})
            return
        events = await ctx.store.read(session.id, EventFilter(after_seq=after, limit=PAGE))
        # Read after the events: the session that holds them now held them when they were
        # read, for a session once deleted never comes back.
        current = await ctx.store.get_session(session.id)
        if current is None or _identity(current) != identity or not key.can_see(current.owner_id):
            yield _frame("deleted", {"id": shown})
            return
        for event in events:
            kind = "message" if event.type == MESSAGE else "event"
            yield _frame(kind, names.event(event_to_json(event, vectors=False)), event.seq)
            after = event.seq
        if len(events) == PAGE:
            continue
        if _lifecycle(current) != seen:
            seen = _lifecycle(current)
            yield _frame("session", names.session(session_to_json(current)))
        if events:
            quiet = 0.0
        elif quiet >= KEEPALIVE_SECONDS:
            quiet = 0.0
            yield ": keep-alive\n\n"
        await ctx.wakeups.wait(session.id, ctx.poll_interval)
        quiet += ctx.poll_interval


@router.get(
    "/sessions/{session_id}/stream",
    tags=["live"],
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "Server-Sent Events: message, event, session, deleted, revoked",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **problems(404),
    },
)
async def stream(
    session_id: str,
    key: Key,
    ctx: Ctx,
    after_seq: Annotated[int | None, Query(ge=0, le=INT64_MAX)] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """The session's events from after ``Last-Event-ID`` (or ``after_seq``; neither:
    from now on), then live."""
    session = await ctx.session(key, session_id)
    after = after_seq
    if last_event_id is not None:
        after = _event_id(last_event_id)
    if after is None:
        after = await _last_seq(ctx, session.id)
    return StreamingResponse(
        _stream(ctx, key, session, after),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _event_id(header: str) -> int:
    """The seq a ``Last-Event-ID`` names: ASCII digits of a 64-bit position, or 422."""
    value = header.strip()
    if not (value.isascii() and value.isdigit() and len(value) <= 19) or int(value) > INT64_MAX:
        raise HTTPException(422, "Last-Event-ID must be the seq of an event")
    return int(value)


async def _last_seq(ctx: Context, session_id: str) -> int:
    newest = await ctx.store.read(session_id, EventFilter(last=1))
    return newest[-1].seq if newest else 0
