"""The HTTP server under load from ``wrk`` (Debian's package), a load generator in
another process, so what is measured is the server, not the client.

``convostore serve`` runs in child processes, as deployed (``--workers N``: N processes
on one port with ``--reuse-port``, the kernel spreading connections). Three workloads,
each for ``--seconds`` with ``--connections`` open: ``GET /healthz`` (the server's
ceiling: no key, no store), appends (``POST /v1/sessions/{id}/events``, one message,
over 20 sessions) and window reads (``GET /v1/sessions/{id}/events?last=10``).
Printed: requests per second, p50 and p99 latency, the server's CPU time per request
(read from /proc, so it holds on a busy machine too), and each as a share of /healthz.
All traffic stays on 127.0.0.1; each run is bounded by ``--seconds``.

    .venv/bin/python benchmarks/server_load.py [--url URL] [--workers N]
        [--connections 20] [--seconds 10] [--threads 2]

Without ``--url`` the store is a fresh SQLite file in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

import convostore
from convostore import MessageWrite, Role, User
from convostore.keys import KeyRing

OWNER = User("bench", "Bench")
CONTENT = "What is the capital of France? Answer in one word, please."
SESSIONS = 20

_ROTATE = """
local paths = {%(paths)s}
local counter = 0
wrk.method = "%(method)s"
wrk.headers["Authorization"] = "Bearer %(key)s"
wrk.headers["Content-Type"] = "application/json"
%(body)s
request = function()
  counter = counter + 1
  return wrk.format(nil, paths[(counter %% #paths) + 1])
end
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def prepare(url: str) -> tuple[str, list[str]]:
    """A key of the owner and its sessions, each with a few messages to read."""
    async with await convostore.connect(url) as store:
        key, _ = await KeyRing(store).create(OWNER.id)
        await store.put_user(OWNER)
        sessions = []
        for _ in range(SESSIONS):
            session = await store.create_session(OWNER.id)
            for n in range(12):
                role = Role.USER if n % 2 == 0 else Role.ASSISTANT
                await store.add_message(session.id, MessageWrite(role, f"{CONTENT} {n}"))
            sessions.append(session.id)
    return key, sessions


def start_servers(
    url: str, port: int, workers: int, *, access_log: bool
) -> list[subprocess.Popen[bytes]]:
    command = [sys.executable, "-m", "convostore", "serve", "--url", url, "--port", str(port)]
    if workers > 1:
        command.append("--reuse-port")
    if not access_log:
        command.append("--no-access-log")
    return [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(workers)
    ]


def wait_until_up(base: str) -> None:
    for _ in range(300):  # Bounded: the servers start within a few seconds.
        try:
            if httpx.get(base + "/healthz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit("the server did not start")


def cpu_seconds(servers: list[subprocess.Popen[bytes]]) -> float:
    """The CPU time the server processes used so far (user and system, all threads)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for server in servers:
        fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def wrk(base: str, script: str | None, path: str, args: argparse.Namespace) -> tuple[float, ...]:
    """Requests per second, p50 and p99 in ms, non-2xx answers, requests in all."""
    command = [
        "wrk",
        f"-t{args.threads}",
        f"-c{args.connections}",
        f"-d{args.seconds}s",
        "--latency",
    ]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        if script is not None:
            lua.write(script)
    try:
        if script is not None:
            command += ["-s", lua.name]
        output = subprocess.run(
            [*command, base + path], check=True, capture_output=True, text=True
        ).stdout
    finally:
        os.unlink(lua.name)
    found = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if found is None:
        raise SystemExit(f"wrk said:\n{output}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    failed = int(errors.group(1)) if errors else 0
    total = re.search(r"(\d+) requests in", output)
    count = float(total.group(1)) if total else float("nan")
    return float(found.group(1)), _latency(output, "50"), _latency(output, "99"), failed, count


def _latency(output: str, percentile: str) -> float:
    found = re.search(rf"\s{percentile}%\s+([\d.]+)(us|ms|s)\b", output)
    if found is None:
        return float("nan")
    value, unit = float(found.group(1)), found.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def scripts(key: str, sessions: list[str]) -> dict[str, tuple[str | None, str]]:
    events = ", ".join(f'"/v1/sessions/{s}/events"' for s in sessions)
    windows = ", ".join(f'"/v1/sessions/{s}/events?last=10"' for s in sessions)
    body = json.dumps({"role": "user", "content": CONTENT, "author": OWNER.id})
    append = _ROTATE % {
        "paths": events,
        "method": "POST",
        "key": key,
        "body": f"wrk.body = {json.dumps(body)}",
    }
    read = _ROTATE % {"paths": windows, "method": "GET", "key": key, "body": ""}
    return {"healthz": (None, "/healthz"), "append": (append, "/"), "read last=10": (read, "/")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="the store (default: a new SQLite file)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--no-access-log", action="store_true", help="serve without it")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk: apt-get install wrk (scripts/setup.sh does)")
    with tempfile.TemporaryDirectory() as directory:
        url = args.url or f"sqlite:///{Path(directory) / 'served.db'}"
        key, sessions = asyncio.run(prepare(url))
        port = free_port()
        servers = start_servers(url, port, args.workers, access_log=not args.no_access_log)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_up(base)
            results: dict[str, tuple[float, ...]] = {}
            for name, (script, path) in scripts(key, sessions).items():
                before = cpu_seconds(servers)
                figures = wrk(base, script, path, args)
                spent = cpu_seconds(servers) - before
                results[name] = (*figures, spent / figures[4] * 1e6)
        finally:
            for server in servers:
                server.terminate()
            for server in servers:
                server.wait(30)
    print(
        f"convostore serve on {url.split(':')[0]}, {args.workers} worker(s), wrk "
        f"{args.threads} threads x {args.connections} connections x {args.seconds} s:"
    )
    ceiling, ceiling_cpu = results["healthz"][0], results["healthz"][5]
    for name, (rate, p50, p99, errors, _, cpu) in results.items():
        share = ""
        if name != "healthz":
            share = f"   x{rate / ceiling:.2f} of /healthz (x{ceiling_cpu / cpu:.2f} by CPU)"
        failed = f"   {errors:.0f} non-2xx" if errors else ""
        line = f"{rate:>7,.0f} req/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  {cpu:5.0f} us CPU"
        print(f"  {name:<13}{line}{share}{failed}")
    print(
        "  (us CPU: the server processes' CPU time per request, whatever else the machine "
        "runs; x by CPU: the rate share when the server's CPU is the limit)"
    )


if __name__ == "__main__":
    main()
