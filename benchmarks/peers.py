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
# The floor group commit is measured against: one append per commit, at the same
# durability.
ONE_AT_A_TIME = "raw sqlite3, synchronous=FULL"
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


async def _timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


class Run:
    """Every store open at once, each workload run in rounds that take the stores in
    turn: on a shared machine, whatever else it does then weighs on all of them alike."""

    def __init__(self, peers: list[Peer], args: Args) -> None:
        self.peers = peers
        self.args = args
        self.rounds = 2 if args.quick else 5
        self.figures = {peer.name: Figures(peer.name, peer.durability) for peer in peers}
        self.failed: set[str] = set()

    async def __call__(self, directory: Path) -> list[Figures]:
        for number, peer in enumerate(self.peers):
            (directory / str(number)).mkdir()
            await peer.open(directory / str(number))
        try:
            await self.appends()
            await self.concurrent_appends()
            await self.windows()
            await self.listings()
        finally:
            for peer in self.peers:
                await peer.close()
        return list(self.figures.values())

    def _steps(self) -> list[range]:
        """The messages 1..M-1 split into one step per round."""
        messages, rounds = self.args.messages, self.rounds
        bounds = [1 + (messages - 1) * r // rounds for r in range(rounds + 1)]
        return [range(bounds[r], bounds[r + 1]) for r in range(rounds)]

    async def appends(self) -> None:
        """One awaited call after another, round-robin over the sessions."""
        keys = {}
        for peer in self.peers:
            keys[peer.name] = [await peer.create_session("ada") for _ in range(self.args.sessions)]
            for key in keys[peer.name]:
                await peer.append(key, 0)  # each session's first write outside the clock
        spent = dict.fromkeys(keys, 0.0)
        for step in self._steps():
            for peer in self.peers:

                async def run(peer: Peer = peer, step: range = step) -> None:
                    for n in step:
                        for key in keys[peer.name]:
                            await peer.append(key, n)

                spent[peer.name] += await _timed(run)
        for peer in self.peers:
            written = self.args.sessions * (self.args.messages - 1)
            self.figures[peer.name].append_rate = written / spent[peer.name]

    async def concurrent_appends(self) -> None:
        """Every conversation appending at once."""
        peers = [peer for peer in self.peers if peer.concurrent]
        keys = {}
        for peer in peers:
            keys[peer.name] = [await peer.create_session("bob") for _ in range(self.args.sessions)]
            for key in keys[peer.name]:
                await peer.append(key, 0)
        spent = dict.fromkeys(keys, 0.0)
        for step in self._steps():
            for peer in peers:
                if peer.name in self.failed:
                    continue

                async def converse(key: str, peer: Peer = peer, step: range = step) -> None:
                    for n in step:
                        await peer.append(key, n)

                async def run(peer: Peer = peer) -> None:
                    await asyncio.gather(*(converse(key) for key in keys[peer.name]))

                try:
                    spent[peer.name] += await _timed(run)
                except Exception as error:  # a peer's own failure under load is a finding
                    self.failed.add(peer.name)
                    self.figures[peer.name].notes.append(
                        f"{self.args.sessions} at once failed: {_first_line(error)}"
                    )
        for peer in peers:
            if peer.name not in self.failed:
                written = self.args.sessions * (self.args.messages - 1)
                self.figures[peer.name].concurrent_rate = written / spent[peer.name]

    async def windows(self) -> None:
        long_log = LONG_LOG // 10 if self.args.quick else LONG_LOG
        logs = {}
        for peer in self.peers:
            long_key = await peer.create_session("cy")
            await peer.fill(long_key, long_log)
            short_key = await peer.create_session("cy")
            await peer.fill(short_key, SHORT_LOG)
            logs[peer.name] = (long_key, short_key)
            await peer.last(long_key, WINDOW)  # warm-up: statements prepared, caches filled
            await peer.last(short_key, WINDOW)
        times: dict[tuple[str, int], list[float]] = {}
        for _ in range(self.rounds):
            for peer in self.peers:
                for which, key in enumerate(logs[peer.name]):
                    for _ in range(WINDOW_READS // self.rounds):
                        started = time.perf_counter()
                        await peer.last(key, WINDOW)
                        seconds = time.perf_counter() - started
                        times.setdefault((peer.name, which), []).append(seconds)
        for peer in self.peers:
            figures = self.figures[peer.name]
            figures.long_window_ms = statistics.median(times[peer.name, 0]) * 1000
            figures.short_window_ms = statistics.median(times[peer.name, 1]) * 1000

    async def listings(self) -> None:
        peers = [peer for peer in self.peers if peer.lists]
        listed = LISTED_SESSIONS // 10 if self.args.quick else LISTED_SESSIONS
        for peer in peers:
            for _ in range(listed):
                await peer.create_session("dee")
            count = await peer.list_all("dee")
            assert count == listed, f"{peer.name} listed {count} of {listed} sessions"
        times: dict[str, list[float]] = {}
        for _ in range(self.rounds):
            for peer in peers:
                started = time.perf_counter()
                await peer.list_all("dee")
                times.setdefault(peer.name, []).append(time.perf_counter() - started)
        for peer in peers:
            self.figures[peer.name].list_ms = statistics.median(times[peer.name]) * 1000
            self.figures[peer.name].notes.extend(await peer.list_notes("dee"))


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
    floor = next((row for row in rows if row.name == ONE_AT_A_TIME), None)
    if reference is not None and reference.concurrent_rate and floor and floor.append_rate:
        print(
            f"- Group commit: {REFERENCE} with {sessions} conversations at once makes "
            f"{reference.concurrent_rate / floor.append_rate:.2f}x the appends of "
            f"{ONE_AT_A_TIME} committing one at a time."
        )
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
    peers = [make() for make in PEERS]
    if args.only:
        peers = [p for p in peers if any(word.lower() in p.name.lower() for word in args.only)]
    print("  " + ", ".join(peer.name for peer in peers), flush=True)
    with tempfile.TemporaryDirectory() as directory:
        rows = asyncio.run(Run(peers, args)(Path(directory)))
    print_table(rows, args)


if __name__ == "__main__":
    main()
