"""convostore side by side with the session stores the agent frameworks ship.

The same workloads, in one run, on SQLite files in WAL mode (every store here that
writes a file), through each store's public API:

- appends: S sessions x M messages, round-robin, one API call per message, each call
  awaited before the next (latency-bound);
- appends at once: S conversations appending M messages each concurrently, as a server
  does (throughput-bound: this is where convostore's group commit shows);
- the last 20 messages of a 10,000-message session and of a 100-message one (median of
  50 reads);
- listing one user's 2,000 sessions.

Beside them, raw sqlite3 at synchronous NORMAL and FULL running a minimal schema by
hand: the floor for each durability. Each figure is followed by how many times the
reference row (convostore on ``sqlite:///``, durable by default) is ahead of that row:
above 1.00 convostore is faster.

    pip install -e '.[bench]'
    .venv/bin/python benchmarks/peers.py [--quick] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from peer_stores import PEERS, Peer

REFERENCE = "convostore sqlite:/// (FULL)"
WINDOW = 20
LONG_LOG = 10_000
SHORT_LOG = 100
WINDOW_READS = 50
LISTED_SESSIONS = 2_000


class Args(Protocol):
    quick: bool
    only: list[str] | None
    sessions: int
    messages: int


@dataclass
class Figures:
    """One row of the table; None where the store has no API for the workload."""

    name: str
    durability: str
    append_rate: float | None = None
    concurrent_rate: float | None = None
    long_window_ms: float | None = None
    short_window_ms: float | None = None
    list_ms: float | None = None
    notes: list[str] = field(default_factory=list)


async def _median_ms(call: Callable[[], Awaitable[object]], repeat: int) -> float:
    await call()  # warm-up: statements prepared, caches filled
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def _appends(peer: Peer, sessions: int, messages: int) -> float:
    """Messages per second, one awaited call after another, round-robin."""
    keys = [await peer.create_session("ada") for _ in range(sessions)]
    for key in keys:
        await peer.append(key, 0)  # each session's first write outside the clock
    started = time.perf_counter()
    for n in range(1, messages):
        for key in keys:
            await peer.append(key, n)
    return sessions * (messages - 1) / (time.perf_counter() - started)


async def _concurrent_appends(peer: Peer, sessions: int, messages: int) -> float:
    """Messages per second with every conversation appending at once."""
    keys = [await peer.create_session("bob") for _ in range(sessions)]
    for key in keys:
        await peer.append(key, 0)

    async def converse(key: str) -> None:
        for n in range(1, messages):
            await peer.append(key, n)

    started = time.perf_counter()
    await asyncio.gather(*(converse(key) for key in keys))
    return sessions * (messages - 1) / (time.perf_counter() - started)


async def _log(peer: Peer, events: int) -> str:
    key = await peer.create_session("cy")
    await peer.fill(key, events)
    return key


async def measure(peer: Peer, directory: Path, args: Args) -> Figures:
    figures = Figures(peer.name, peer.durability)
    await peer.open(directory)
    try:
        figures.append_rate = await _appends(peer, args.sessions, args.messages)
        if peer.concurrent:
            try:
                figures.concurrent_rate = await _concurrent_appends(
                    peer, args.sessions, args.messages
                )
            except Exception as error:  # a peer's own failure under load is a finding
                figures.notes.append(f"{args.sessions} at once failed: {_first_line(error)}")
        long_log = LONG_LOG // 10 if args.quick else LONG_LOG
        long_key = await _log(peer, long_log)
        short_key = await _log(peer, SHORT_LOG)
        figures.long_window_ms = await _median_ms(lambda: peer.last(long_key, WINDOW), WINDOW_READS)
        figures.short_window_ms = await _median_ms(
            lambda: peer.last(short_key, WINDOW), WINDOW_READS
        )
        if peer.lists:
            listed = LISTED_SESSIONS // 10 if args.quick else LISTED_SESSIONS
            for _ in range(listed):
                await peer.create_session("dee")
            count = await peer.list_all("dee")
            assert count == listed, f"{peer.name} listed {count} of {listed} sessions"
            figures.list_ms = await _median_ms(lambda: peer.list_all("dee"), 5)
            figures.notes.extend(await peer.list_notes("dee"))
    finally:
        await peer.close()
    return figures


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def _cell(value: float | None, reference: float | None, higher_is_better: bool, fmt: str) -> str:
    if value is None:
        return "-"
    figure = format(value, fmt)
    if reference is None or value == 0:
        return figure
    ahead = reference / value if higher_is_better else value / reference
    return f"{figure} ({ahead:.2f}x)"


def print_table(rows: Sequence[Figures], args: Args) -> None:
    sessions, messages = args.sessions, args.messages
    long_log = LONG_LOG // 10 if args.quick else LONG_LOG
    listed = LISTED_SESSIONS // 10 if args.quick else LISTED_SESSIONS
    reference = next((row for row in rows if row.name == REFERENCE), None)
    columns = (
        ("append msg/s", "append_rate", True, ",.0f"),
        (f"{sessions} at once msg/s", "concurrent_rate", True, ",.0f"),
        (f"last {WINDOW} of {long_log:,} ms", "long_window_ms", False, ".3f"),
        (f"last {WINDOW} of {SHORT_LOG} ms", "short_window_ms", False, ".3f"),
        (f"list {listed:,} sessions ms", "list_ms", False, ".2f"),
    )
    print()
    print(
        f"Appends: {sessions} sessions x {messages} messages. In parentheses: how many times "
        f"'{REFERENCE}' is ahead of the row (> 1: convostore faster). '-': the store has "
        "no API for it (raw sqlite3 commits one append at a time on its one connection; "
        "LangChain's history is used through its sync API)."
    )
    header = ["store", "durability"] + [title for title, *_ in columns]
    table = [header, ["---"] * len(header)]
    for row in rows:
        cells = [row.name, row.durability]
        for _, attribute, higher, fmt in columns:
            own = getattr(row, attribute)
            ref = None if reference is None else getattr(reference, attribute)
            cells.append(_cell(own, ref, higher, fmt))
        table.append(cells)
    for cells in table:
        print("| " + " | ".join(cells) + " |")
    for row in rows:
        for note in row.notes:
            print(f"- {row.name}: {note}")


def _sqlite_version() -> str:
    return sqlite3.sqlite_version


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes, a smoke run")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only the rows whose name holds NAME"
    )
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--messages", type=int, default=100)
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.messages = 20, 20
    print(
        f"convostore and its peers, {time.strftime('%Y-%m-%d %H:%M')}, Python "
        f"{sys.version.split()[0]}, SQLite {_sqlite_version()}"
    )
    rows: list[Figures] = []
    for make in PEERS:
        peer = make()
        if args.only and not any(word.lower() in peer.name.lower() for word in args.only):
            continue
        print(f"  measuring {peer.name} ...", flush=True)
        with tempfile.TemporaryDirectory() as directory:
            rows.append(asyncio.run(measure(peer, Path(directory), args)))
        gc.collect()
    print_table(rows, args)


if __name__ == "__main__":
    main()
