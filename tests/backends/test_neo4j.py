"""What is the Neo4j backend's own: its URLs, the schema it creates in a database, the
graph a user's own Cypher walks, and a server killed during appends and restarted from
its files. What every backend does is the contract suite's (tests/contract)."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import convostore
from convostore import (
    BackendUnavailableError,
    InvalidArgumentError,
    MessageWrite,
    Role,
    SchemaVersionError,
    Store,
    User,
)
from convostore.embedding import HashingEmbedder
from tests.backends.support import missing_driver, server_unavailable

if skip_reason := missing_driver("neo4j", "neo4j"):
    pytest.skip(skip_reason, allow_module_level=True)

from convostore.backends.neo4j import SCHEMA_VERSION, Neo4jBackend, parse_neo4j_url
from tests.servers.neo4j import Neo4jServer, ServerUnavailable, TestServer, shared_server, wipe

ADA = User("ada", "Ada")
PLANNER = User("planner", "Planner", kind="agent")


@pytest.fixture(scope="module")
def server() -> TestServer:
    try:
        return shared_server()
    except ServerUnavailable as why:
        server_unavailable("neo4j", str(why))
        raise


def neo4j_of(store: Store) -> Neo4jBackend:
    assert isinstance(store.backend, Neo4jBackend)
    return store.backend


@pytest.fixture
def url(server: TestServer) -> str:
    url = server.url()
    wipe(url)
    return url


@pytest.fixture
async def store(url: str) -> AsyncIterator[Store]:
    opened = await convostore.connect(url)
    yield opened
    await opened.close()


@pytest.fixture
def own_server() -> Iterator[Neo4jServer]:
    """A server of this test's own, which it may kill."""
    server = Neo4jServer()
    try:
        server.start()
    except ServerUnavailable as why:
        server_unavailable("neo4j", str(why))
    yield server
    server.stop()


# ---------------------------------------------------------------------------- URLs


def test_url_defaults_and_parts() -> None:
    target = parse_neo4j_url("neo4j://db.internal")
    assert (target.scheme, target.host, target.port, target.database, target.username) == (
        "neo4j",
        "db.internal",
        7687,
        None,
        None,
    )
    target = parse_neo4j_url(
        "bolt+s://chat:s%40cret@db.internal:7688/chat.prod?pool_max_size=4&pool_timeout=5"
        "&connect_timeout=2&retry_time=7"
    )
    assert (target.uri, target.database, target.username, target.password) == (
        "bolt+s://db.internal:7688",
        "chat.prod",
        "chat",
        "s@cret",
    )
    assert (target.pool_max_size, target.pool_timeout, target.connect_timeout) == (4, 5.0, 2.0)
    assert target.retry_time == 7.0
    assert parse_neo4j_url("neo4j+s://u@h/neo4j").password == ""
    assert "s@cret" not in target.where
    assert "s@cret" not in repr(target)


@pytest.mark.parametrize(
    "bad",
    [
        "neo4j://h/bad_name",
        "neo4j://h/ab",
        "neo4j://h/db?pool_max_size=0",
        "neo4j://h/db?pool_timeout=never",
        "neo4j://h/db?unknown=1",
        "neo4j://h:notaport/db",
        "neo4j://:secret@h/db",
        "neo4j+ssc://h/db",
    ],
)
def test_bad_urls_are_refused(bad: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_neo4j_url(bad)


def test_every_scheme_names_the_backend() -> None:
    from convostore.backends.registry import backend_for

    for scheme in ("neo4j", "neo4j+s", "bolt", "bolt+s"):
        assert backend_for(f"{scheme}://h/db") is Neo4jBackend


async def test_an_unreachable_server_is_backend_unavailable() -> None:
    with pytest.raises(BackendUnavailableError):
        await convostore.connect("bolt://127.0.0.1:1/neo4j?connect_timeout=2")


async def test_a_wrong_password_is_backend_unavailable(server: TestServer) -> None:
    parts = server.url().split("@", 1)
    with pytest.raises(BackendUnavailableError):
        await convostore.connect(f"neo4j://neo4j:wrong@{parts[1]}")


async def test_bolt_and_routing_urls_reach_the_same_database(url: str) -> None:
    async with await convostore.connect(url) as routed:
        session = await routed.create_session(ADA)
    async with await convostore.connect(url.replace("neo4j://", "bolt://", 1)) as direct:
        assert await direct.get_session(session.id) == session


def test_a_missing_driver_names_the_extra() -> None:
    script = (
        "import asyncio, sys\n"
        "sys.modules['neo4j'] = None\n"
        "import convostore\n"
        "try:\n"
        "    asyncio.run(convostore.connect('neo4j://h/neo4j'))\n"
        "except convostore.BackendUnavailableError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'convostore[neo4j]'" in result.stdout


def test_memgraph_stays_reserved() -> None:
    with pytest.raises(BackendUnavailableError):
        asyncio.run(convostore.connect("memgraph://h/db"))


# ---------------------------------------------------------------------------- schema


async def _rows(store: Store, query: str, **parameters: Any) -> list[list[Any]]:
    return await neo4j_of(store)._run(query, dict(parameters), write=False)


async def test_connect_creates_the_schema_once(url: str) -> None:
    first = await convostore.connect(url, embedder=HashingEmbedder(16))
    second = await convostore.connect(url, embedder=HashingEmbedder(16))
    try:
        constraints = await _rows(
            first, "SHOW CONSTRAINTS YIELD labelsOrTypes, properties, type RETURN *"
        )
        unique = {(c[0][0], c[1][0]) for c in constraints if "UNIQUE" in str(c[2])}
        assert {("User", "id"), ("Session", "id"), ("Event", "id")} <= unique
        indexes = await _rows(
            first,
            "SHOW INDEXES YIELD labelsOrTypes, properties, type, state"
            " WHERE labelsOrTypes IS NOT NULL RETURN labelsOrTypes[0], properties[0], type, state",
        )
        found = {(label, prop, kind) for label, prop, kind, _ in indexes}
        assert ("Event", "seq", "RANGE") in found
        assert ("Session", "owner_id", "RANGE") in found
        assert ("Message", "search_text", "FULLTEXT") in found
        assert ("Message", "embedding", "VECTOR") in found
        assert all(state == "ONLINE" for *_, state in indexes)
        [[version]] = await _rows(first, "MATCH (c:ConvostoreSchema) RETURN c.version")
        assert version == SCHEMA_VERSION
    finally:
        await first.close()
        await second.close()


async def test_a_newer_schema_is_refused(store: Store, url: str) -> None:
    await neo4j_of(store)._run(
        "MATCH (c:ConvostoreSchema) SET c.version = $version",
        {"version": SCHEMA_VERSION + 1},
        write=True,
    )
    with pytest.raises(SchemaVersionError):
        await convostore.connect(url)


async def test_a_new_width_rebuilds_the_vector_index_and_keeps_every_vector(url: str) -> None:
    store = await convostore.connect(url, embedder=HashingEmbedder(16))
    session = await store.create_session(ADA)
    await store.add_message(session.id, MessageWrite(Role.USER, "router reset", author=ADA))
    await store.reembed(HashingEmbedder(32))
    options = await _rows(
        store,
        "SHOW VECTOR INDEXES YIELD options, state RETURN options.indexConfig, state",
    )
    assert [(o["vector.dimensions"], state) for o, state in options] == [(32, "ONLINE")]
    [hit] = await store.search("router reset", k=1)
    assert hit.message.embedding is not None
    assert len(hit.message.embedding) == 32
    await store.close()


# ---------------------------------------------------------------------------- graph model


async def test_the_graph_answers_a_users_own_cypher(store: Store) -> None:
    session = await store.create_session(ADA, title="Launch")
    first = await store.add_message(
        session.id, MessageWrite(Role.USER, "Launch in March?", author=ADA, recipients=[PLANNER])
    )
    await store.add_message(
        session.id,
        MessageWrite(
            Role.ASSISTANT, "Checking", author=PLANNER, recipients=[ADA], in_reply_to=first.id
        ),
    )
    rows = await _rows(
        store,
        "MATCH (s:Session {id: $id})-[h:HAS_EVENT]->(m:Message)-[:AUTHOR]->(a:User)"
        " OPTIONAL MATCH (m)-[:IN_REPLY_TO]->(r) RETURN a.id, m.content, r.id ORDER BY h.seq",
        id=session.id,
    )
    assert rows == [["ada", "Launch in March?", None], ["planner", "Checking", first.id]]
    # A lock leaves no property behind.
    [[keys]] = await _rows(store, "MATCH (s:Session {id: $id}) RETURN keys(s)", id=session.id)
    assert not any("lock" in key for key in keys)


# ---------------------------------------------------------------------------- a lost server


async def test_killed_during_appends_every_acknowledged_append_survives(
    own_server: Neo4jServer,
) -> None:
    # Transactions are not tried again for long once the server is gone.
    store = await convostore.connect(own_server.url() + "?retry_time=1&connect_timeout=2")
    session = await store.create_session(ADA)
    acknowledged: list[str] = []
    enough = asyncio.Event()

    async def writer(index: int) -> None:
        for n in itertools.count():
            message = await store.add_message(
                session.id, MessageWrite(Role.USER, f"{index}-{n} " * 20, author=ADA)
            )
            acknowledged.append(message.id)
            if len(acknowledged) >= 60:
                enough.set()

    writers = [asyncio.create_task(writer(i)) for i in range(4)]
    await enough.wait()
    own_server.kill()
    killed = time.monotonic()
    results = await asyncio.gather(*writers, return_exceptions=True)
    assert all(isinstance(r, BackendUnavailableError) for r in results), results
    await store.close()
    print(f"writers ended {time.monotonic() - killed:.1f} s after the kill")

    own_server.start()
    print(f"restarted from the directory in {own_server.started_in:.1f} s")
    async with await convostore.connect(own_server.url()) as reopened:
        log = await reopened.messages(session.id)
        stored = {event.id: event for event in log}
        assert set(acknowledged) <= set(stored)
        # Nothing half-written: every event whole, seq gap-free, the version agrees.
        assert [event.seq for event in log] == list(range(1, len(log) + 1))
        assert await reopened.version(session.id) == len(log)
        assert all(event.content and event.content.count(" ") == 20 for event in log)
        again = await reopened.add_message(session.id, MessageWrite(Role.USER, "after", author=ADA))
        assert again.seq == len(log) + 1
