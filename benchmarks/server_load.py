"""Load through the HTTP server against the store called directly, on one SQLite file.

N clients at once, each in its own session, each repeating: append a message
(``POST /v1/sessions/{id}/events``), then read the newest 10 events
(``GET /v1/sessions/{id}/events?last=10``). The server runs as ``convostore serve`` in
a child process, as deployed (uvicorn, one worker); the clients are httpx in this
process. The same workload then runs on `Store.add_message` / `Store.read` from N tasks
in this process. Printed: requests per second, p50 and p99 latency of each operation,
and the ratios server / direct. All traffic stays on 127.0.0.1; the run is bounded.

    .venv/bin/python benchmarks/server_load.py [--clients N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

import convostore
from convostore import EventFilter, MessageWrite, Role, User

OWNER = User("bench", "Bench")
CONTENT = "What is the capital of France? Answer in one word, please."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Latencies:
    def __init__(self) -> None:
        self.append: list[float] = []
        self.read: list[float] = []

    async def time(self, into: list[float], call: Callable[[], Awaitable[object]]) -> None:
        started = time.perf_counter()
        await call()
        into.append(time.perf_counter() - started)


def summary(name: str, samples: list[float], seconds: float) -> tuple[float, float, float]:
    ordered = sorted(samples)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    rate = len(samples) / seconds
    print(f"  {name:<8} {rate:>9,.0f} ops/s   p50 {p50:7.2f} ms   p99 {p99:7.2f} ms")
    return rate, p50, p99


def start_server(url: str) -> tuple[subprocess.Popen[bytes], int, str]:
    """``convostore serve`` in a child process, its port, and a key for it."""
    key = subprocess.run(
        [sys.executable, "-m", "convostore", "keys", "create", "--owner", OWNER.id, "--url", url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "convostore", "serve", "--url", url, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return server, port, key


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    server.wait(30)


async def through_server(url: str, clients: int, rounds: int) -> dict[str, tuple[float, ...]]:
    server, port, key = start_server(url)
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=clients)
    try:
        async with httpx.AsyncClient(
            base_url=base, headers=headers, timeout=60, limits=limits
        ) as client:
            for _ in range(300):  # Bounded: the child starts within a few seconds.
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            else:
                raise SystemExit("the server did not start")
            sessions = [
                (await client.post("/v1/sessions", json={})).json()["id"] for _ in range(clients)
            ]
            body = {"role": "user", "content": CONTENT, "author": OWNER.id}
            times = Latencies()

            async def converse(session_id: str) -> None:
                events = f"/v1/sessions/{session_id}/events"
                for _ in range(rounds):
                    await times.time(times.append, lambda: client.post(events, json=body))
                    await times.time(times.read, lambda: client.get(events, params={"last": 10}))

            started = time.perf_counter()
            await asyncio.gather(*(converse(s) for s in sessions))
            seconds = time.perf_counter() - started
    finally:
        stop_server(server)
    print(f"through the server ({clients} clients x {rounds} rounds, {seconds:.1f} s):")
    return {
        "append": summary("append", times.append, seconds),
        "read": summary("read", times.read, seconds),
    }


async def direct(url: str, clients: int, rounds: int) -> dict[str, tuple[float, ...]]:
    async with await convostore.connect(url) as store:
        await store.put_user(OWNER)
        sessions = [(await store.create_session(OWNER.id)).id for _ in range(clients)]
        write = MessageWrite(Role.USER, CONTENT, author=OWNER.id)
        window = EventFilter(last=10)
        times = Latencies()

        async def converse(session_id: str) -> None:
            for _ in range(rounds):
                await times.time(times.append, lambda: store.add_message(session_id, write))
                await times.time(times.read, lambda: store.read(session_id, window))

        started = time.perf_counter()
        await asyncio.gather(*(converse(s) for s in sessions))
        seconds = time.perf_counter() - started
    print(f"the store called directly ({clients} tasks x {rounds} rounds, {seconds:.1f} s):")
    return {
        "append": summary("append", times.append, seconds),
        "read": summary("read", times.read, seconds),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        served = await through_server(
            f"sqlite:///{Path(directory) / 'served.db'}", args.clients, args.rounds
        )
        called = await direct(
            f"sqlite:///{Path(directory) / 'direct.db'}", args.clients, args.rounds
        )
    print("server / direct:")
    for name in ("append", "read"):
        rate = served[name][0] / called[name][0]
        p50 = served[name][1] / called[name][1]
        print(f"  {name:<8} throughput x{rate:.2f}   p50 latency x{p50:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
