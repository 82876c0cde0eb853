"""`create_app`: the HTTP API, the live streams and the web inspector of one store."""

from __future__ import annotations

import logging
import re
import time
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
from convostore.keys import KEYS_SESSION_ID, ApiKey, KeyRing
from convostore.server import routes_log, routes_sessions, routes_stream
from convostore.server.context import KEY_SCOPE, Context
from convostore.server.names import Names
from convostore.server.observe import ACCESS_LOG, Observer
from convostore.server.openapi import install_openapi
from convostore.store import Store

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Gate", "create_app"]

DEFAULT_MAX_BODY_BYTES = 1_048_576
# On every response: nothing runs but this server's own files (the inspector and the
# docs have no inline script), no page may frame it, no type is guessed, no URL leaks.
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
        b"base-uri 'none'; form-action 'self'; object-src 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
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


class BodyTooLarge(HTTPException):
    """Raised by the gate's ``receive`` once a body passes the limit: the handler has
    seen no byte beyond it."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over the limit of {limit} bytes")


class Gate:
    """What every HTTP request passes before any route or body parser runs.

    Under ``/v1`` the key is checked first, from the head alone: a request without a
    valid key is 401 and not one byte of its body is read. Then the framing: both
    ``Content-Length`` and ``Transfer-Encoding``, or a malformed or repeated length, is
    400; an announced length over ``limit`` is 413. The body is then counted as it is
    received, whatever the headers said: the app is handed at most ``limit`` bytes, and
    the request that sends more is answered 413.
    """

    def __init__(self, app: ASGIApp, limit: int, keys: KeyRing, observer: Observer) -> None:
        self.app = app
        self.limit = limit
        self.keys = keys
        self.observer = observer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def answered(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self._gated(scope, receive, answered)
        finally:
            self._record(scope, status, time.perf_counter() - started)

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or (
            "/inspector" if scope["path"].startswith("/inspector/") else "unmatched"
        )
        self.observer.request(scope["method"], template, status, seconds)
        if ACCESS_LOG.isEnabledFor(logging.INFO):
            key = scope.get(KEY_SCOPE)
            client = scope.get("client")
            ACCESS_LOG.info(
                "%s %s %d %.1fms",
                scope["method"],
                scope["path"],
                status,
                seconds * 1000,
                extra={
                    "http": {
                        "method": scope["method"],
                        "path": scope["path"],
                        "route": template,
                        "status": status,
                        "duration_ms": round(seconds * 1000, 3),
                        "client": None if client is None else f"{client[0]}:{client[1]}",
                        "key_id": key.id if isinstance(key, ApiKey) else None,
                    }
                },
            )

    async def _gated(self, scope: Scope, receive: Receive, given: Send) -> None:
        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *SECURITY_HEADERS]}
            await given(message)

        # The path within this app, also when it is mounted under a prefix.
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        if path.startswith("/v1/") or path == "/v1":
            try:
                key = await self._key(scope)
            except StoreError as error:
                await problem(status_of(error), str(error))(scope, receive, send)
                return
            if key is None:
                unauthorized = problem(
                    401, "a valid API key is needed", headers={"WWW-Authenticate": "Bearer"}
                )
                await unauthorized(scope, receive, send)
                return
            scope[KEY_SCOPE] = key
        refusal = self._framing(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        received = 0
        over = False

        async def counted() -> Message:
            nonlocal received, over
            if over:
                raise BodyTooLarge(self.limit)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    over = True
                    raise BodyTooLarge(self.limit)
            return message

        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge as error:
            if started:
                raise
            await problem(413, str(error.detail))(scope, receive, send)

    async def _key(self, scope: Scope) -> ApiKey | None:
        values = [v for k, v in scope["headers"] if k == b"authorization"]
        if len(values) != 1:
            return None
        try:
            header = values[0].decode("ascii")
        except UnicodeDecodeError:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return await self.keys.authenticate(token.strip())

    def _framing(self, scope: Scope) -> Response | None:
        lengths = [v for k, v in scope["headers"] if k == b"content-length"]
        encodings = [v for k, v in scope["headers"] if k == b"transfer-encoding"]
        if lengths and encodings:
            return problem(400, "a request may not carry both Content-Length and Transfer-Encoding")
        if len(lengths) > 1 or (lengths and not _is_length(lengths[0])):
            return problem(400, "a malformed Content-Length")
        if lengths and int(lengths[0]) > self.limit:
            return problem(413, f"the request body is over the limit of {self.limit} bytes")
        return None


def _is_length(value: bytes) -> bool:
    return 0 < len(value) <= 19 and value.isdigit() and value.isascii()


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
        docs_url=None,
        redoc_url=None,
    )
    observer = Observer()
    observed = observer.store(store)
    ctx = Context(
        store=observed,
        keys=keys or KeyRing(observed),
        summarize=summarize,
        poll_interval=poll_interval,
        observer=observer,
    )
    app.state.convostore = ctx
    app.add_middleware(Gate, limit=max_body_bytes, keys=ctx.keys, observer=observer)
    _add_error_handlers(app)
    install_openapi(app)
    # The log's routes first: appends and reads are the hot ones, matched in order.
    app.include_router(routes_log.router)
    app.include_router(routes_sessions.router)
    app.include_router(routes_stream.router)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        """The process is up (it asks the backend nothing)."""
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        """The backend answers: one round trip to it, 503 when it does not."""
        try:
            await ctx.store.version(KEYS_SESSION_ID)
        except StoreError as error:
            return problem(503, f"the backend does not answer: {type(error).__name__}")
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        """Prometheus metrics, for an admin key (a scraper's ``bearer_token``)."""
        token = request.headers.get("authorization", "").partition(" ")[2].strip()
        key = await ctx.keys.authenticate(token) if token else None
        if key is None or not key.admin:
            return problem(401, "metrics need an admin key", headers={"WWW-Authenticate": "Bearer"})
        exposition = observer.exposition()
        if exposition is None:
            return problem(404, "metrics need prometheus-client: pip install 'convostore[metrics]'")
        body, media_type = exposition
        return Response(body, media_type=media_type)

    if inspector:
        static = resources.files("convostore.server") / "inspector"
        index = (static / "index.html").read_text(encoding="utf-8")

        @app.get("/", include_in_schema=False)
        async def inspector_page() -> HTMLResponse:
            return HTMLResponse(index)

        app.mount("/inspector", StaticFiles(directory=str(static)), name="inspector")
        _add_docs(app, (static / "docs.html").read_text(encoding="utf-8"))
    return app


def _add_docs(app: FastAPI, page: str) -> None:
    """``/docs``: Swagger UI from the package ``swagger-ui-bundle-v2`` (the server
    extra), served from here: no script from another origin runs on this one."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return
    app.mount("/docs/assets", StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(page)


MAX_LISTED = 20
_LISTING = re.compile(r"(?P<head>[^:]{1,80}: )(?P<items>'.*')", re.DOTALL)


def _shortened(detail: str) -> str:
    """A store's message that lists ids (``unknown user id(s): 'a', 'b'``) names the
    first few and counts them all; any other is cut at a length a person reads."""
    listing = _LISTING.fullmatch(detail)
    if listing is not None:
        items = listing["items"].split("', '")
        if len(items) > MAX_LISTED:
            shown = "', '".join(items[:MAX_LISTED])
            more = len(items) - MAX_LISTED
            return f"{listing['head']}{shown}' and {more} more ({len(items)} in all)"
    return detail if len(detail) <= 2000 else detail[:2000] + "..."


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(StoreError)
    async def store_error(request: Request, error: StoreError) -> Response:
        status = status_of(error)
        if status == 500:
            log.exception("unexpected store error", exc_info=error)
            return problem(status, "internal error")
        detail = str(error)
        key = request.scope.get(KEY_SCOPE)
        if isinstance(key, ApiKey):
            # The store names ids as it holds them: say them in the key's names.
            detail = Names.of(key).text_out(detail)
        return problem(status, _shortened(detail))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> Response:
        headers = None if error.headers is None else dict(error.headers)
        return problem(error.status_code, str(error.detail), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> Response:
        found = error.errors()
        errors = [
            {"loc": [str(part) for part in e.get("loc", ())], "msg": str(e.get("msg", ""))[:200]}
            for e in found[:MAX_LISTED]
        ]
        malformed = any(e.get("type") == "json_invalid" for e in found)
        if malformed:
            return problem(400, "the body is not valid JSON", errors=errors)
        detail = "the request does not match the API"
        if len(found) > MAX_LISTED:
            detail += f" ({len(found)} errors, the first {MAX_LISTED} listed)"
        return problem(422, detail, errors=errors)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> Response:
        log.exception("unexpected error", exc_info=error)
        return problem(500, "internal error")
