"""PostgreSQL statements: prepared on the server, and every hot operation one round
trip."""

from __future__ import annotations

import itertools
import os
import re
import tempfile
from collections.abc import Awaitable, Callable

import pytest

from convostore import EventFilter
from convostore.embedding import HashingEmbedder
from tests.backends.support import missing_driver

if skip_reason := missing_driver("psycopg", "postgresql"):
    pytest.skip(skip_reason, allow_module_level=True)

from psycopg.pq import Trace

from tests.backends.postgresql.support import ADA, Stores, pg_of, say


async def test_statements_are_prepared_on_the_server(stores: Stores) -> None:
    store = await stores.open(url_options={"pool_max_size": 1})
    session = await store.create_session(ADA)
    for _ in range(2):
        await store.add_message(session.id, say("hello"))
        await store.read(session.id, EventFilter(last=1))
    async with pg_of(store).pool.connection() as connection:
        cursor = await connection.execute("SELECT statement FROM pg_prepared_statements")
        prepared = {row[0] for row in await cursor.fetchall()}
    assert any(statement.startswith("WITH missing_users AS") for statement in prepared)
    assert any("window_rows AS" in statement for statement in prepared)


def count_syncs(trace: str) -> int:
    """Round trips: each ends with the client's Sync (a pipeline sends one for all)."""
    return len(re.findall(r"^F\t\d+\tSync", trace, re.MULTILINE))


async def test_every_hot_operation_is_one_round_trip(stores: Stores) -> None:
    # One connection, so the trace sees every statement.
    store = await stores.open(
        embedder=HashingEmbedder(32), url_options={"pool_min_size": 1, "pool_max_size": 1}
    )
    session = await store.create_session(ADA)
    batches = await store.create_session(ADA)
    batch_versions = itertools.count()
    operations: dict[str, Callable[[], Awaitable[object]]] = {
        "add_message": lambda: store.add_message(session.id, say("hello there", author=ADA)),
        "append_events": lambda: store.append_events(
            batches.id, [say("a"), say("b")], next(batch_versions)
        ),
        "read": lambda: store.read(session.id),
        "read last": lambda: store.read(session.id, EventFilter(last=2, text="HELLO")),
        "read active view": lambda: store.read(session.id, EventFilter(active_view=True)),
        "get_session": lambda: store.get_session(session.id),
        "list_summaries": lambda: store.list_summaries("ada"),
        "version": lambda: store.version(session.id),
        "vector search": lambda: store.search("hello", k=3),
        "text search": lambda: store.search("hello", mode="text", k=3),
        "set_narration": lambda: store.set_narration(session.id, "x", "y"),
    }
    for operation in operations.values():  # First uses prepare their statements.
        await operation()
    with tempfile.TemporaryFile("w+") as trace:
        async with pg_of(store).pool.connection() as connection:
            connection.pgconn.trace(trace.fileno())
            connection.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        trips: dict[str, int] = {}
        for name, operation in operations.items():
            start = os.lseek(trace.fileno(), 0, os.SEEK_END)
            await operation()
            trace.seek(start)
            trips[name] = count_syncs(trace.read())
        async with pg_of(store).pool.connection() as connection:
            connection.pgconn.untrace()
    assert trips == dict.fromkeys(operations, 1)
