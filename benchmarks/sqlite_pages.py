"""What one sequential append and one last-20 read cost on SQLite, store by store: the
WAL pages an append writes (the bytes each fsync must flush), the CPU time of the whole
process per append, the wall time per append, and the median last-20 read of a
10,000-message session.

The stores are `peers.py`'s: raw sqlite3 at FULL, OpenAI Agents `SQLiteSession` and
convostore on ``sqlite:///`` (FULL), each on a fresh file in WAL mode, appending
round-robin over 20 sessions. Pages are counted by checkpointing the WAL from a
connection of this script's own and counting the frames the next 40 appends add.

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


async def measure(peer: Peer, directory: Path, database: str, appends: int) -> list[str]:
    await peer.open(directory)
    try:
        keys = [await peer.create_session("ada") for _ in range(SESSIONS)]
        n = 0
        for key in keys:
            await peer.append(key, n)
            n += 1
        frames = 0
        for _ in range(8):
            _wal_frames(directory / database, "TRUNCATE")
            for _ in range(COUNTED):
                await peer.append(keys[n % SESSIONS], n)
                n += 1
            frames += _wal_frames(directory / database, "PASSIVE")
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(appends):
            await peer.append(keys[n % SESSIONS], n)
            n += 1
        cpu_us = (time.process_time() - cpu) / appends * 1e6
        wall_us = (time.perf_counter() - wall) / appends * 1e6
        long_key = await peer.create_session("ada")
        await peer.fill(long_key, LONG_LOG)
        await peer.last(long_key, 20)
        reads = []
        for _ in range(READS):
            started = time.perf_counter()
            await peer.last(long_key, 20)
            reads.append(time.perf_counter() - started)
        read_us = statistics.median(reads) * 1e6
    finally:
        await peer.close()
    pages = frames / (8 * COUNTED)
    return [peer.name, f"{pages:.1f}", f"{cpu_us:.0f}", f"{wall_us:.0f}", f"{read_us:.0f}"]


async def main(appends: int) -> None:
    stores: list[tuple[Peer, str]] = [
        (RawSQLite("FULL"), "raw.db"),
        (OpenAISQLite(), "openai.db"),
        (Convostore(REFERENCE, "FULL", lambda d: f"sqlite:///{d}/c.db"), "c.db"),
    ]
    rows = [["store", "WAL pages / append", "CPU µs / append", "wall µs / append", "last 20 µs"]]
    with tempfile.TemporaryDirectory() as directory:
        for number, (peer, database) in enumerate(stores):
            (Path(directory) / str(number)).mkdir()
            rows.append(await measure(peer, Path(directory) / str(number), database, appends))
    rows.insert(1, ["---"] * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--appends", type=int, default=1000, help="timed appends per store")
    asyncio.run(main(parser.parse_args().appends))
