"""The log (append, batches, reads with every filter, narration), search, compaction
and re-embedding jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from convostore.compaction import (
    AnyOf,
    CompactionStrategy,
    CompactionTrigger,
    SlidingWindow,
    Summarize,
    TokenBudget,
    TokenCount,
    TurnCount,
    TurnWindow,
)
from convostore.errors import ConflictError, ReembedIncompleteError, StoreError
from convostore.filters import EventFilter
from convostore.ids import new_id
from convostore.model import Event, EventWrite, MessageWrite
from convostore.records import event_to_json, write_from_json
from convostore.server.context import Context, Ctx, Job, Key, json_response
from convostore.server.names import Names
from convostore.server.openapi import problems
from convostore.server.schemas import (
    DEFAULT_EVENTS_PAGE,
    MAX_EVENTS_PAGE,
    BatchIn,
    CompactIn,
    CompactOut,
    EventIn,
    EventList,
    EventOut,
    EventQuery,
    HitList,
    JobOut,
    NarrationBody,
    SearchIn,
    StrategyIn,
    TriggerIn,
    Version,
)

router = APIRouter(prefix="/v1")


NameList = Annotated[list[str] | None, Query()]


def to_write(body: EventIn, names: Names) -> MessageWrite | EventWrite:
    record = body.model_dump(exclude_unset=True, by_alias=True)
    if body.role is not None and "content" not in record:
        raise HTTPException(422, "a message needs content")
    return write_from_json(names.write_in(record))


# Every field of `EventOut`, null where the event has none (as the response model
# would fill them in): the hot routes answer without it.
_EVENT_FIELDS = dict.fromkeys(EventOut.model_fields)


def event_json(event: Event, names: Names, *, vectors: bool = True) -> dict[str, Any]:
    return {**_EVENT_FIELDS, **names.event(event_to_json(event, vectors=vectors))}


async def event_body(request: Request) -> EventIn:
    """The body of an append, parsed and validated by pydantic in one pass."""
    try:
        return EventIn.model_validate_json(await request.body())
    except ValidationError as error:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in error.errors(include_url=False)]
        ) from None


@router.post(
    "/sessions/{session_id}/events",
    tags=["log"],
    status_code=201,
    response_model=EventOut,
    responses={200: {"description": "A retried append: the stored event"}, **problems(404, 409)},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EventIn"}}},
        }
    },
)
async def append_event(
    session_id: str, key: Key, ctx: Ctx, body: Annotated[EventIn, Depends(event_body)]
) -> Response:
    """Append a message or an event. Idempotent by ``id``: a retried append answers 200
    with the stored event and writes nothing; an id of another session's log is 409."""
    session = await ctx.session(key, session_id)
    names = Names.of(key)
    appended = await ctx.store.append(session.id, to_write(body, names))
    if not appended.applied:
        # A retried append: the stored event, nothing written.
        return json_response(event_json(appended.event, names))
    ctx.changed(session.id)
    return json_response(event_json(appended.event, names), 201)


@router.post(
    "/sessions/{session_id}/events/batch",
    tags=["log"],
    response_model=Version,
    responses=problems(404, 409),
)
async def append_batch(session_id: str, body: BatchIn, key: Key, ctx: Ctx) -> dict[str, int]:
    """Append all the events or none, only if the log's version is
    ``expected_version``: 409 (nothing written) otherwise."""
    session = await ctx.session(key, session_id)
    names = Names.of(key)
    writes = [to_write(item, names) for item in body.events]
    if not await ctx.store.append_events(session.id, writes, body.expected_version):
        raise ConflictError(
            f"the log's version is no longer {body.expected_version}; nothing was written"
        )
    ctx.changed(session.id)
    return {"version": await ctx.store.version(session.id)}


async def event_query(request: Request) -> EventQuery:
    """The query of a read, validated by pydantic in one call (FastAPI's own query
    parsing costs more than the read it serves)."""
    params = request.query_params
    values: dict[str, Any] = {}
    for name in params:
        values[name] = params.getlist(name) if name in _LISTS else params[name]
    try:
        return EventQuery.model_validate(values)
    except ValidationError as error:
        raise RequestValidationError(
            [{**e, "loc": ("query", *e["loc"])} for e in error.errors(include_url=False)]
        ) from None


_LISTS = frozenset({"types", "roles"})


def _query_parameters() -> list[dict[str, Any]]:
    """``EventQuery`` as OpenAPI query parameters (the route reads them itself)."""
    schema = EventQuery.model_json_schema()
    return [
        {"name": name, "in": "query", "required": False, "schema": field}
        for name, field in schema["properties"].items()
    ]


@router.get(
    "/sessions/{session_id}/events",
    tags=["log"],
    response_model=EventList,
    responses=problems(404),
    openapi_extra={"parameters": _query_parameters()},
)
async def read_events(
    session_id: str, key: Key, ctx: Ctx, query: Annotated[EventQuery, Depends(event_query)]
) -> Response:
    """The events that pass every filter given, oldest first (see `EventFilter`:
    ``last`` widens back to a turn start; ``after_seq`` + ``limit`` page forward).
    A read without ``last`` is a page: ``limit`` events at most (200 by default, 1000
    at most); when it is full, ``next_after_seq`` is the ``after_seq`` of the next page
    (of the log; the active view is one page of at most 1000). Vectors are left out
    unless ``vectors=true``."""
    active_view, limit, last = query.active_view, query.limit, query.last
    session = await ctx.session(key, session_id)
    if last is None and limit is None:
        limit = MAX_EVENTS_PAGE if active_view else DEFAULT_EVENTS_PAGE
    # The version the session was read with: never ahead of the events read after it.
    version = session.version
    events = await ctx.store.read(
        session.id,
        EventFilter(
            active_view=active_view,
            types=query.types,
            roles=query.roles,
            exclude_synthetic=query.exclude_synthetic,
            branch=query.branch,
            since=query.since,
            until=query.until,
            text=query.text,
            after_seq=query.after_seq,
            limit=limit,
            last=last,
        ),
    )
    names = Names.of(key)
    full = limit is not None and limit > 0 and len(events) == limit and not active_view
    return json_response(
        {
            "items": [event_json(e, names, vectors=query.vectors) for e in events],
            "version": version,
            "next_after_seq": events[-1].seq if full else None,
        }
    )


@router.get(
    "/sessions/{session_id}/version", tags=["log"], response_model=Version, responses=problems(404)
)
async def version(session_id: str, key: Key, ctx: Ctx) -> dict[str, int]:
    """The log's version: +1 for every append that added an event and every batch."""
    session = await ctx.session(key, session_id)
    return {"version": await ctx.store.version(session.id)}


@router.put(
    "/sessions/{session_id}/messages/{message_id}/narration",
    tags=["log"],
    status_code=204,
    responses=problems(404),
)
async def set_narration(
    session_id: str, message_id: str, body: NarrationBody, key: Key, ctx: Ctx
) -> Response:
    """Set or clear a message's narration; 404 for a message not in that session."""
    session = await ctx.session(key, session_id)
    names = Names.of(key)
    for candidate in dict.fromkeys((names.id_in(message_id), message_id)):
        if await ctx.store.set_narration(session.id, candidate, body.narration):
            break
    else:
        raise HTTPException(404, f"no message {message_id!r} in that session")
    ctx.changed(session.id)
    return Response(status_code=204)


@router.post("/search", tags=["search"], response_model=HitList, responses=problems(403, 404))
async def search(body: SearchIn, key: Key, ctx: Ctx) -> dict[str, Any]:
    """Messages that match, best first: ``vector`` (by meaning), ``text`` (every word)
    or ``hybrid``; within the key's owner (admin keys: ``owner_id``, or everyone)."""
    owner: str | None
    owner = None if key.admin and body.owner_id is None else ctx.owner_scope(key, body.owner_id)
    session_id = None
    if body.session_id is not None:
        session_id = (await ctx.session(key, body.session_id)).id
    hits = await ctx.store.search(
        body.query,
        vector=body.vector,
        mode=body.mode,
        owner_id=owner,
        session_id=session_id,
        k=body.k,
        roles=body.roles,
    )
    names = Names.of(key)
    return {
        "items": [
            {"message": event_json(h.message, names, vectors=False), "score": h.score} for h in hits
        ]
    }


def _strategy(spec: StrategyIn) -> CompactionStrategy:
    if spec.kind == "sliding_window" and spec.keep_last is not None:
        return SlidingWindow(spec.keep_last)
    if spec.kind == "turn_window" and spec.keep_turns is not None:
        return TurnWindow(spec.keep_turns)
    if spec.kind == "token_budget" and spec.max_tokens is not None:
        return TokenBudget(spec.max_tokens)
    needs = {"sliding_window": "keep_last", "turn_window": "keep_turns"}
    raise HTTPException(422, f"{spec.kind} needs {needs.get(spec.kind, 'max_tokens')}")


def _trigger(spec: TriggerIn | None) -> CompactionTrigger | None:
    if spec is None:
        return None
    triggers: list[CompactionTrigger] = []
    if spec.turn_count is not None:
        triggers.append(TurnCount(spec.turn_count))
    if spec.token_count is not None:
        triggers.append(TokenCount(spec.token_count))
    if not triggers:
        return None
    return triggers[0] if len(triggers) == 1 else AnyOf(*triggers)


@router.post(
    "/sessions/{session_id}/compact",
    tags=["log"],
    response_model=CompactOut,
    responses=problems(404),
)
async def compact(session_id: str, body: CompactIn, key: Key, ctx: Ctx) -> dict[str, Any]:
    """Compact the active view with a strategy: the events that leave it are
    summarized by ``summary`` (or the server's summarizer) in one version-checked
    batch. ``compacted`` is false, and nothing written, when the trigger does not fire,
    nothing leaves the view, or another writer moved the log first."""
    session = await ctx.session(key, session_id)
    strategy, trigger = _strategy(body.strategy), _trigger(body.trigger)
    summary = body.summary
    summarize: Summarize
    if summary is not None:

        def given(events: Sequence[Event]) -> str:
            return summary

        summarize = given
    elif ctx.summarize is not None:
        summarize = ctx.summarize
    else:
        raise HTTPException(422, "give a summary: this server has no summarizer")
    result = await ctx.store.compact(session.id, strategy, summarize, trigger)
    if result is None:
        return {"compacted": False, "version": await ctx.store.version(session.id)}
    ctx.changed(session.id)
    names = Names.of(key)
    return {
        "compacted": True,
        "boundary_id": names.id_out(result.boundary_id),
        "summary_ids": names.ids_out(result.summary_ids),
        "kept_event_ids": names.ids_out(result.kept_event_ids),
        "compacted_event_ids": names.ids_out(result.compacted_event_ids),
        "version": result.version,
    }


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "state": job.state,
        "done": job.done,
        "total": job.total,
        "error": job.error,
        **job.result,
    }


async def _run_reembed(ctx: Context, job: Job) -> None:
    def progress(done: int, total: int) -> None:
        job.done, job.total = done, total

    try:
        report = await ctx.store.reembed(on_progress=progress)
    except ReembedIncompleteError as error:
        job.state, job.error = "failed", str(error)
        job.result = {"messages": error.report.messages}
    except StoreError as error:
        job.state, job.error = "failed", str(error)
    else:
        job.state = "done"
        job.result = {"messages": report.messages, "index_recreated": report.index_recreated}


@router.post(
    "/jobs/reembed",
    tags=["jobs"],
    status_code=202,
    response_model=JobOut,
    responses=problems(403, 409),
)
async def start_reembed(key: Key, ctx: Ctx) -> dict[str, Any]:
    """Start embedding every message that lacks a vector of the store's embedder;
    read its progress at ``/v1/jobs/{id}``. Admin keys only; one run at a time."""
    ctx.require_admin(key)
    if ctx.store.embedder is None:
        raise HTTPException(409, "the store has no embedder")
    if any(j.kind == "reembed" and j.state == "running" for j in ctx.jobs.values()):
        raise HTTPException(409, "a re-embedding job is running already")
    job = Job(new_id(), "reembed")
    ctx.jobs[job.id] = job
    job.task = asyncio.create_task(_run_reembed(ctx, job))
    return job_json(job)


@router.get("/jobs/{job_id}", tags=["jobs"], response_model=JobOut, responses=problems(403, 404))
async def get_job(job_id: str, key: Key, ctx: Ctx) -> dict[str, Any]:
    """A job's state and progress (``done`` of ``total``). Admin keys only."""
    ctx.require_admin(key)
    job = ctx.jobs.get(job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id!r}")
    return job_json(job)
