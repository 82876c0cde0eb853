"""What the graph backends (FalkorDB and Neo4j) have alike beyond the contract, tested
once on both: the schema a connect creates in a graph (its indexes, found by the
backend's own inventory), a newer schema refused, the graph model a user's own Cypher
walks, an unreachable server, and a missing driver naming its extra. What is one
server's own stays in test_falkordb.py and test_neo4j.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

import convostore
from convostore import BackendUnavailableError, MessageWrite, Role, SchemaVersionError, Store
from convostore.embedding import HashingEmbedder
from tests.backends.graphs import (
    ADA,
    BACKENDS,
    PLANNER,
    GraphBackend,
    cypher_of,
    rows_of,
    store,
)

__all__ = ["store"]


@pytest.fixture(params=BACKENDS, ids=[b.name for b in BACKENDS])
def graph(request: pytest.FixtureRequest) -> GraphBackend:
    backend: GraphBackend = request.param
    backend.skip_without_driver()
    return backend


@pytest.fixture
def url(graph: GraphBackend) -> str:
    return graph.url()


# ---------------------------------------------------------------------------- reaching it


async def test_an_unreachable_server_is_backend_unavailable(graph: GraphBackend) -> None:
    with pytest.raises(BackendUnavailableError):
        await convostore.connect(graph.unreachable)


def test_a_missing_driver_names_the_extra(graph: GraphBackend) -> None:
    script = (
        "import asyncio, sys\n"
        f"sys.modules[{graph.module!r}] = None\n"
        "import convostore\n"
        "try:\n"
        f"    asyncio.run(convostore.connect({graph.unreachable!r}))\n"
        "except convostore.BackendUnavailableError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert f"pip install 'convostore[{graph.name}]'" in result.stdout


# ---------------------------------------------------------------------------- schema


async def test_connect_creates_the_schema_once(url: str) -> None:
    first = await convostore.connect(url, embedder=HashingEmbedder(16))
    second = await convostore.connect(url, embedder=HashingEmbedder(16))
    try:
        backend = cypher_of(first)
        inventory = await backend._inventory()
        wanted = {key for _, statements in backend.migrations for key, _ in statements}
        assert wanted <= inventory.keys
        assert inventory.vector_shape == (16, "cosine")
        [[version]] = await rows_of(first, "MATCH (c:ConvostoreSchema) RETURN c.version")
        assert version == len(backend.migrations)
    finally:
        await first.close()
        await second.close()


async def test_a_newer_schema_is_refused(store: Store, url: str) -> None:
    await cypher_of(store)._run(
        "MATCH (c:ConvostoreSchema) SET c.version = $version",
        {"version": len(cypher_of(store).migrations) + 1},
        write=True,
    )
    with pytest.raises(SchemaVersionError):
        await convostore.connect(url)


async def test_a_new_width_rebuilds_the_vector_index_and_keeps_every_vector(url: str) -> None:
    store = await convostore.connect(url, embedder=HashingEmbedder(16))
    try:
        session = await store.create_session(ADA)
        await store.add_message(session.id, MessageWrite(Role.USER, "router reset", author=ADA))
        await store.reembed(HashingEmbedder(32))
        inventory = await cypher_of(store)._inventory()
        assert inventory.vector_shape == (32, "cosine")
        [hit] = await store.search("router reset", k=1)
        assert hit.message.embedding is not None
        assert len(hit.message.embedding) == 32
    finally:
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
    other = await store.create_session(ADA)
    await store.add_message(other.id, MessageWrite(Role.USER, "hello", author=ADA))
    # Every session where an agent was a recipient.
    rows = await rows_of(
        store,
        "MATCH (s:Session)-[:HAS_EVENT]->(:Message)-[:RECIPIENT]->(u:User {kind: 'agent'})"
        " RETURN DISTINCT s.id",
    )
    assert rows == [[session.id]]
    # The conversation in order, with authors and replies.
    rows = await rows_of(
        store,
        "MATCH (s:Session {id: $id})-[h:HAS_EVENT]->(m:Message)-[:AUTHOR]->(a:User)"
        " OPTIONAL MATCH (m)-[:IN_REPLY_TO]->(r) RETURN a.id, m.content, r.id ORDER BY h.seq",
        id=session.id,
    )
    assert rows == [["ada", "Launch in March?", None], ["planner", "Checking", first.id]]
    rows = await rows_of(store, "MATCH (s:Session)-[:OWNER]->(:User {id: 'ada'}) RETURN count(s)")
    assert rows == [[2]]
    # A lock (where writes take one) leaves no property behind.
    [[keys]] = await rows_of(store, "MATCH (s:Session {id: $id}) RETURN keys(s)", id=session.id)
    assert not any("lock" in key for key in keys)
