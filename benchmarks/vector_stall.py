"""Does vector search on SQLite hold up the rest of the store?

A database of N messages with 384-dimension vectors; a store opened on it with a cold
vector cache; two vector searches started at once, and, while they run, ``get_session``
called again and again on another task. Reported: how long the searches took, and the
median and worst ``get_session`` latency while they ran (against its latency on an idle
store). Then the cost of the first search after a delete, and of a warm search.

    .venv/bin/python benchmarks/vector_stall.py [--vectors N]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time

import numpy as np

import convostore
from convostore import MessageWrite, Role, Store, User
from convostore.embedding import HashingEmbedder

WIDTH = 384


async def load(store: Store, count: int, model: str) -> list[str]:
    rng = np.random.default_rng(3)
    owners = [User(f"owner-{n}", f"Owner {n}") for n in range(10)]
    sessions = []
    for start in range(0, count, 500):
        session = await store.create_session(owners[(start // 500) % 10])
        sessions.append(session.id)
        writes = [
            MessageWrite(
                Role.USER,
                f"message {n}",
                embedding=rng.standard_normal(WIDTH).tolist(),
                embedding_model=model,
            )
            for n in range(start, min(count, start + 500))
        ]
        await store.append_events(session.id, writes, expected_version=0)
    return sessions


async def probe_latency(store: Store, session_id: str, stop: asyncio.Event) -> list[float]:
    latencies = []
    while not stop.is_set():
        began = time.perf_counter()
        await store.get_session(session_id)
        latencies.append(time.perf_counter() - began)
        await asyncio.sleep(0.001)
    return latencies


async def run(count: int) -> None:
    embedder = HashingEmbedder(WIDTH)
    query = [random.Random(9).gauss(0.0, 1.0) for _ in range(WIDTH)]
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{directory}/stall.db?synchronous=normal"
        async with await convostore.connect(url, embedder=embedder) as store:
            started = time.perf_counter()
            sessions = await load(store, count, embedder.name)
            print(f"  loaded {count:,} x {WIDTH} in {time.perf_counter() - started:.0f} s")
        async with await convostore.connect(url, embedder=embedder) as store:
            idle = []
            for _ in range(200):
                began = time.perf_counter()
                await store.get_session(sessions[0])
                idle.append(time.perf_counter() - began)
            stop = asyncio.Event()
            probe = asyncio.create_task(probe_latency(store, sessions[0], stop))
            began = time.perf_counter()
            await asyncio.gather(
                store.search(vector=query, k=10),
                store.search(vector=query, k=10, owner_id="owner-1"),
            )
            searches = time.perf_counter() - began
            stop.set()
            during = await probe
            print(f"  two cold searches at once: {searches * 1000:.0f} ms")
            print(
                f"  get_session idle: median {statistics.median(idle) * 1000:.2f} ms; during the"
                f" searches: median {statistics.median(during) * 1000:.2f} ms, worst"
                f" {max(during) * 1000:.1f} ms ({len(during)} calls)"
            )
            warm = []
            for _ in range(20):
                began = time.perf_counter()
                await store.search(vector=query, k=10)
                warm.append(time.perf_counter() - began)
            await store.delete_session(sessions[-1])
            began = time.perf_counter()
            await store.search(vector=query, k=10)
            after_delete = time.perf_counter() - began
            print(
                f"  warm search: median {statistics.median(warm) * 1000:.1f} ms; first search"
                f" after a delete: {after_delete * 1000:.0f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=100_000)
    count = parser.parse_args().vectors
    print(f"SQLite vector search beside other work ({count:,} vectors)")
    asyncio.run(run(count))


if __name__ == "__main__":
    main()
