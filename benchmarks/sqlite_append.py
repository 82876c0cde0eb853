"""What the SQLite store's async layer costs on the hottest write: `add_message`.

Side by side, on fresh databases with the store's schema and settings, at each
``synchronous`` level:

- ``store``: ``await store.add_message(...)``: validation, one hop to the writer thread
  and back, one transaction. With ``--writers 1`` one conversation appends one message
  after another (each waits for the last: latency-bound); with more, that many
  conversations append at once, as in a server (throughput-bound);
- ``raw``: the same statements with the same parameters, one transaction after another,
  executed by hand on a sqlite3 connection in this thread, with no store around them.

The ratio is store throughput over raw throughput (1.0: the async layer costs nothing).

    .venv/bin/python benchmarks/sqlite_append.py [--messages N] [--rounds R] [--writers W ...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from convostore._time import to_micros, utc_now
from convostore.backends.sqlite import statements as sql
from convostore.backends.sqlite.connection import open_connection
from convostore.backends.sqlite.schema import prepare_database
from convostore.backends.sqlite.url import SQLiteTarget
from convostore.ids import new_id
from convostore.prepare import new_stamp
from workload import AUTHOR, CONTENT
from workload import store_appends as appends_through_store

PARTS_JSON = "[]"
REQUIRED_USERS = '["ada"]'  # The author, given by id, must be a stored user.


async def store_appends(path: Path, synchronous: str, count: int, writers: int) -> float:
    """Messages per second through `Store.add_message` on a SQLite file."""
    return await appends_through_store(
        f"sqlite:///{path}?synchronous={synchronous}", count, writers
    )


def raw_appends(path: Path, synchronous: str, count: int) -> float:
    """Messages per second for the same statements run by hand on one connection."""
    target = SQLiteTarget(str(path), synchronous=synchronous.upper())
    connection = open_connection(target, reader=False)
    try:
        prepare_database(connection, target)
        session_id = new_id()
        now = to_micros(utc_now())
        connection.execute(
            sql.STATEMENTS.upsert_user, (AUTHOR.id, AUTHOR.display_name, None, None, "human", "{}")
        )
        connection.execute(
            sql.INSERT_SESSION,
            (session_id, AUTHOR.id, None, "chat", None, None, now, now, None, "{}", 0, new_stamp()),
        )

        def append() -> None:
            at = to_micros(utc_now())
            connection.execute("BEGIN IMMEDIATE")
            last_seq, _ = connection.execute(
                sql.ADVANCE_SESSION,
                (1, new_stamp(), at, 1, AUTHOR.id, session_id, None, REQUIRED_USERS),
            ).fetchone()
            connection.execute(
                sql.INSERT_EVENT,
                (
                    *(session_id, last_seq, new_id(), "MESSAGE", at, None, "{}", None, 0),
                    *("user", CONTENT, AUTHOR.id, PARTS_JSON, None, PARTS_JSON, None),
                    *(PARTS_JSON, PARTS_JSON, PARTS_JSON, None, None, None, new_stamp()),
                ),
            )
            connection.execute("COMMIT")

        append()
        started = time.perf_counter()
        for _ in range(count):
            append()
        return count / (time.perf_counter() - started)
    finally:
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="appends per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per figure (median)")
    parser.add_argument(
        "--writers", type=int, nargs="+", default=[1, 16], help="conversations appending at once"
    )
    arguments = parser.parse_args()
    print(f"{'synchronous':<12} {'writers':>7} {'store msg/s':>12} {'raw msg/s':>10} {'ratio':>6}")
    for synchronous in ("full", "normal"):
        for writers in arguments.writers:
            store_rates: list[float] = []
            raw_rates: list[float] = []
            with tempfile.TemporaryDirectory() as directory:
                for run in range(arguments.rounds):
                    store_path = Path(directory) / f"store-{run}.db"
                    raw_path = Path(directory) / f"raw-{run}.db"
                    store_rates.append(
                        asyncio.run(
                            store_appends(store_path, synchronous, arguments.messages, writers)
                        )
                    )
                    raw_rates.append(raw_appends(raw_path, synchronous, arguments.messages))
            store_rate = statistics.median(store_rates)
            raw_rate = statistics.median(raw_rates)
            print(
                f"{synchronous:<12} {writers:>7} {store_rate:>12,.0f} {raw_rate:>10,.0f} "
                f"{store_rate / raw_rate:>6.2f}"
            )


if __name__ == "__main__":
    main()
