"""Users and sessions: create, read, update by stamp, delete, list, parts, lookup, expiry."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Query, Response

from convostore.cursors import decode_cursor
from convostore.errors import InvalidCursorError, SessionExistsError
from convostore.model import (
    PageRequest,
    SessionFilter,
    SessionOrder,
    SessionSummary,
    User,
    UserRef,
)
from convostore.records import session_to_json, user_from_json
from convostore.server.context import Ctx, Key
from convostore.server.names import Names
from convostore.server.openapi import problems
from convostore.server.schemas import (
    Count,
    Deleted,
    PartCreate,
    SessionCreate,
    SessionOut,
    SessionPatch,
    SummaryOut,
    SummaryPage,
    Time,
    TitleBody,
    UserBody,
    UserIn,
    UserOut,
)

router = APIRouter(prefix="/v1")


def summary_json(summary: SessionSummary, names: Names) -> dict[str, Any]:
    return {
        "session": names.session(session_to_json(summary.session)),
        "owner": None if summary.owner is None else names.user(summary.owner),
        "message_count": summary.message_count,
        "started_by": None if summary.started_by is None else names.user(summary.started_by),
    }


def user_ref(value: str | UserIn, names: Names) -> UserRef:
    if isinstance(value, str):
        return names.user_in(value)
    return user_from_json(names.user_ref_in(value.model_dump()))


def _cursor_order(cursor: str) -> SessionOrder:
    """The order that issued ``cursor`` (a request naming none follows it)."""
    for order in SessionOrder:
        try:
            decode_cursor(cursor, order)
        except InvalidCursorError:
            continue
        return order
    return SessionOrder.CREATED


def etag(stamp: str) -> str:
    return f'"{stamp}"'


@router.get("/me", tags=["keys"], responses=problems())
async def whoami(key: Key) -> dict[str, Any]:
    """The calling key: its id, owner and whether it is an admin key."""
    return {"id": key.id, "owner_id": key.owner_id, "admin": key.admin, "label": key.label}


@router.put("/users/{user_id}", tags=["users"], response_model=UserOut, responses=problems())
async def put_user(user_id: str, body: UserBody, key: Key, ctx: Ctx) -> dict[str, Any]:
    """Store the user, replacing the one stored under this id, and return it. The ids
    are the key's owner's own (another owner's ``bot`` is another record); the owner's
    id names the owner's user. Admin keys name the store's ids."""
    names = Names.of(key)
    stored = await ctx.store.put_user(User(id=names.user_in(user_id), **body.model_dump()))
    return names.user(stored)


@router.get("/users/{user_id}", tags=["users"], response_model=UserOut, responses=problems(404))
async def get_user(user_id: str, key: Key, ctx: Ctx) -> dict[str, Any]:
    """A user of the key's owner: its own record, or one written through its keys
    (as an author, a recipient, or here). Admin keys name the store's ids."""
    names = Names.of(key)
    user = await ctx.store.get_user(names.user_in(user_id))
    if user is None:
        raise HTTPException(404, f"no user {user_id!r}")
    return names.user(user)


@router.post(
    "/sessions",
    tags=["sessions"],
    status_code=201,
    response_model=SessionOut,
    responses=problems(403, 404, 409),
)
async def create_session(
    body: SessionCreate, key: Key, ctx: Ctx, response: Response
) -> dict[str, Any]:
    """Create a session for the key's owner (admin keys: for ``owner_id``). An
    existing id is 409 and leaves that session untouched."""
    owner = ctx.owner_scope(key, body.owner_id)
    names = Names.of(key)
    part_of = None if body.part_of is None else (await ctx.session(key, body.part_of)).id
    session_id = None
    if body.id is not None:
        session_id = names.id_in(body.id)
        # A session of this owner made under the plain id (by the store's own API) is
        # the one this id names: it is taken.
        if session_id != body.id:
            plain = await ctx.store.get_session(body.id)
            if plain is not None and key.can_see(plain.owner_id):
                raise SessionExistsError(f"a session {body.id!r} exists")
    session = await ctx.store.create_session(
        owner,
        session_id=session_id,
        title=body.title,
        kind=body.kind,
        part_of=part_of,
        held_with=None if body.held_with is None else user_ref(body.held_with, names),
        metadata=body.metadata,
        expires_at=body.expires_at,
    )
    response.headers["ETag"] = etag(session.stamp)
    return names.session(session_to_json(session))


@router.get("/sessions", tags=["sessions"], response_model=SummaryPage, responses=problems(403))
async def list_sessions(
    key: Key,
    ctx: Ctx,
    owner_id: str | None = None,
    order: SessionOrder | None = None,
    cursor: str | None = None,
    size: Annotated[int, Query(ge=1, le=100)] = 20,
    kind: str | None = None,
    include_parts: bool = False,
) -> dict[str, Any]:
    """A page of an owner's sessions with their counts, newest first by creation
    (``order=created``) or by last activity; pass ``next_cursor`` back for the next
    page. A cursor keeps the order that issued it."""
    owner = ctx.owner_scope(key, owner_id)
    chosen = order or (SessionOrder.CREATED if cursor is None else _cursor_order(cursor))
    page = await ctx.store.list_summaries(
        owner,
        PageRequest(size=size, cursor=cursor, order=chosen),
        SessionFilter(kind=kind, include_parts=include_parts),
    )
    names = Names.of(key)
    items = [summary_json(s, names) for s in page.items]
    return {"items": items, "next_cursor": page.next_cursor}


@router.get("/sessions-count", tags=["sessions"], response_model=Count, responses=problems(403))
async def count_sessions(
    key: Key,
    ctx: Ctx,
    owner_id: str | None = None,
    kind: str | None = None,
    include_parts: bool = False,
) -> dict[str, int]:
    """How many sessions the same listing holds."""
    owner = ctx.owner_scope(key, owner_id)
    count = await ctx.store.count_sessions(owner, SessionFilter(kind, include_parts))
    return {"count": count}


@router.get(
    "/sessions-lookup", tags=["sessions"], response_model=list[SessionOut], responses=problems()
)
async def lookup_sessions(name: str, value: str, key: Key, ctx: Ctx) -> list[dict[str, Any]]:
    """Sessions whose indexed metadata ``name`` equals ``value`` (as strings), oldest
    first, of those the key may see. A key the store does not index is 422."""
    found = await ctx.store.find_sessions_by_metadata(name, value)
    names = Names.of(key)
    return [names.session(session_to_json(s)) for s in found if key.can_see(s.owner_id)]


@router.post(
    "/sessions-expired/delete", tags=["sessions"], response_model=Deleted, responses=problems(403)
)
async def delete_expired(key: Key, ctx: Ctx, before: Time | None = None) -> dict[str, int]:
    """Delete every owner's sessions that expired before ``before`` (default: now).
    Admin keys only."""
    ctx.require_admin(key)
    deleted = await ctx.store.delete_expired(before)
    ctx.wakeups.notify_all()
    return {"deleted": deleted}


@router.get(
    "/sessions/{session_id}", tags=["sessions"], response_model=SessionOut, responses=problems(404)
)
async def get_session(session_id: str, key: Key, ctx: Ctx, response: Response) -> dict[str, Any]:
    """A session; its ``stamp`` is also the ``ETag``."""
    session = await ctx.session(key, session_id)
    response.headers["ETag"] = etag(session.stamp)
    return Names.of(key).session(session_to_json(session))


@router.patch(
    "/sessions/{session_id}",
    tags=["sessions"],
    response_model=SessionOut,
    responses=problems(404, 412, 428),
)
async def update_session(
    session_id: str,
    body: SessionPatch,
    key: Key,
    ctx: Ctx,
    response: Response,
    if_match: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    """Change title, metadata or expiry, only if ``If-Match`` holds the current
    stamp (ETag): 412 and nothing written otherwise."""
    session = await ctx.session(key, session_id)
    if if_match is None:
        raise HTTPException(428, "send If-Match with the session's ETag")
    stamp = if_match.strip().removeprefix("W/").strip('"')
    changes: dict[str, Any] = {"stamp": stamp}
    for name in body.model_fields_set:
        changes[name] = getattr(body, name)
    updated = await ctx.store.update_session(replace(session, **changes))
    ctx.changed(session.id)
    response.headers["ETag"] = etag(updated.stamp)
    return Names.of(key).session(session_to_json(updated))


@router.put(
    "/sessions/{session_id}/title",
    tags=["sessions"],
    response_model=SessionOut,
    responses=problems(404),
)
async def set_title(
    session_id: str, body: TitleBody, key: Key, ctx: Ctx, response: Response
) -> dict[str, Any]:
    """Set the title alone; never conflicts."""
    session = await ctx.session(key, session_id)
    updated = await ctx.store.set_title(session.id, body.title)
    ctx.changed(session.id)
    response.headers["ETag"] = etag(updated.stamp)
    return Names.of(key).session(session_to_json(updated))


@router.delete(
    "/sessions/{session_id}", tags=["sessions"], status_code=204, responses=problems(404)
)
async def delete_session(session_id: str, key: Key, ctx: Ctx) -> Response:
    """Delete the session, its parts and their logs."""
    session = await ctx.session(key, session_id)
    await ctx.store.delete_session(session.id)
    # Its parts went with it: every stream looks whether its session is still there.
    ctx.wakeups.notify_all()
    return Response(status_code=204)


@router.get(
    "/sessions/{session_id}/parts",
    tags=["sessions"],
    response_model=list[SummaryOut],
    responses=problems(404),
)
async def list_parts(session_id: str, key: Key, ctx: Ctx) -> list[dict[str, Any]]:
    """The side conversations of a session, with their counts."""
    session = await ctx.session(key, session_id)
    names = Names.of(key)
    return [summary_json(s, names) for s in await ctx.store.list_parts(session.id)]


@router.post(
    "/sessions/{session_id}/parts",
    tags=["sessions"],
    response_model=SessionOut,
    responses=problems(404),
)
async def find_or_create_part(
    session_id: str, body: PartCreate, key: Key, ctx: Ctx
) -> dict[str, Any]:
    """The session's part held with ``held_with``, created if absent."""
    session = await ctx.session(key, session_id)
    names = Names.of(key)
    part = await ctx.store.find_or_create_part(
        session.id, user_ref(body.held_with, names), title=body.title, kind=body.kind
    )
    return names.session(session_to_json(part))


@router.get(
    "/sessions/{session_id}/participants",
    tags=["sessions"],
    response_model=list[UserOut],
    responses=problems(404),
)
async def participants(session_id: str, key: Key, ctx: Ctx) -> list[dict[str, Any]]:
    """Everyone who wrote in the session, once each, in order of first message."""
    session = await ctx.session(key, session_id)
    names = Names.of(key)
    return [names.user(u) for u in await ctx.store.participants(session.id)]
