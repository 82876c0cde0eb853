"""What is the Neo4j backend's own: its URLs, the schema it creates in a database, the
graph a user's own Cypher walks. What every backend does is the contract suite's
(tests/contract: test_crash.py kills its server during appends)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import convostore
from convostore import (
    BackendUnavailableError,
    InvalidArgumentError,
    Store,
)
from convostore.embedding import HashingEmbedder
from tests.backends.graphs import ADA, NEO4J, backend_of, store

NEO4J.skip_without_driver(module=True)

from convostore.backends.neo4j import SCHEMA_VERSION, Neo4jBackend, parse_neo4j_url  # noqa: E402

__all__ = ["store"]


url = NEO4J.url_fixture()


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


async def test_a_wrong_password_is_backend_unavailable(url: str) -> None:
    parts = url.split("@", 1)
    with pytest.raises(BackendUnavailableError):
        await convostore.connect(f"neo4j://neo4j:wrong@{parts[1]}")


async def test_bolt_and_routing_urls_reach_the_same_database(url: str) -> None:
    async with await convostore.connect(url) as routed:
        session = await routed.create_session(ADA)
    async with await convostore.connect(url.replace("neo4j://", "bolt://", 1)) as direct:
        assert await direct.get_session(session.id) == session


def test_memgraph_stays_reserved() -> None:
    with pytest.raises(BackendUnavailableError):
        asyncio.run(convostore.connect("memgraph://h/db"))


# ---------------------------------------------------------------------------- schema


async def _rows(store: Store, query: str, **parameters: Any) -> list[list[Any]]:
    return await backend_of(store, Neo4jBackend)._run(query, dict(parameters), write=False)


async def test_connect_makes_ids_unique_and_every_index_online(url: str) -> None:
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
