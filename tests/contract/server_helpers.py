"""Clients of the HTTP API on a store of the backend under test: one per key."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

import convostore
from convostore import Store
from convostore.keys import KeyRing
from convostore.server import create_app

PROBLEM = "application/problem+json"


@dataclass
class Api:
    """The app, the store behind it, and a client per key: ``ada`` and ``grace`` own
    their sessions, ``admin`` sees all."""

    app: Any
    store: Store
    ada: httpx.AsyncClient
    grace: httpx.AsyncClient
    admin: httpx.AsyncClient
    anonymous: httpx.AsyncClient
    keys: dict[str, str]


@asynccontextmanager
async def serving(store: Store, **options: Any) -> AsyncIterator[Api]:
    """The app of ``store`` called in this process (no socket)."""
    app = create_app(store, **options)
    ring: KeyRing = app.state.convostore.keys
    keys = {
        "ada": (await ring.create("ada"))[0],
        "grace": (await ring.create("grace"))[0],
        "admin": (await ring.create(None, admin=True))[0],
    }
    transport = httpx.ASGITransport(app=app)

    def client(key: str | None) -> httpx.AsyncClient:
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        return httpx.AsyncClient(transport=transport, base_url="http://convostore", headers=headers)

    running = Api(
        app,
        store,
        ada=client(keys["ada"]),
        grace=client(keys["grace"]),
        admin=client(keys["admin"]),
        anonymous=client(None),
        keys=keys,
    )
    try:
        yield running
    finally:
        for opened in (running.ada, running.grace, running.admin, running.anonymous):
            await opened.aclose()


def loopback_socket() -> socket.socket:
    """A listening socket on a free loopback port: connections queue until the server
    accepts them, so no wait for start-up is needed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def user_message(content: str, **fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **fields}


@asynccontextmanager
async def on_loopback(app: Any) -> AsyncIterator[str]:
    """``app`` served by uvicorn on a loopback port in this event loop; its base URL."""
    sock = loopback_socket()
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@dataclass(frozen=True)
class Frame:
    id: str | None
    event: str
    data: Any


class Frames:
    """The frames of a Server-Sent Events response, one at a time."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def next(self) -> Frame:
        event_id: str | None = None
        event, data = "message", None
        async with asyncio.timeout(30):
            async for line in self._lines:
                if not line:
                    if data is not None:
                        return Frame(event_id, event, json.loads(data))
                    event_id, event = None, "message"
                    continue
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "id":
                    event_id = value
                elif name == "event":
                    event = value
                elif name == "data":
                    data = value
        raise AssertionError("the stream ended")

    async def rest(self) -> list[str]:
        """The non-blank lines left until the server ends the stream."""
        async with asyncio.timeout(30):
            return [line async for line in self._lines if line]


class ServerThread:
    """The server of a store at ``url`` on a loopback port, in a thread with its own
    event loop (the browser is driven from this one)."""

    def __init__(self, url: str, *, owners: tuple[str, ...] = ("ada",), **options: Any) -> None:
        self.url = url
        self.owners = owners
        self.keys: dict[str, str] = {}
        self.options = options
        self.sock = loopback_socket()
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.ready = threading.Event()
        self.key = ""
        self.failure: BaseException | None = None
        self.server: uvicorn.Server | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:
            self.failure = error
            self.ready.set()

    async def _serve(self) -> None:
        async with await convostore.connect(self.url, **self.options) as store:
            app = create_app(store, poll_interval=0.2)
            ring = KeyRing(store)
            for owner in self.owners:
                self.keys[owner] = (await ring.create(owner))[0]
            self.key = self.keys[self.owners[0]]
            config = uvicorn.Config(
                app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
            )
            self.server = uvicorn.Server(config)
            self.ready.set()
            await self.server.serve(sockets=[self.sock])

    def __enter__(self) -> ServerThread:
        self.thread.start()
        self.ready.wait(60)
        if self.failure is not None:
            raise self.failure
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()
