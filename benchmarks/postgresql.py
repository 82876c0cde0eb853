"""The PostgreSQL backend against raw psycopg and against its own single writer, and
pgvector's HNSW search against an exact scan, all on one server this script starts
(tests/servers/postgresql.py, durable settings: fsync on).

1. Appends: ``await store.add_message(...)`` one after another, against raw psycopg
   running the very statement the store runs (`statements.APPEND`) with parameters built
   by hand, on one connection. Once with synchronous_commit on (each commit waits for its
   WAL flush) and once off (the client's and server's CPU alone). Ratio: store / raw.
2. Writers: 8 conversations appending at once through one store (a pool of 8) against
   one conversation: total messages per second, and the ratio; beside it the same for
   raw psycopg (8 connections), which is the most the machine allows.
3. Vectors: 100,000 messages x 384 dimensions (clustered random vectors, shaped like
   sentence embeddings: 1,000 topics with noise around each), bulk-loaded with COPY; the
   HNSW index built by connecting a store whose embedder declares it; then top-10
   searches through `Store.search` (all messages, and one owner's tenth of them), their
   recall@10 against an exact scan in numpy, and their latency.

    .venv/bin/python benchmarks/postgresql.py [--messages N] [--vectors N] [--queries N]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import convostore
from convostore import User
from convostore._time import utc_now
from convostore.ids import new_id
from convostore.prepare import new_stamp
from workload import AUTHOR, CONTENT, store_appends

WIDTH = 384
MODEL = "bench-clustered-384"
TOPICS = 1000
MESSAGES_PER_SESSION = 100
Matrix = npt.NDArray[np.float32]
# fmt: off
COPY_TYPES = [
    "text", "int8", "text", "text", "timestamptz", "json", "bool", "text", "text", "float4[]",
    "text", "text",
]
# fmt: on


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# ---------------------------------------------------------------------------- appends


async def raw_appends(url: str, count: int, writers: int = 1) -> float:
    """Messages per second for the store's append statement run by hand, with the same
    parameters and no store around it: ``writers`` conversations, each on a connection
    of its own."""
    import psycopg

    from convostore.backends.postgresql import parse_postgresql_url
    from convostore.backends.postgresql import statements as sql
    from convostore.backends.postgresql.connection import configure_connection, session_settings
    from convostore.backends.postgresql.rows import search_terms

    store = await convostore.connect(url)  # Creates the schema and the sessions.
    await store.put_user(AUTHOR)
    sessions = [await store.create_session(AUTHOR) for _ in range(writers)]
    await store.close()
    target = parse_postgresql_url(url)
    connections = [
        await psycopg.AsyncConnection.connect(target.conninfo, autocommit=True, prepare_threshold=0)
        for _ in range(writers)
    ]
    terms, length = search_terms(CONTENT)
    event: dict[str, Any] = {
        "type": "MESSAGE",
        "metadata": "{}",
        "synthetic": False,
        "role": "user",
        "content": CONTENT,
        "author_id": AUTHOR.id,
        **dict.fromkeys(("recipient_ids", "tool_calls", "attachments", "data"), "[]"),
        "assets": "[]",
        "search_terms": terms,
        "search_length": length,
    }

    async def converse(connection: psycopg.AsyncConnection[Any], session_id: str, n: int) -> None:
        constant: dict[str, Any] = {
            "session_id": session_id,
            "count": 1,
            "message_count": 1,
            "started_by": AUTHOR.id,
            "expected_version": None,
            "required_users": [AUTHOR.id],
            "users": "[]",
        }
        for _ in range(n):
            now = utc_now()
            written = event | {"id": new_id(), "created_at": now.isoformat(), "stamp": new_stamp()}
            parameters = constant | {
                "stamp": new_stamp(),
                "activity_at": now,
                "events": json.dumps([written]),
            }
            cursor = await connection.execute(sql.APPEND, parameters)
            await cursor.fetchone()

    try:
        settings = session_settings(target.schema, ef_search=None, iterative_scan=False)
        for connection in connections:
            await configure_connection(connection, settings)
        pairs = list(zip(connections, [s.id for s in sessions], strict=True))
        await asyncio.gather(*(converse(c, s, 1) for c, s in pairs))  # Prepares them.
        each = count // writers
        started = time.perf_counter()
        await asyncio.gather(*(converse(c, s, each) for c, s in pairs))
        return each * writers / (time.perf_counter() - started)
    finally:
        for connection in connections:
            await connection.close()


# ---------------------------------------------------------------------------- vectors


def clustered_vectors(count: int, rng: np.random.Generator, centers: Matrix) -> Matrix:
    """Unit vectors scattered around ``centers``, as embeddings of texts on a topic are."""
    topics = rng.integers(0, len(centers), size=count)
    noise = rng.standard_normal((count, WIDTH)).astype(np.float32)
    vectors = centers[topics] + 0.35 * noise / np.sqrt(WIDTH).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    unit: Matrix = vectors.astype(np.float32)
    return unit


class FixedEmbedder:
    """Declares the benchmark's vector index; queries come as vectors."""

    name = MODEL
    dimensions = WIDTH
    metric = "cosine"

    async def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        raise RuntimeError("the benchmark searches by vector")


async def load_vectors(url: str, vectors: Matrix) -> tuple[list[str], dict[str, str]]:
    """Sessions (alternately of ten owners) and their messages with ``vectors``, bulk
    loaded; returns each row's message id and each session's owner."""
    from convostore.backends.postgresql import PostgreSQLBackend

    store = await convostore.connect(url)
    backend = store.backend
    assert isinstance(backend, PostgreSQLBackend)
    owners = [User(f"owner-{n}", f"Owner {n}") for n in range(10)]
    session_owner: dict[str, str] = {}
    sessions = []
    for number in range(len(vectors) // MESSAGES_PER_SESSION):
        owner = owners[number % len(owners)]
        session = await store.create_session(owner)
        sessions.append(session.id)
        session_owner[session.id] = owner.id
    ids = [new_id() for _ in range(len(vectors))]
    now = utc_now()
    async with backend.pool.connection() as connection:
        async with (
            connection.cursor() as cursor,
            cursor.copy(
                "COPY events (session_id, seq, id, type, created_at, metadata, synthetic,"
                " role, content, embedding, embedding_model, stamp) FROM STDIN (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(COPY_TYPES)
            for row, vector in enumerate(vectors.tolist()):
                session_index, seq = divmod(row, MESSAGES_PER_SESSION)
                await copy.write_row(
                    (
                        *(sessions[session_index], seq + 1, ids[row], "MESSAGE", now, "{}"),
                        *(False, "user", f"message {row}", vector, MODEL, new_stamp()),
                    )
                )
        await connection.execute(
            "UPDATE sessions SET version = %s, last_seq = %s, message_count = %s",
            (MESSAGES_PER_SESSION,) * 3,
        )
        await connection.execute("VACUUM ANALYZE events")
    await store.close()
    return [sessions[row // MESSAGES_PER_SESSION] for row in range(len(vectors))], session_owner


def exact_top(matrix: Matrix, query: Matrix, k: int, rows: npt.NDArray[np.int64]) -> set[int]:
    """The rows (among ``rows``) nearest ``query`` by cosine: what a scan finds."""
    scores = matrix[rows] @ query
    best = np.argpartition(-scores, k)[:k]
    return {int(rows[i]) for i in best}


async def vector_search(url: str, count: int, queries: int) -> None:
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((TOPICS, WIDTH)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    vectors = clustered_vectors(count, rng, centers)
    started = time.perf_counter()
    row_sessions, session_owner = await load_vectors(url, vectors)
    print(f"  loaded {count:,} x {WIDTH} vectors in {time.perf_counter() - started:.1f} s")
    from convostore.backends.postgresql import PostgreSQLBackend

    started = time.perf_counter()
    store = await convostore.connect(url, embedder=FixedEmbedder())
    backend = store.backend
    assert isinstance(backend, PostgreSQLBackend)
    print(f"  HNSW index built at connect in {time.perf_counter() - started:.1f} s")
    try:
        ef_search = backend.target.ef_search
        row_of: dict[str, int] = {}
        async with backend.pool.connection() as connection:
            cursor = await connection.execute("SELECT id FROM events ORDER BY session_id, seq")
            for row, (message_id,) in enumerate(await cursor.fetchall()):
                row_of[message_id] = row
        owner_rows = np.array(
            [r for r, s in enumerate(row_sessions) if session_owner[s] == "owner-3"], dtype=np.int64
        )
        all_rows = np.arange(count, dtype=np.int64)
        probes = clustered_vectors(queries, rng, centers)
        for label, owner, rows in (("all", None, all_rows), ("one owner", "owner-3", owner_rows)):
            latencies: list[float] = []
            recalls: list[float] = []
            for probe in probes:
                began = time.perf_counter()
                hits = await store.search(vector=probe.tolist(), k=10, owner_id=owner)
                latencies.append(time.perf_counter() - began)
                found = {row_of[hit.message.id] for hit in hits}
                recalls.append(len(found & exact_top(vectors, probe, 10, rows)) / 10)
            print(
                f"  top-10 over {label:<9} ({len(rows):>7,} messages, ef_search {ef_search}): "
                f"recall@10 {statistics.mean(recalls):.3f}, "
                f"p50 {percentile(latencies, 0.5) * 1000:.2f} ms, "
                f"p95 {percentile(latencies, 0.95) * 1000:.2f} ms"
            )
    finally:
        await store.close()


# ---------------------------------------------------------------------------- main


async def run(arguments: argparse.Namespace) -> None:
    from tests.servers.postgresql import PostgresServer

    settings = {"maintenance_work_mem": "1GB", "shared_buffers": "512MB"}
    with PostgresServer(durable=True, settings=settings) as server:
        base = server.url()
        print(f"PostgreSQL server: {base} (durable: fsync on)")
        print("\n1. appends, one conversation: store vs raw psycopg, same statement")
        print(f"   {'synchronous_commit':<18} {'store msg/s':>12} {'raw msg/s':>10} {'ratio':>6}")
        runs = itertools.count()
        for commit in ("on", "off"):
            options = f"options=-c%20synchronous_commit%3D{commit}"
            store_rates: list[float] = []
            raw_rates: list[float] = []
            # Interleaved rounds, each on a fresh schema; the median of each.
            for _ in range(arguments.rounds):
                store_rates.append(
                    await store_appends(
                        f"{base}?schema=appends_{next(runs)}&{options}", arguments.messages, 1
                    )
                )
                raw_rates.append(
                    await raw_appends(
                        f"{base}?schema=appends_{next(runs)}&{options}", arguments.messages
                    )
                )
            store_rate, raw_rate = statistics.median(store_rates), statistics.median(raw_rates)
            print(
                f"   {commit:<18} {store_rate:>12,.0f} {raw_rate:>10,.0f} "
                f"{store_rate / raw_rate:>6.2f}"
            )
        print("\n2. writers: 8 and 64 conversations at once vs 1 (synchronous_commit on)")
        counts = (1, 8, 64)
        rates: dict[tuple[str, int], list[float]] = {}
        for _ in range(arguments.rounds):
            for writers in counts:
                messages = arguments.messages * min(writers, 8) // 4 or 1
                rates.setdefault(("store", writers), []).append(
                    await store_appends(
                        f"{base}?schema=writers_{next(runs)}&pool_max_size={writers}",
                        messages,
                        writers,
                    )
                )
                rates.setdefault(("raw", writers), []).append(
                    await raw_appends(f"{base}?schema=writers_{next(runs)}", messages, writers)
                )
        medians = {key: statistics.median(values) for key, values in rates.items()}
        for kind, label in (("store", "through one store"), ("raw", "raw psycopg, same statement")):
            one = medians[kind, 1]
            print(
                f"   {label:<28} 1 writer {one:>7,.0f} msg/s, "
                + ", ".join(
                    f"{n} writers {medians[kind, n]:>7,.0f} msg/s (x{medians[kind, n] / one:.2f})"
                    for n in counts[1:]
                )
            )
        print(
            "   store / raw: "
            + ", ".join(
                f"{n} writers {medians['store', n] / medians['raw', n]:.2f}" for n in counts
            )
        )
        if arguments.vectors <= 0:
            return
        print("\n3. vector search")
        await vector_search(f"{base}?schema=vectors", arguments.vectors, arguments.queries)


def main() -> None:
    # The test servers live beside the suite, at the repository's root.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="appends per figure")
    parser.add_argument("--vectors", type=int, default=100_000, help="messages with vectors")
    parser.add_argument("--queries", type=int, default=200, help="searches per figure")
    parser.add_argument("--rounds", type=int, default=3, help="runs per append figure (median)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
