"""The indexes PostgreSQL searches walk: pgvector's HNSW index (its width, metric and
model, recreated by a re-embed, kept on drift), the GIN text index, the terms a text
search looks for, and the collation of the text filter."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest

import convostore
from convostore import Store
from convostore.embedding import HashingEmbedder, VectorIndexSpec
from tests.backends.support import missing_driver
from tests.servers.postgresql import TestServer

if skip_reason := missing_driver("psycopg", "postgresql"):
    pytest.skip(skip_reason, allow_module_level=True)

from convostore.backends.postgresql import search as pg_search
from convostore.backends.postgresql.rows import search_terms
from tests.backends.postgresql.support import ADA, BOB, Stores, admin_rows, pg_of, say


async def hnsw_definition(server: TestServer, schema: str) -> str | None:
    rows = await admin_rows(
        server,
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
        schema,
        pg_search.HNSW_INDEX,
    )
    return rows[0][0] if rows else None


class EuclideanEmbedder(HashingEmbedder):
    metric = "euclidean"


async def test_the_hnsw_index_has_the_embedders_width_and_metric(
    server: TestServer, stores: Stores
) -> None:
    embedder = HashingEmbedder(48)
    store = await stores.open(embedder=embedder)
    definition = await hnsw_definition(server, stores.schema)
    assert definition is not None
    assert "USING hnsw" in definition
    assert "vector(48)" in definition
    assert "vector_cosine_ops" in definition
    assert f"embedding_model = '{embedder.name}'::text" in definition
    assert store.capabilities.native_vector_index
    # Idempotent: connecting again changes nothing.
    await stores.open(embedder=HashingEmbedder(48))
    assert await hnsw_definition(server, stores.schema) == definition


async def test_a_euclidean_embedder_gets_the_l2_operator_class(
    server: TestServer, stores: Stores
) -> None:
    await stores.open(embedder=EuclideanEmbedder(24))
    definition = await hnsw_definition(server, stores.schema)
    assert definition is not None
    assert "vector(24)" in definition
    assert "vector_l2_ops" in definition


async def test_a_model_name_is_a_quoted_literal_in_the_index(
    server: TestServer, stores: Stores
) -> None:
    embedder = HashingEmbedder(16)
    embedder.name = "it's'); DROP TABLE events; --"
    store = await stores.open(embedder=embedder)
    session = await store.create_session(ADA)
    await store.add_message(session.id, say("still here"))
    assert (await store.search("still here", k=1))[0].message.content == "still here"
    definition = await hnsw_definition(server, stores.schema)
    assert definition is not None
    assert "'it''s''); DROP TABLE events; --'::text" in definition


async def test_reembed_recreates_the_index_for_the_new_model(
    server: TestServer, stores: Stores
) -> None:
    store = await stores.open(embedder=HashingEmbedder(48))
    session = await store.create_session(ADA)
    for text in ["router reset", "capital of France", "lentil curry"]:
        await store.add_message(session.id, say(text))
    report = await store.reembed(HashingEmbedder(32))
    assert report.index_recreated
    assert report.messages == 3
    definition = await hnsw_definition(server, stores.schema)
    assert definition is not None
    assert "vector(32)" in definition
    assert "hashing-embedder-32" in definition
    assert await store.backend.vector_index_spec() == VectorIndexSpec(
        32, "cosine", "hashing-embedder-32"
    )
    hits = await store.search("capital of France", k=1)
    assert hits[0].message.content == "capital of France"
    # A rerun with the same model keeps the index and touches nothing.
    again = await store.reembed()
    assert (again.messages, again.index_recreated) == (0, False)


async def test_drift_is_reported_and_the_index_kept(server: TestServer, stores: Stores) -> None:
    await stores.open(embedder=HashingEmbedder(48))
    narrow = await stores.open(embedder=HashingEmbedder(16))
    assert narrow.vector_index_drift is not None
    definition = await hnsw_definition(server, stores.schema)
    assert definition is not None
    assert "vector(48)" in definition


async def explain(store: Store, statement: str, parameters: dict[str, Any]) -> str:
    async with pg_of(store).pool.connection() as connection:
        cursor = await connection.execute("EXPLAIN " + statement, parameters, prepare=False)
        return "\n".join(row[0] for row in await cursor.fetchall())


async def seed_many(store: Store, sessions: int, per_session: int) -> list[str]:
    """Sessions of Ada's and Bob's with ``per_session`` messages each, in batches."""
    words = ["router", "password", "capital", "france", "lentil", "spinach", "cumin", "paris"]
    ids = []
    for number in range(sessions):
        owner = ADA if number % 2 else BOB
        session = await store.create_session(owner)
        ids.append(session.id)
        writes = [
            say(f"{words[(number + i) % 8]} {words[(i * 3) % 8]} message {number} {i}")
            for i in range(per_session)
        ]
        # A rare word, as most words a search looks for are.
        writes[0] = say(f"saffron lentil rice {number}")
        await store.append_events(session.id, writes, 0)
    async with pg_of(store).pool.connection() as connection:
        await connection.execute("ANALYZE events")
        await connection.execute("ANALYZE sessions")
    return ids


async def test_vector_search_walks_the_hnsw_index(stores: Stores) -> None:
    embedder = HashingEmbedder(32)
    store = await stores.open(embedder=embedder)
    await seed_many(store, sessions=20, per_session=100)
    vector = await embedder.embed(["router password"])
    for owner in (False, True):
        statement = pg_search.vector_search_sql("cosine", 32, True, owner, False, False)
        plan = await explain(
            store,
            statement,
            {"vector": pg_search._query_vector(vector[0]), "model": embedder.name, "k": 10}
            | {"owner_id": "ada", "session_id": None, "roles": None},
        )
        assert f"Index Scan using {pg_search.HNSW_INDEX}" in plan, plan
    hits = await store.search("router password", owner_id="ada", k=10)
    assert len(hits) == 10
    assert all(hit.message.content.startswith(("router", "password")) for hit in hits[:2])


async def test_a_filtered_vector_search_still_returns_k_hits(stores: Stores) -> None:
    """pgvector's iterative scan walks on past ef_search until the owner filter lets k
    rows through."""
    store = await stores.open(embedder=HashingEmbedder(32), url_options={"ef_search": 10})
    await seed_many(store, sessions=20, per_session=50)
    hits = await store.search("capital france", owner_id="ada", k=200)
    assert len(hits) == 200
    assert {hit.message.session_id for hit in hits} <= {
        s.id for s in (await store.list_sessions("ada", convostore.PageRequest(100))).items
    }


async def test_text_search_walks_the_gin_index(stores: Stores) -> None:
    store = await stores.open()
    await seed_many(store, sessions=20, per_session=100)
    for owner in (False, True):
        plan = await explain(
            store,
            pg_search.text_search_sql(owner, False, False),
            {
                "query": "'saffron' & 'lentil'",
                "terms": ["saffron", "lentil"],
                "owner_id": "ada",
                "session_id": None,
                "roles": None,
                "k": 10,
            },
        )
        assert "events_search" in plan, plan
    hits = await store.search("LENTIL cumin", k=5)
    assert len(hits) == 5
    assert all({"lentil", "cumin"} <= set(hit.message.content.split()) for hit in hits)


def test_search_terms_are_the_words_every_backend_sees() -> None:
    terms, length = search_terms("Café au LAIT, café! l'été straße")
    assert terms is not None
    assert set(re.findall(r"'([^']+)'", terms)) == {"cafe", "au", "lait", "l", "ete", "strasse"}
    assert "'cafe':1,2" in terms
    assert length == 7
    assert search_terms("  ...  ") == (None, None)
    huge, _ = search_terms("x" * 5000 + " short")
    assert huge == "'short':1"


def test_blank_is_what_str_isspace_says() -> None:
    whitespace = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace())
    assert whitespace == pg_search.PYTHON_WHITESPACE


async def test_the_text_filter_uses_a_collation_that_maps_case_fully(
    store: Store,
) -> None:
    """PostgreSQL 18's pg_unicode_fast lowers as str.lower() does; the contract suite's
    text-filter tests hold every backend to that."""
    assert pg_of(store).facts.text_collation == "pg_unicode_fast"
