"""The server as ``convostore serve`` runs it: a shutdown in bounded time with live
streams open, heads that must arrive in time, a bound on concurrent connections."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

import convostore
from convostore import Store
from convostore.keys import KeyRing
from convostore.server import create_app
from convostore.server.serving import GRACEFUL_SECONDS, Server, config

from .conftest import BackendUnderTest
from .server_helpers import Frames, loopback_socket, user_message


@asynccontextmanager
async def _served(store: Store, **options: Any) -> AsyncIterator[tuple[str, str, int]]:
    """The app on a loopback port as `convostore serve` runs it: base URL, key, port."""
    app = create_app(store, poll_interval=0.2)
    key, _ = await KeyRing(store).create("ada")
    sock = loopback_socket()
    server = Server(
        config(app, log_level="warning", lifespan="off", **options), app.state.convostore
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    port = sock.getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", key, port
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()


async def test_a_head_that_never_ends_is_closed(store: Store) -> None:
    async with _served(store, head_timeout=0.5) as (_, _key, port):
        for head in (b"GET /healthz HTTP/1.1\r\nHost: x\r\n", b"", b"G"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head)
            await writer.drain()
            started = time.monotonic()
            async with asyncio.timeout(5):
                assert await reader.read() == b""
            assert time.monotonic() - started < 3
            writer.close()
        # Byte by byte is no way around it.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def byte_by_byte() -> None:
            for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.1)

        started = time.monotonic()
        with pytest.raises(ConnectionError):
            await byte_by_byte()
        assert time.monotonic() - started < 3
        writer.close()
        # A client that sends its head in time is served, and again on the same
        # connection; its second head is held to the same time.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            await reader.readuntil(b'"ok"}')
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        await writer.drain()
        async with asyncio.timeout(5):
            assert await reader.read() == b""
        writer.close()


async def test_connections_beyond_the_limit_are_503(store: Store) -> None:
    async with _served(store, max_connections=2) as (base, key, _):
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as ada:
            sid = (await ada.post("/v1/sessions", json={})).json()["id"]
        clients = [httpx.AsyncClient(base_url=base, headers=headers, timeout=30) for _ in range(3)]
        try:
            streams = [c.stream("GET", f"/v1/sessions/{sid}/stream") for c in clients[:2]]
            opened = [await s.__aenter__() for s in streams]
            assert [r.status_code for r in opened] == [200, 200]
            assert (await clients[2].get("/healthz")).status_code == 503
            for stream in streams:
                await stream.__aexit__(None, None, None)
        finally:
            for client in clients:
                await client.aclose()


async def test_sigterm_ends_every_stream_and_exits_in_bounded_time(
    backend: BackendUnderTest,
) -> None:
    url = backend()
    if url.startswith("memory:"):
        pytest.skip("a memory store lives in one process: a second one cannot hold the key")
    async with await convostore.connect(url) as store:
        key, _ = await KeyRing(store).create("ada")
    port = loopback_socket()
    number = port.getsockname()[1]
    port.close()
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "convostore", "serve", "--url", url, "--port", str(number)),
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{number}"
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as ada:
            for _ in range(300):
                try:
                    if (await ada.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            sid = (await ada.post("/v1/sessions", json={})).json()["id"]
            async with (
                ada.stream("GET", f"/v1/sessions/{sid}/stream") as first,
                ada.stream("GET", f"/v1/sessions/{sid}/stream") as second,
            ):
                frames = [Frames(first), Frames(second)]
                await ada.post(f"/v1/sessions/{sid}/events", json=user_message("before"))
                for stream in frames:
                    assert (await stream.next()).data["content"] == "before"
                started = time.monotonic()
                process.send_signal(signal.SIGTERM)
                for stream in frames:
                    async with asyncio.timeout(GRACEFUL_SECONDS + 5):
                        assert await stream.rest() == []
        code = await asyncio.wait_for(process.wait(), GRACEFUL_SECONDS + 10)
        elapsed = time.monotonic() - started
        # uvicorn ends by raising the signal it caught again, once shut down.
        assert code == -signal.SIGTERM
        # The streams end at once: the graceful limit is not what ends them.
        assert elapsed < GRACEFUL_SECONDS, elapsed
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
