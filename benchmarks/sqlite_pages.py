"""What one sequential append and one last-20 read cost on SQLite, store by store: the
WAL pages an append writes (the bytes each fsync must flush), the CPU time of the whole
process per append, the appends per second, and the median last-20 read of a
10,000-message session.

The stores are `peers.py`'s: raw sqlite3 at FULL, OpenAI Agents `SQLiteSession` and
convostore on ``sqlite:///`` (FULL), each on a fresh file in WAL mode, appending
round-robin over 20 sessions. Pages are counted by checkpointing the WAL from a
connection of this script's own and counting the frames the next 40 appends add. The
timed appends and reads take the stores in turn every 50 appends (every 10 reads), so
that on a shared machine the load of the moment, and the fsync latency it brings,
falls on each store alike; each rate is followed by its ratio to SQLiteSession's.

    .venv/bin/python benchmarks/sqlite_pages.py [--appends N]
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from peer_stores import Convostore, OpenAISQLite, Peer, RawSQLite

REFERENCE = "convostore sqlite:/// (FULL)"
SESSIONS = 20
COUNTED = 40  # appends per WAL count: well under the 1,000-frame autocheckpoint
LONG_LOG = 10_000
READS = 200


def _wal_frames(path: Path, mode: str) -> int:
    connection = sqlite3.connect(path)
    try:
        frames: int = connection.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()[1]
        return frames
    finally:
        connection.close()


class Measured:
    """One store open on its file, with its sessions and what was measured of it."""

    def __init__(self, peer: Peer, directory: Path, database: str) -> None:
        self.peer = peer
        self.directory = directory
        self.path = directory / database
        self.keys: list[str] = []
        self.long_key = ""
        self.n = 0
        self.pages = 0.0
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.reads: list[float] = []

    async def open(self) -> None:
        await self.peer.open(self.directory)
        self.keys = [await self.peer.create_session("ada") for _ in range(SESSIONS)]
        await self.appends(SESSIONS)
        frames = 0
        for _ in range(8):
            _wal_frames(self.path, "TRUNCATE")
            await self.appends(COUNTED)
            frames += _wal_frames(self.path, "PASSIVE")
        self.pages = frames / (8 * COUNTED)
        self.long_key = await self.peer.create_session("ada")
        await self.peer.fill(self.long_key, LONG_LOG)
        await self.peer.last(self.long_key, 20)

    async def appends(self, count: int) -> None:
        for _ in range(count):
            await self.peer.append(self.keys[self.n % SESSIONS], self.n)
            self.n += 1

    async def timed_appends(self, count: int) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        await self.appends(count)
        self.cpu_s += time.process_time() - cpu
        self.wall_s += time.perf_counter() - wall

    async def timed_reads(self, count: int) -> None:
        for _ in range(count):
            started = time.perf_counter()
            await self.peer.last(self.long_key, 20)
            self.reads.append(time.perf_counter() - started)


async def main(appends: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        stores: list[Measured] = []
        for number, (peer, database) in enumerate(
            [
                (RawSQLite("FULL"), "raw.db"),
                (OpenAISQLite(), "openai.db"),
                (Convostore(REFERENCE, "FULL", lambda d: f"sqlite:///{d}/c.db"), "c.db"),
            ]
        ):
            (Path(directory) / str(number)).mkdir()
            stores.append(Measured(peer, Path(directory) / str(number), database))
        try:
            for store in stores:
                await store.open()
            for _ in range(appends // 50):
                for store in stores:
                    await store.timed_appends(50)
            for _ in range(READS // 10):
                for store in stores:
                    await store.timed_reads(10)
        finally:
            for store in stores:
                await store.peer.close()
    openai = stores[1]
    print(
        "| store | WAL pages / append | CPU µs / append | appends/s (÷ SQLiteSession) "
        "| last 20 of 10,000 µs (÷ SQLiteSession) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for store in stores:
        count = appends // 50 * 50
        rate = count / store.wall_s
        read_us = statistics.median(store.reads) * 1e6
        print(
            f"| {store.peer.name} | {store.pages:.1f} | {store.cpu_s / count * 1e6:.0f} "
            f"| {rate:,.0f} ({rate / (count / openai.wall_s):.2f}x) "
            f"| {read_us:.0f} ({read_us / (statistics.median(openai.reads) * 1e6):.2f}x) |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--appends", type=int, default=1000, help="timed appends per store")
    asyncio.run(main(parser.parse_args().appends))
