"""What a session write costs, by the metadata it carries, on SQLite and PostgreSQL.

Each round, on a fresh database per backend, times (microseconds per call, one after
another):

- ``create``: `Store.create_session` without metadata;
- ``create+meta``: with metadata of three keys, one of them indexed;
- ``update+meta``: `Store.update_session` of such a session, changing its metadata;
- ``append``: `Store.add_message` to one session (the control: session metadata plays
  no part in it).

Medians over the rounds, and ``create+meta`` / ``create`` (a ratio within one run).
PostgreSQL runs on a server this script starts (tests/servers/postgresql.py, fsync on),
with synchronous_commit off, and SQLite at synchronous=normal, so that the figures are the
statements' cost, not the flush.

    .venv/bin/python benchmarks/session_writes.py [--count N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import convostore
from convostore import MessageWrite, Role, Store, User

OWNER = User("ada", "Ada")
FIGURES = ("create", "create+meta", "update+meta", "append")


async def _per_call(count: int, call: Callable[[int], Awaitable[object]]) -> float:
    """Microseconds per call of ``call(i)`` for i in range(count), after one warm-up."""
    await call(-1)
    started = time.perf_counter()
    for i in range(count):
        await call(i)
    return (time.perf_counter() - started) / count * 1e6


async def one_round(url: str, count: int) -> dict[str, float]:
    store: Store = await convostore.connect(url, indexed_metadata=["tenant"])
    try:
        await store.put_user(OWNER)
        figures = {"create": await _per_call(count, lambda i: store.create_session(OWNER))}

        def metadata(i: int) -> dict[str, object]:
            return {"tenant": f"t{i % 10}", "colour": "red", "n": i}

        created = []

        async def create_with_metadata(i: int) -> None:
            created.append(await store.create_session(OWNER, metadata=metadata(i)))

        figures["create+meta"] = await _per_call(count, create_with_metadata)

        async def update(i: int) -> None:
            session = created[i + 1]
            await store.update_session(replace(session, metadata=metadata(i + 7)))

        figures["update+meta"] = await _per_call(count, update)
        session = await store.create_session(OWNER)
        write = MessageWrite(Role.USER, "What is the capital of France?", author=OWNER.id)
        figures["append"] = await _per_call(count, lambda i: store.add_message(session.id, write))
        return figures
    finally:
        await store.close()


def _report(name: str, rounds: list[dict[str, float]]) -> None:
    medians = {figure: statistics.median(r[figure] for r in rounds) for figure in FIGURES}
    line = ", ".join(f"{figure} {medians[figure]:,.0f} us" for figure in FIGURES)
    ratio = medians["create+meta"] / medians["create"]
    print(f"  {name:<11} {line}; create+meta / create {ratio:.2f}")


async def run(arguments: argparse.Namespace) -> None:
    from tests.servers.postgresql import PostgresServer

    print(f"convostore from {Path(convostore.__file__).parent}")
    print(f"{arguments.rounds} rounds of {arguments.count} calls each, medians")
    sqlite: list[dict[str, float]] = []
    postgresql: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as directory, PostgresServer(durable=True) as server:
        options = "options=-c%20synchronous_commit%3Doff"
        for number in range(arguments.rounds):
            sqlite.append(
                await one_round(
                    f"sqlite:///{directory}/s{number}.db?synchronous=normal", arguments.count
                )
            )
            postgresql.append(
                await one_round(f"{server.url()}?schema=s{number}&{options}", arguments.count)
            )
    _report("SQLite", sqlite)
    _report("PostgreSQL", postgresql)


def main() -> None:
    # The test servers live beside the suite, at the repository's root.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500, help="calls per figure")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (median)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
