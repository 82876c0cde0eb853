"""The FalkorDB backend against the raw ``falkordb`` client running the same queries, and
FalkorDB's vector index against an exact scan, on one server this script starts
(tests/servers/falkordb.py: AOF with appendfsync always, the durable default).

1. Appends: ``await store.add_message(...)`` against the raw client running the very
   query the store runs (`CypherQueries.append`) with parameters built by hand, one of
   each in turn (so both meet the same server, disk and load). Ratio: store / raw
   (target >= 0.8).
2. The last-20 window of a 2,000-event log: ``store.read(id, EventFilter(last=20))``
   against the raw client running the same query, in turn. Ratio: store / raw.
3. Listing: pages of 20 of one owner's 2,000 sessions, the first page against the
   50th (keyset: both should cost the same), and a count.
4. Vectors: 100,000 messages x 384 dimensions (clustered random vectors, 1,000 topics
   with noise), loaded through the raw client into a graph whose vector index a store
   declared; then top-10 searches through `Store.search` (all messages, and one owner's
   tenth of them), their recall@10 against an exact scan in numpy, and their latency.

    .venv/bin/python benchmarks/falkordb_bench.py [--messages N] [--vectors N] [--queries N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import convostore
from convostore import EventFilter, MessageWrite, PageRequest, Role, User
from convostore._time import to_micros, utc_now
from convostore.ids import new_id
from convostore.prepare import new_stamp

WIDTH = 384
MODEL = "bench-clustered-384"
TOPICS = 1000
MESSAGES_PER_SESSION = 100
LOAD_BATCH = 500
AUTHOR = User("ada", "Ada")
CONTENT = "What is the capital of France? Answer in one word, please."
Matrix = npt.NDArray[np.float32]


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def open_store(url: str, **options: Any) -> Any:
    from convostore.backends.falkordb import FalkorDBBackend

    store = await convostore.connect(url, **options)
    assert isinstance(store.backend, FalkorDBBackend)
    return store


# ---------------------------------------------------------------------------- 1 and 2


def raw_append_parameters(session_id: str) -> dict[str, Any]:
    """What the store sends for one message, written out by hand."""
    tokens = CONTENT.lower().replace("?", "").replace(",", "").replace(".", "").split()
    counts: dict[str, int] = {}
    for token in tokens:
        counts[token] = counts.get(token, 0) + 1
    event = {
        "id": new_id(), "offset": 1, "turn_offset": 1, "type": "MESSAGE",
        "created_at": to_micros(utc_now()), "branch": None, "metadata": "{}",
        "payload": None, "synthetic": False, "kept_event_ids": None, "role": "user",
        "content": CONTENT, "content_folded": None, "author_id": AUTHOR.id,
        "recipient_ids": "[]", "recipients": [], "in_reply_to": None, "tool_calls": "[]",
        "tool_call_id": None, "attachments": "[]", "data": "[]", "assets": "[]",
        "embedding": None, "embedding_model": None, "embedding_width": None,
        "stamp": new_stamp(), "search_text": " ".join(counts),
        "search_counts": list(counts.values()), "search_length": len(tokens), "blank": False,
        "attachment_nodes": [], "data_nodes": [], "asset_nodes": [],
    }  # fmt: skip
    return {
        "session_id": session_id, "required_users": [AUTHOR.id], "event_ids": [event["id"]],
        "expected_version": None, "count": 1, "stamp": new_stamp(),
        "activity_at": to_micros(utc_now()), "message_count": 1, "started_by": AUTHOR.id,
        "authors": [AUTHOR.id], "last_turn_offset": 1, "users": [], "events": [event],
    }  # fmt: skip


async def appends(base: str, messages: int) -> None:
    """Store and raw appends alternate, one each in turn, on two sessions of one graph:
    both meet the same server, disk and load, whatever else the machine does."""
    print("\n1. appends, one conversation each: store vs the raw client, same query")
    store = await open_store(f"{base}/appends")
    try:
        mine, raw = await store.create_session(AUTHOR), await store.create_session(AUTHOR)
        write = MessageWrite(Role.USER, CONTENT, author=AUTHOR.id)
        graph, query = store.backend.graph, store.backend.queries.append
        store_times: list[float] = []
        raw_times: list[float] = []
        for _ in range(messages):
            began = time.perf_counter()
            await store.add_message(mine.id, write)
            store_times.append(time.perf_counter() - began)
            began = time.perf_counter()
            result = await graph.query(query, raw_append_parameters(raw.id))
            raw_times.append(time.perf_counter() - began)
            assert result.result_set
    finally:
        await store.close()
    store_rate, raw_rate = len(store_times) / sum(store_times), len(raw_times) / sum(raw_times)
    print(
        f"   store {store_rate:,.0f} msg/s (p50 {percentile(store_times, 0.5) * 1000:.2f} ms),"
        f" raw {raw_rate:,.0f} msg/s (p50 {percentile(raw_times, 0.5) * 1000:.2f} ms):"
        f" {store_rate / raw_rate:.2f}"
    )


async def window(base: str, reads: int) -> None:
    from convostore.backends.cypher import queries as q

    print("\n2. the last-20 window of a 2,000-event log: store vs the raw client, same query")
    store = await open_store(f"{base}/window")
    session = await store.create_session(AUTHOR)
    for start in range(0, 2000, 100):
        writes = [
            MessageWrite(Role.USER if n % 4 == 0 else Role.ASSISTANT, f"{CONTENT} {start + n}")
            for n in range(100)
        ]
        await store.append_events(session.id, writes, expected_version=start // 100)
    query = q.last((False,) * len(q.EVENT_CONDITIONS), True, False)
    parameters = {"session_id": session.id, "last": 20}
    assert len(await store.read(session.id, EventFilter(last=20))) >= 20

    async def raw_read() -> None:
        assert (await store.backend.graph.ro_query(query, parameters)).result_set

    store_times: list[float] = []
    raw_times: list[float] = []
    for _ in range(reads):
        began = time.perf_counter()
        await store.read(session.id, EventFilter(last=20))
        store_times.append(time.perf_counter() - began)
        began = time.perf_counter()
        await raw_read()
        raw_times.append(time.perf_counter() - began)
    store_rate, raw_rate = reads / sum(store_times), reads / sum(raw_times)
    print(
        f"   store {store_rate:,.0f} reads/s (p50 {percentile(store_times, 0.5) * 1000:.2f} ms),"
        f" raw {raw_rate:,.0f} reads/s (p50 {percentile(raw_times, 0.5) * 1000:.2f} ms):"
        f" {store_rate / raw_rate:.2f}"
    )
    await store.close()


# ---------------------------------------------------------------------------- 3


async def listing(base: str) -> None:
    print("\n3. listing one owner's 2,000 sessions, pages of 20")
    store = await open_store(f"{base}/listing")
    await store.put_user(AUTHOR)
    for _ in range(2000):
        await store.create_session(AUTHOR.id)
    cursor, page_times = None, []
    for _ in range(50):
        began = time.perf_counter()
        page = await store.list_sessions(AUTHOR.id, PageRequest(20, cursor))
        page_times.append(time.perf_counter() - began)
        cursor = page.next_cursor
    began = time.perf_counter()
    count = await store.count_sessions(AUTHOR.id)
    counted = time.perf_counter() - began
    print(
        f"   page 1 {page_times[0] * 1000:.2f} ms, page 50 {page_times[-1] * 1000:.2f} ms,"
        f" median page {statistics.median(page_times) * 1000:.2f} ms;"
        f" count ({count:,}) {counted * 1000:.2f} ms"
    )
    await store.close()


# ---------------------------------------------------------------------------- 4


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


LOAD = (
    "MATCH (s:Session {id: $session_id}) UNWIND $rows AS row"
    " CREATE (s)-[:HAS_EVENT {seq: row.seq}]->(e:Event:Message {id: row.id,"
    " session_id: s.id, owner_id: s.owner_id, seq: row.seq, type: 'MESSAGE',"
    " created_at: $now, metadata: '{}', synthetic: false, role: 'user',"
    " content: row.content, embedding: vecf32(row.vector), embedding_model: $model,"
    " embedding_width: $width, stamp: row.stamp, search_text: '', search_counts: [],"
    " search_length: 0, blank: false})"
)


async def vector_search(base: str, count: int, queries: int) -> None:
    print("\n4. vector search")
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((TOPICS, WIDTH)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    vectors = clustered_vectors(count, rng, centers)
    store = await open_store(f"{base}/vectors", embedder=FixedEmbedder())
    owners = [User(f"owner-{n}", f"Owner {n}") for n in range(10)]
    row_owner: list[str] = []
    ids = [new_id() for _ in range(count)]
    started = time.perf_counter()
    now = to_micros(utc_now())
    for number in range(count // MESSAGES_PER_SESSION):
        owner = owners[number % len(owners)]
        session = await store.create_session(owner)
        first = number * MESSAGES_PER_SESSION
        for batch in range(first, first + MESSAGES_PER_SESSION, LOAD_BATCH):
            batch_rows = [
                {
                    "id": ids[row],
                    "seq": row - first + 1,
                    "content": f"message {row}",
                    "vector": vectors[row].tolist(),
                    "stamp": new_stamp(),
                }
                for row in range(batch, min(batch + LOAD_BATCH, first + MESSAGES_PER_SESSION))
            ]
            parameters = {"session_id": session.id, "rows": batch_rows, "now": now}
            await store.backend.graph.query(LOAD, {**parameters, "model": MODEL, "width": WIDTH})
        row_owner += [owner.id] * MESSAGES_PER_SESSION
    print(f"   loaded {count:,} x {WIDTH} vectors (indexed as written) in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    row_of = {message_id: row for row, message_id in enumerate(ids)}
    owner_rows = np.array([r for r, o in enumerate(row_owner) if o == "owner-3"], dtype=np.int64)
    all_rows = np.arange(count, dtype=np.int64)
    probes = clustered_vectors(queries, rng, centers)
    for label, owner_id, rows in (("all", None, all_rows), ("one owner", "owner-3", owner_rows)):
        latencies: list[float] = []
        recalls: list[float] = []
        for probe in probes:
            began = time.perf_counter()
            hits = await store.search(vector=probe.tolist(), k=10, owner_id=owner_id)
            latencies.append(time.perf_counter() - began)
            found = {row_of[hit.message.id] for hit in hits}
            scores = vectors[rows] @ probe
            exact = {int(rows[i]) for i in np.argpartition(-scores, 10)[:10]}
            recalls.append(len(found & exact) / 10)
        print(
            f"   top-10 over {label:<9} ({len(rows):>7,} messages): "
            f"recall@10 {statistics.mean(recalls):.3f}, "
            f"p50 {percentile(latencies, 0.5) * 1000:.2f} ms, "
            f"p95 {percentile(latencies, 0.95) * 1000:.2f} ms"
        )
    await store.close()


# ---------------------------------------------------------------------------- main


async def run(arguments: argparse.Namespace) -> None:
    from tests.servers.falkordb import FalkorDBServer

    with FalkorDBServer() as server:
        base = server.url("x").rsplit("/", 1)[0]
        print(f"FalkorDB server: {base} (AOF, appendfsync always)")
        await appends(base, arguments.messages)
        await window(base, arguments.reads)
        await listing(base)
        if arguments.vectors:
            await vector_search(base, arguments.vectors, arguments.queries)


def main() -> None:
    # The test servers live beside the suite, at the repository's root.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000, help="appends per figure")
    parser.add_argument("--reads", type=int, default=500, help="window reads per figure")
    parser.add_argument("--vectors", type=int, default=100_000, help="messages with vectors")
    parser.add_argument("--queries", type=int, default=200, help="searches per figure")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
