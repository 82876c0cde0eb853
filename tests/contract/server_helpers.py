"""Clients of the HTTP API on a store of the backend under test: one per key."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

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


def uvicorn_server(app: Any) -> uvicorn.Server:
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))


def user_message(content: str, **fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **fields}
