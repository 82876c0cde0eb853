"""MariaDB 11.8's own vector index behind the MySQL backend (`native_vectors`): the
capability follows the server, searches walk the graph and score as the exact scan, and
the graph follows every write that adds, changes or removes a vector. What every backend
does is the contract suite's (tests/contract, backend ``mariadb11``). Left out with
``CONVOSTORE_SKIP_BACKENDS=mariadb11``."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import os
import random
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

import convostore
from convostore import HashingEmbedder, MessageWrite, Role, Store, User

if importlib.util.find_spec("asyncmy") is None and os.environ.get("CI") != "true":
    pytest.skip(
        "the mysql extra is not installed: pip install 'convostore[mysql]'",
        allow_module_level=True,
    )

from convostore._time import utc_now
from convostore._vectors import best, scores
from convostore.backends.interface import VectorQuery
from convostore.backends.mysql import MySQLBackend, native_vectors, vector_feed
from convostore.backends.mysql.connection import Connection, fetch_all, fetch_one
from tests.servers.mariadb import (
    TestServer,
)

NATIVE = "?vector_search=native"
ADA = User("ada", "Ada")
BOB = User("bob", "Bob")
WORDS = [f"w{n}" for n in range(40)] + [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
]


_databases = itertools.count(1)


class Stores:
    """Opens stores on one fresh database and closes them all at teardown."""

    def __init__(self, server: TestServer) -> None:
        # The graph is a store's choice (the default is the cache).
        self.url = server.url(f"native_{os.getpid()}_{next(_databases)}") + NATIVE
        self.opened: list[Store] = []

    async def open(self, **options: Any) -> Store:
        store = await convostore.connect(self.url, **options)
        self.opened.append(store)
        return store


@pytest.fixture
async def stores(server_11: TestServer) -> AsyncIterator[Stores]:
    opened = Stores(server_11)
    yield opened
    for store in reversed(opened.opened):
        await store.close()


class GraphAnswers:
    """Records whether each search was answered by the graph (or fell back to a scan)."""

    def __init__(self) -> None:
        self.answers: list[bool] = []

    async def __call__(
        self, connection: Connection, query: VectorQuery, ef_search: int
    ) -> list[tuple[int, float]] | None:
        found = await _graph_search(connection, query, ef_search)
        self.answers.append(found is not None)
        return found


_graph_search = native_vectors.search


@pytest.fixture
def graph(monkeypatch: pytest.MonkeyPatch) -> GraphAnswers:
    answers = GraphAnswers()
    monkeypatch.setattr(native_vectors, "search", answers)
    return answers


def backend(store: Store) -> MySQLBackend:
    assert isinstance(store.backend, MySQLBackend)
    return store.backend


async def rows(store: Store, statement: str) -> list[Any]:
    async with backend(store).pool.acquire() as connection:
        return list(await fetch_all(connection, statement))


async def graph_count(store: Store) -> int:
    async with backend(store).pool.acquire() as connection:
        return int((await fetch_one(connection, "SELECT count(*) FROM native_vectors"))[0])


async def vector_count(store: Store, model: str) -> int:
    async with backend(store).pool.acquire() as connection:
        row = await fetch_one(
            connection, "SELECT count(*) FROM events WHERE embedding_model = %s", (model,)
        )
        return int(row[0])


async def fill(store: Store, owner: User, sessions: int, messages: int) -> list[str]:
    """Sessions of messages of six words drawn from `WORDS` (seeded, so a run repeats
    itself, and few messages tie)."""
    words = random.Random(f"{owner.id} {sessions} {messages}")
    ids = []
    for _ in range(sessions):
        session = await store.create_session(owner)
        ids.append(session.id)
        for _ in range(messages):
            text = " ".join(words.choice(WORDS) for _ in range(6))
            await store.add_message(session.id, MessageWrite(Role.USER, text))
    return ids


async def exact_top(
    store: Store, query: tuple[float, ...], k: int, owner: str | None
) -> list[tuple[str, float]]:
    """The k best (message id, score) by numpy over every stored vector in scope."""
    statement = (
        "SELECT e.id, e.embedding FROM events e JOIN sessions s ON s.id = e.session_id"
        " WHERE e.embedding IS NOT NULL AND (%s IS NULL OR s.owner_id = %s)"
        " ORDER BY e.row_id"
    )
    async with backend(store).pool.acquire() as connection:
        found = await fetch_all(connection, statement, (owner, owner))
    matrix = np.frombuffer(b"".join(row[1] for row in found), dtype="<f4").reshape(
        len(found), len(query)
    )
    return [(found[i][0], score) for i, score in best(scores(query, matrix, "cosine"), k)]


async def test_the_capability_follows_the_server(
    server_10: TestServer, server_11: TestServer
) -> None:
    older = await convostore.connect(server_10.url(f"native_{os.getpid()}_10") + NATIVE)
    newer = await convostore.connect(server_11.url(f"native_{os.getpid()}_11") + NATIVE)
    cached = await convostore.connect(server_11.url(f"native_{os.getpid()}_11"))
    try:
        assert older.capabilities.native_vector_index is False
        assert newer.capabilities.native_vector_index is True
        assert backend(newer).facts.version >= native_vectors.NATIVE_SINCE
        # Chosen by the URL: the default searches the cache, on any server.
        assert cached.capabilities.native_vector_index is False
        assert isinstance(backend(cached).vectors, native_vectors.GraphVectors)
        assert not backend(cached).vectors.native
        assert backend(older).vectors.cache is not None
    finally:
        await older.close()
        await newer.close()
        await cached.close()


async def test_searches_walk_the_graph_and_score_as_the_scan(
    stores: Stores, graph: GraphAnswers
) -> None:
    embedder = HashingEmbedder(32)
    store = await stores.open(embedder=embedder)
    await fill(store, ADA, 4, 15)
    await fill(store, BOB, 2, 15)
    assert await graph_count(store) == await vector_count(store, embedder.name)
    (query,) = await embedder.embed(["alpha gamma kappa"])
    for owner in (None, "ada", "bob"):
        hits = await store.search(vector=query, k=10, owner_id=owner)
        # Every message in scope scored by numpy. The graph is approximate (each build
        # draws its own levels), so at least nine of its ten hits are among the ten best
        # (a tie with the tenth counts); each hit has the score the scan gives it, and
        # they come best first.
        exact = await exact_top(store, tuple(query), 1000, owner)
        tenth = exact[9][1]
        assert len(hits) == 10
        assert sum(hit.score >= tenth - 1e-6 for hit in hits) >= 9
        assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
        by_id = dict(exact)
        assert [hit.score for hit in hits] == pytest.approx(
            [by_id[hit.message.id] for hit in hits], abs=1e-6
        )
    assert graph.answers == [True, True, True]


async def test_a_session_a_zero_query_and_a_narrow_owner_are_scanned(
    stores: Stores, graph: GraphAnswers
) -> None:
    store = await stores.open(embedder=HashingEmbedder(16))
    (session_id,) = await fill(store, ADA, 1, 12)
    hits = await store.search("alpha beta", session_id=session_id, k=5)
    assert len(hits) == 5
    zero_hits = await store.search(vector=[0.0] * 16, k=5)
    assert [hit.score for hit in zero_hits] == [0.0] * 5
    # An owner with fewer vectors than asked for: the graph finds too few, the scan all.
    await fill(store, BOB, 1, 3)
    assert len(await store.search("alpha beta", owner_id="bob", k=5)) == 3
    assert graph.answers == [False, False, False]


async def test_zero_vectors_stay_out_of_the_graph(stores: Stores, graph: GraphAnswers) -> None:
    embedder = HashingEmbedder(8)
    store = await stores.open(embedder=embedder)
    session = await store.create_session(ADA)
    for n in range(12):
        await store.add_message(session.id, MessageWrite(Role.USER, f"alpha beta {n}"))
    zero = MessageWrite(Role.USER, "nothing", embedding=[0.0] * 8, embedding_model=embedder.name)
    await store.add_message(session.id, zero)
    assert await graph_count(store) == 12
    hits = await store.search("alpha beta", k=12)
    assert len(hits) == 12
    assert all(hit.message.content != "nothing" for hit in hits)
    assert graph.answers == [True]


async def test_the_graph_follows_deleted_and_expired_sessions(
    stores: Stores, graph: GraphAnswers
) -> None:
    embedder = HashingEmbedder(16)
    store = await stores.open(embedder=embedder)
    kept = await fill(store, ADA, 3, 10)
    parent = await store.create_session(BOB, expires_at=utc_now() + timedelta(hours=1))
    part = await store.create_session(BOB, part_of=parent.id)
    for session_id in (parent.id, part.id):
        for n in range(10):
            text = f"alpha gamma kappa {n}"
            await store.add_message(session_id, MessageWrite(Role.USER, text))
    doomed = await fill(store, BOB, 1, 10)
    assert await graph_count(store) == 60
    # The parent and its part go together; then the parent, now expired, with its part.
    assert await store.delete_session(doomed[0])
    assert await graph_count(store) == 50
    assert await store.delete_expired(utc_now() + timedelta(hours=2)) == 1
    assert await graph_count(store) == await vector_count(store, embedder.name) == 30
    # A graph pointing at deleted rows would end these walks early (and fall back).
    hits = await store.search("alpha gamma kappa", k=25)
    assert len(hits) == 25
    assert {hit.message.session_id for hit in hits} <= set(kept)
    assert graph.answers == [True]


async def test_reembedding_rebuilds_the_graph_for_the_new_model(
    stores: Stores, graph: GraphAnswers
) -> None:
    store = await stores.open(embedder=HashingEmbedder(16))
    await fill(store, ADA, 2, 10)
    wider = HashingEmbedder(24)
    report = await store.reembed(wider)
    assert report.messages == 20
    assert report.index_recreated
    assert await rows(store, "SELECT dimensions, model FROM native_vector_state") == [
        (24, wider.name)
    ]
    assert await graph_count(store) == 20
    hits = await store.search("alpha beta", k=10)
    assert len(hits) == 10
    assert graph.answers == [True]
    # Another store that connects with the same embedder keeps the graph as it is.
    again = await stores.open(embedder=wider)
    assert await graph_count(again) == 20


async def test_a_graph_whose_build_was_interrupted_is_built_again(stores: Stores) -> None:
    embedder = HashingEmbedder(16)
    store = await stores.open(embedder=embedder)
    await fill(store, ADA, 2, 10)
    async with backend(store).pool.acquire() as connection:
        # As a build killed after its table was made, before its copy was recorded.
        await fetch_one(connection, "SELECT 1")
        cursor = connection.cursor()
        await cursor.execute("DELETE FROM native_vector_state")
        await cursor.execute("DELETE FROM native_vectors")
    reopened = await stores.open(embedder=embedder)
    assert await graph_count(reopened) == 20
    assert await rows(reopened, "SELECT model FROM native_vector_state") == [(embedder.name,)]


async def test_a_user_without_create_connects_and_scans(
    stores: Stores, graph: GraphAnswers, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = HashingEmbedder(16)
    owner = await stores.open(embedder=embedder)
    await fill(owner, ADA, 2, 10)
    database = stores.url.rsplit("/", 1)[1].removesuffix(NATIVE)
    user = f"app_{database}"[:80]
    async with backend(owner).pool.acquire() as connection:
        cursor = connection.cursor()
        # As a database that was written before the server had vectors.
        await cursor.execute("DELETE FROM native_vector_state")
        await cursor.execute("DROP TABLE native_vectors")
        await cursor.execute(f"CREATE USER '{user}'@'127.0.0.1'")
        await cursor.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{database}`.* TO '{user}'@'127.0.0.1'"
        )
    try:
        app_url = stores.url.replace("mysql://root@", f"mysql://{user}@")
        app = await convostore.connect(app_url, embedder=embedder)
        try:
            assert "vector index is not built" in caplog.text
            assert len(await app.search("alpha beta", k=5)) == 5
            assert graph.answers == [False]
        finally:
            await app.close()
        rebuilt = await stores.open(embedder=embedder)
        assert await graph_count(rebuilt) == 20
    finally:
        async with backend(owner).pool.acquire() as connection:
            await connection.cursor().execute(f"DROP USER '{user}'@'127.0.0.1'")


async def test_a_vector_appended_during_a_rebuild_is_in_the_graph(
    stores: Stores, graph: GraphAnswers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append copies its vector while the graph's table has just been made anew and
    its state is not recorded yet (so it copies nothing), then commits only after the
    rebuild has begun its copy of every vector. The guard makes the rebuild's copy wait
    for that commit, so the vector is in the graph."""
    embedder = HashingEmbedder(16)
    store = await stores.open(embedder=embedder)
    [session] = await fill(store, ADA, 1, 10)
    assert await graph_count(store) == 10
    copied, go = asyncio.Event(), asyncio.Event()
    record, create, settle = vector_feed.record, native_vectors.create_table, native_vectors.settle
    appended: list[asyncio.Task[Any]] = []

    async def held(*arguments: Any, **named: Any) -> None:
        copied.set()  # its copy is done, in its open transaction
        await go.wait()
        await record(*arguments, **named)

    async def then_append(*arguments: Any) -> None:
        await create(*arguments)
        text = "alpha beta gamma delta appended"
        appended.append(
            asyncio.create_task(store.add_message(session, MessageWrite(Role.USER, text)))
        )
        await copied.wait()

    async def releasing(connection: Connection) -> None:
        go.set()  # the append commits now: the rebuild's copy must wait for it
        await settle(connection)

    monkeypatch.setattr(vector_feed, "record", held)
    monkeypatch.setattr(native_vectors, "create_table", then_append)
    monkeypatch.setattr(native_vectors, "settle", releasing)
    vectors = backend(store).vectors
    assert isinstance(vectors, native_vectors.GraphVectors)
    async with backend(store).pool.acquire() as connection:
        await vectors.rebuild(connection, replace=True, build=True)
    message = await appended[0]
    assert await graph_count(store) == await vector_count(store, embedder.name) == 11
    [hit] = await store.search("alpha beta gamma delta appended", k=1)
    assert hit.message.id == message.id
    assert graph.answers == [True]
