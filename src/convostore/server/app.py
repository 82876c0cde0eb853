"""`create_app`: the HTTP API, the live streams and the web inspector of one store."""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from convostore.compaction import Summarize
from convostore.errors import (
    BackendUnavailableError,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    StaleObjectError,
    StoreClosedError,
    StoreError,
)
from convostore.keys import KeyRing
from convostore.server import routes_log, routes_sessions, routes_stream
from convostore.server.context import Context
from convostore.server.openapi import install_openapi
from convostore.store import Store

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]

DEFAULT_MAX_BODY_BYTES = 1_048_576
PROBLEM = "application/problem+json"
log = logging.getLogger("convostore.server")

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    412: "Precondition Failed",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    428: "Precondition Required",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def problem(
    status: int,
    detail: str | None,
    *,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def status_of(error: StoreError) -> int:
    if isinstance(error, NotFoundError) and not isinstance(error, ValueError):
        return 404
    if isinstance(error, StaleObjectError):
        return 412
    if isinstance(error, ConflictError):
        return 409
    # A closed store takes no more work: the service is gone, as an unreachable one is.
    if isinstance(error, BackendUnavailableError | StoreClosedError):
        return 503
    if isinstance(error, InvalidArgumentError | ValueError):
        return 422
    return 500


class BodyLimit:
    """Refuses a request body longer than ``limit`` bytes with 413 before any handler
    runs: by its announced length, or (a streamed body) by reading at most ``limit``
    bytes of it first."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.limit:
                await self._refuse(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        if b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem(413, f"the request body is over the limit of {self.limit} bytes")
        await response(scope, receive, send)


def create_app(
    store: Store,
    *,
    keys: KeyRing | None = None,
    summarize: Summarize | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    poll_interval: float = 1.0,
    inspector: bool = True,
) -> FastAPI:
    """The ASGI app serving ``store``: the API under ``/v1`` (OpenAPI at
    ``/openapi.json``), live streams per session, and the web inspector at ``/``.

    ``summarize`` writes compaction summaries when a request brings none;
    ``max_body_bytes`` bounds request bodies (413 beyond); ``poll_interval`` is how
    often a live stream looks for writes made by other processes. The store stays
    the caller's to close.
    """
    app = FastAPI(
        title="convostore",
        version="1",
        description="The conversation store for AI agents, over HTTP. Every `/v1` call "
        "takes `Authorization: Bearer <key>` (`convostore keys create`); a key reaches "
        "its owner's sessions only, an admin key every owner's. Errors are "
        "`application/problem+json`.",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.convostore = Context(
        store=store,
        keys=keys or KeyRing(store),
        summarize=summarize,
        poll_interval=poll_interval,
    )
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    _add_error_handlers(app)
    install_openapi(app)
    app.include_router(routes_sessions.router)
    app.include_router(routes_log.router)
    app.include_router(routes_stream.router)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    if inspector:
        static = resources.files("convostore.server") / "inspector"
        index = (static / "index.html").read_text(encoding="utf-8")

        @app.get("/", include_in_schema=False)
        async def inspector_page() -> HTMLResponse:
            return HTMLResponse(index)

        app.mount("/inspector", StaticFiles(directory=str(static)), name="inspector")
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(StoreError)
    async def store_error(request: Request, error: StoreError) -> Response:
        status = status_of(error)
        if status == 500:
            log.exception("unexpected store error", exc_info=error)
        return problem(status, str(error) if status != 500 else "internal error")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> Response:
        headers = None if error.headers is None else dict(error.headers)
        return problem(error.status_code, str(error.detail), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> Response:
        errors = [
            {"loc": [str(part) for part in e.get("loc", ())], "msg": str(e.get("msg", ""))}
            for e in error.errors()
        ]
        malformed = any(e.get("type") == "json_invalid" for e in error.errors())
        if malformed:
            return problem(400, "the body is not valid JSON", errors=errors)
        return problem(422, "the request does not match the API", errors=errors)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> Response:
        log.exception("unexpected error", exc_info=error)
        return problem(500, "internal error")
