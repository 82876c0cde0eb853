"""The server against hostile clients, on a real socket: request framing, body limits
counted from the bytes received, the key checked before any body is read."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from convostore import Store
from convostore.server.app import Gate
from convostore.server.observe import Observer

from .server_helpers import Api, on_loopback, serving, user_message

LIMIT = 20_000


@dataclass
class Wire:
    api: Api
    host: str
    port: int
    sid: str

    async def exchange(self, head: str, body: bytes = b"", *, wait: float = 0.0) -> Reply:
        """Send ``head`` (and ``body``) on a fresh connection; the server's reply."""
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(head.encode("utf-8") + body)
            await writer.drain()
            async with asyncio.timeout(20):
                return await _read_reply(reader)
        finally:
            writer.close()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def _read_reply(reader: asyncio.StreamReader) -> Reply:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = b""
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    return Reply(status, headers, body)


@pytest.fixture
async def wire(store: Store) -> AsyncIterator[Wire]:
    async with serving(store, max_body_bytes=LIMIT) as api, on_loopback(api.app) as base:
        created = await api.ada.post("/v1/sessions", json={"title": "target"})
        address = urlsplit(base)
        assert address.hostname is not None
        assert address.port is not None
        yield Wire(api, address.hostname, address.port, created.json()["id"])


def _head(wire: Wire, key: str | None, *lines: str) -> str:
    auth = [] if key is None else [f"Authorization: Bearer {wire.api.keys[key]}"]
    return (
        "\r\n".join(
            [
                f"POST /v1/sessions/{wire.sid}/events HTTP/1.1",
                f"Host: {wire.host}",
                "Content-Type: application/json",
                *auth,
                *lines,
            ]
        )
        + "\r\n\r\n"
    )


def _chunked(payload: bytes, size: int = 4096) -> bytes:
    parts = [
        f"{len(payload[i : i + size]):x}\r\n".encode() + payload[i : i + size] + b"\r\n"
        for i in range(0, len(payload), size)
    ]
    return b"".join(parts) + b"0\r\n\r\n"


async def _stored(wire: Wire) -> list[Any]:
    items: list[Any] = (await wire.api.ada.get(f"/v1/sessions/{wire.sid}/events")).json()["items"]
    return items


async def test_both_length_and_chunked_is_400_and_stores_nothing(wire: Wire) -> None:
    payload = json.dumps(user_message("x" * (5 * LIMIT))).encode()
    reply = await wire.exchange(
        _head(wire, "ada", "Content-Length: 2", "Transfer-Encoding: chunked"), _chunked(payload)
    )
    assert reply.status == 400, reply.body
    assert await _stored(wire) == []
    small = json.dumps(user_message("fits")).encode()
    reply = await wire.exchange(
        _head(wire, "ada", f"Content-Length: {len(small)}", "Transfer-Encoding: chunked"),
        _chunked(small),
    )
    assert reply.status == 400, reply.body
    assert await _stored(wire) == []


async def test_a_chunked_body_over_the_limit_is_413_and_stores_nothing(wire: Wire) -> None:
    payload = json.dumps(user_message("x" * (5 * LIMIT))).encode()
    reply = await wire.exchange(_head(wire, "ada", "Transfer-Encoding: chunked"), _chunked(payload))
    assert reply.status == 413, reply.body
    assert await _stored(wire) == []
    fits = json.dumps(user_message("y" * (LIMIT // 2))).encode()
    reply = await wire.exchange(_head(wire, "ada", "Transfer-Encoding: chunked"), _chunked(fits))
    assert reply.status == 201, reply.body
    assert [e["content"] for e in await _stored(wire)] == ["y" * (LIMIT // 2)]


async def test_malformed_lengths_are_400(wire: Wire) -> None:
    for lines in (
        ("Content-Length: 5", "Content-Length: 5"),
        ("Content-Length: +5",),
        ("Content-Length: \uff15",),
        ("Content-Length: " + "9" * 40,),
    ):
        reply = await wire.exchange(_head(wire, "ada", *lines), b"hello")
        assert reply.status == 400, (lines, reply.status)
    reply = await wire.exchange(_head(wire, "ada", f"Content-Length: {LIMIT + 1}"))
    assert reply.status == 413


async def test_the_key_is_checked_before_any_body_is_read(wire: Wire) -> None:
    # Only the head is sent: the answer comes without the server waiting for a body.
    for key_line in ((), ("Authorization: Bearer nonsense",), ("Authorization: Bearer ²",)):
        head = _head(wire, None, *key_line, "Transfer-Encoding: chunked")
        reply = await wire.exchange(head)
        assert reply.status == 401
        assert reply.headers["www-authenticate"] == "Bearer"
        reply = await wire.exchange(_head(wire, None, *key_line, "Content-Length: 104857600"))
        assert reply.status == 401


async def test_no_handler_sees_more_than_the_limit(store: Store) -> None:
    """Whatever is sent, the app behind the gate is handed at most the limit."""
    handed: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        total = 0
        try:
            while True:
                message = await receive()
                total += len(message.get("body", b""))
                if not message.get("more_body"):
                    break
        finally:
            handed.append(total)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async with serving(store) as api:
        keys = api.app.state.convostore.keys
        gate = Gate(app, 1000, keys, Observer())
        chunks = [b"a" * 300] * 10
        sent: list[Any] = []

        async def receive() -> dict[str, Any]:
            body = chunks.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(chunks)}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        headers = [
            (b"authorization", f"Bearer {api.keys['ada']}".encode()),
            (b"transfer-encoding", b"chunked"),
        ]
        scope = {"type": "http", "path": "/v1/x", "headers": headers, "method": "POST"}
        await gate(scope, receive, send)
        assert handed == [900]
        assert sent[0]["status"] == 413


async def test_every_response_carries_the_security_headers(wire: Wire) -> None:
    api = wire.api
    responses = [
        await api.anonymous.get("/"),
        await api.anonymous.get("/docs"),
        await api.anonymous.get("/inspector/app.js"),
        await api.anonymous.get("/openapi.json"),
        await api.anonymous.get("/v1/sessions"),
        await api.ada.get("/v1/sessions"),
        await api.ada.get("/v1/no-such-path"),
        await api.ada.post(f"/v1/sessions/{wire.sid}/events", content=b"x" * (LIMIT + 1)),
    ]
    assert [r.status_code for r in responses] == [200, 200, 200, 200, 401, 200, 404, 413]
    for response in responses:
        policy = response.headers["content-security-policy"]
        assert "default-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    raw = await wire.exchange(_head(wire, None, "Content-Length: 0"))
    assert raw.status == 401
    assert raw.headers["x-content-type-options"] == "nosniff"


async def test_the_docs_load_no_script_from_elsewhere(wire: Wire) -> None:
    page = (await wire.api.anonymous.get("/docs")).text
    sources = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', page)
    assert sources
    assert all(s.startswith("/") and not s.startswith("//") for s in sources)
    assert "<script>" not in page
    for source in sources:
        asset = await wire.api.anonymous.get(source)
        assert asset.status_code == 200, source
        assert asset.content.strip()


async def test_mounted_under_a_prefix_the_key_still_comes_first(store: Store) -> None:
    from fastapi import FastAPI

    async with serving(store, max_body_bytes=LIMIT) as api:
        outer = FastAPI()
        outer.mount("/store", api.app)
        async with on_loopback(outer) as base:
            address = urlsplit(base)
            assert address.hostname is not None
            assert address.port is not None
            wire = Wire(api, address.hostname, address.port, "any")
            head = _head(wire, None, "Transfer-Encoding: chunked").replace(
                "POST /v1/", "POST /store/v1/"
            )
            reply = await wire.exchange(head)
            assert reply.status == 401
            headers = {"Authorization": f"Bearer {api.keys['ada']}"}
            async with httpx.AsyncClient(base_url=base, headers=headers) as ada:
                assert (await ada.get("/store/v1/me")).json()["owner_id"] == "ada"
