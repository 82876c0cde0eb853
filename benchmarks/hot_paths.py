"""The two hottest paths on every backend: one append at a time, and the last 20
messages of a session, through the public API.

For each backend (servers started as the tests start them, on loopback ports):

- ``append``: median microseconds of `Store.add_message` to one session, one call after
  another;
- ``last-20``: median microseconds of ``messages(session, last=20)`` on a session of
  ``--log`` messages.

Each figure is the median of ``--rounds`` rounds, each on a fresh database. To compare
two checkouts, run this script with ``PYTHONPATH`` naming each one's ``src`` in turn.

    .venv/bin/python benchmarks/hot_paths.py [--backends memory sqlite ...] [--count N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import convostore
from convostore import MessageWrite, Role, User

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

AUTHOR = User("ada", "Ada")
CONTENT = "What is the capital of France? Answer in one word, please."
BACKENDS = ("memory", "sqlite", "postgresql", "mariadb", "falkordb", "redis")


@contextlib.contextmanager
def server_urls(name: str) -> Iterator[Callable[[int], str]]:
    """Fresh database URLs on one server of ``name`` (none for memory and SQLite)."""
    if name == "memory":
        yield lambda n: "memory://"
    elif name == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            yield lambda n: f"sqlite:///{directory}/hot-{n}.db"
    elif name == "postgresql":
        from tests.servers.postgresql import PostgresServer

        with PostgresServer() as server:
            yield lambda n: f"{server.url()}?schema=hot_{n}"
    elif name == "mariadb":
        from tests.servers.mariadb import MariaDBServer

        with MariaDBServer() as server:
            yield lambda n: server.url(f"hot_{n}")
    elif name == "falkordb":
        from tests.servers.falkordb import FalkorDBServer

        with FalkorDBServer() as server:
            yield lambda n: server.url(f"hot_{n}")
    elif name == "redis":
        from tests.servers.redis import RedisServer

        with RedisServer() as server:
            yield lambda n: server.url(f"hot_{n}")
    else:
        raise SystemExit(f"unknown backend {name!r}")


async def one_round(url: str, count: int, log: int) -> tuple[float, float]:
    store = await convostore.connect(url)
    try:
        await store.put_user(AUTHOR)
        write = MessageWrite(Role.USER, CONTENT, author=AUTHOR.id)
        session = await store.create_session(AUTHOR)
        await store.add_message(session.id, write)  # Prepares the statements.
        appends = []
        for _ in range(count):
            started = time.perf_counter()
            await store.add_message(session.id, write)
            appends.append(time.perf_counter() - started)
        long = await store.create_session(AUTHOR)
        for start in range(0, log, 100):
            batch = [write] * min(100, log - start)
            assert await store.append_events(long.id, batch, start // 100)
        reads = []
        for _ in range(50):
            started = time.perf_counter()
            window = await store.messages(long.id, last=20)
            reads.append(time.perf_counter() - started)
            assert len(window) == 20
        return statistics.median(appends) * 1e6, statistics.median(reads) * 1e6
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="*", default=list(BACKENDS))
    parser.add_argument("--count", type=int, default=500, help="appends timed per round")
    parser.add_argument("--log", type=int, default=1_000, help="messages of the long session")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"convostore from {Path(convostore.__file__).parent}")
    print(f"{'backend':<12}{'append µs':>12}{'last-20 µs':>12}")
    for name in args.backends:
        with server_urls(name) as url_of:
            rounds = [
                asyncio.run(one_round(url_of(n), args.count, args.log)) for n in range(args.rounds)
            ]
        append = statistics.median(r[0] for r in rounds)
        read = statistics.median(r[1] for r in rounds)
        print(f"{name:<12}{append:>12.1f}{read:>12.1f}", flush=True)


if __name__ == "__main__":
    main()
