"""The PostgreSQL schema: migrations recorded in the store's schema and applied once,
a newer schema refused, the upgrade to schema 3 (metadata values indexed by
SHA-256), stores connecting at once, and schemas as separate stores."""

from __future__ import annotations

import asyncio

import pytest

import convostore
from convostore import SchemaVersionError, Store
from convostore.embedding import HashingEmbedder
from tests.backends.support import missing_driver
from tests.servers.postgresql import TestServer

if skip_reason := missing_driver("psycopg", "postgresql"):
    pytest.skip(skip_reason, allow_module_level=True)

import psycopg

from convostore.backends.postgresql import SCHEMA_VERSION
from convostore.backends.postgresql import schema as pg_schema
from convostore.backends.postgresql.statements import STATEMENTS as PG_STATEMENTS
from convostore.backends.postgresql.statements import VALUE_DIGEST
from tests.backends.postgresql.support import ADA, BOB, Stores, admin_rows, pg_of, say

WRITERS = 8


async def test_migrations_are_recorded_in_the_store_schema(
    server: TestServer, store: Store
) -> None:
    schema = pg_of(store).target.schema
    versions = await admin_rows(
        server,
        psycopg.sql.SQL("SELECT version FROM {} ORDER BY version").format(
            psycopg.sql.Identifier(schema, "convostore_schema")
        ),
    )
    assert [v for (v,) in versions] == list(range(1, SCHEMA_VERSION + 1))
    tables = await admin_rows(
        server, "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", schema
    )
    assert {"users", "sessions", "events", "vector_index"} <= {t for (t,) in tables}


async def test_reconnecting_applies_nothing_twice_and_keeps_data(stores: Stores) -> None:
    first = await stores.open()
    session = await first.create_session(ADA)
    await first.add_message(session.id, say("kept"))
    again = await stores.open()
    assert [m.content for m in await again.messages(session.id)] == ["kept"]


async def test_a_newer_schema_is_refused_before_anything_is_written(
    server: TestServer, stores: Stores
) -> None:
    store = await stores.open()
    await store.close()
    schema_table = psycopg.sql.Identifier(stores.schema, "convostore_schema")
    await admin_rows(
        server,
        psycopg.sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(schema_table),
        SCHEMA_VERSION + 1,
    )
    with pytest.raises(SchemaVersionError, match=f"version {SCHEMA_VERSION + 1}"):
        await convostore.connect(stores.url(), indexed_metadata=["tenant"])
    keys = await admin_rows(
        server,
        psycopg.sql.SQL("SELECT count(*) FROM {}").format(
            psycopg.sql.Identifier(stores.schema, "indexed_metadata_keys")
        ),
    )
    assert keys == [(0,)]


async def test_schema_3_indexes_metadata_values_by_sha256_and_upgrades_a_database(
    server: TestServer, stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIPS-mode server refuses md5(): an existing database at schema version 2 (values
    indexed by MD5) is upgraded at connect, its entries kept and found by SHA-256."""
    with monkeypatch.context() as old_code:
        old_code.setattr(pg_schema, "MIGRATIONS", pg_schema.MIGRATIONS[:2])
        old_code.setattr(pg_schema, "SCHEMA_VERSION", 2)
        # The lookups of the code that wrote version 2.
        old_code.setattr(
            PG_STATEMENTS,
            "sessions_by_metadata",
            PG_STATEMENTS.sessions_by_metadata.replace(VALUE_DIGEST + "(", "md5("),
        )
        old = await stores.open(indexed_metadata=["tenant"])
        shared = "v" * 3000
        long_a = await old.create_session(ADA, metadata={"tenant": shared + "a"})
        long_b = await old.create_session(ADA, metadata={"tenant": shared + "b"})
        short = await old.create_session(ADA, metadata={"tenant": "acme"})
        assert await old.find_sessions_by_metadata("tenant", shared + "a") == [long_a]
        await old.close()
    index_query = (
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s"
        " AND indexname = 'session_metadata_by_value'"
    )
    [(before,)] = await admin_rows(server, index_query, stores.schema)
    assert "md5(value)" in before

    upgraded = await stores.open()
    [(after,)] = await admin_rows(server, index_query, stores.schema)
    assert "md5" not in after
    assert f"{VALUE_DIGEST}(value)" in after
    versions = await admin_rows(
        server,
        psycopg.sql.SQL("SELECT version FROM {} ORDER BY version").format(
            psycopg.sql.Identifier(stores.schema, "convostore_schema")
        ),
    )
    assert [v for (v,) in versions] == [1, 2, 3]
    assert await upgraded.find_sessions_by_metadata("tenant", shared + "a") == [long_a]
    assert await upgraded.find_sessions_by_metadata("tenant", shared + "b") == [long_b]
    assert await upgraded.find_sessions_by_metadata("tenant", "acme") == [short]
    assert await upgraded.find_sessions_by_metadata("tenant", shared) == []
    later = await upgraded.create_session(BOB, metadata={"tenant": shared + "a"})
    assert await upgraded.find_sessions_by_metadata("tenant", shared + "a") == [long_a, later]
    # No statement the store runs names md5() any more.
    assert "md5(" not in PG_STATEMENTS.sessions_by_metadata
    # The lookup walks the digest index.
    async with await psycopg.AsyncConnection.connect(server.url(), autocommit=True) as conn:
        await conn.execute(
            psycopg.sql.SQL("SET search_path = {}").format(psycopg.sql.Identifier(stores.schema))
        )
        await conn.execute("SET enable_seqscan = off")
        plan = await conn.execute(
            f"EXPLAIN SELECT session_id FROM session_metadata WHERE name = 'tenant'"
            f" AND {VALUE_DIGEST}(value) = {VALUE_DIGEST}('acme')"
        )
        assert "session_metadata_by_value" in "\n".join(row[0] for row in await plan.fetchall())


async def test_stores_connecting_at_once_migrate_once(server: TestServer, stores: Stores) -> None:
    opened = await asyncio.gather(
        *(stores.open(embedder=HashingEmbedder(16)) for _ in range(WRITERS))
    )
    assert len(opened) == WRITERS
    versions = await admin_rows(
        server,
        psycopg.sql.SQL("SELECT count(*) FROM {}").format(
            psycopg.sql.Identifier(stores.schema, "convostore_schema")
        ),
    )
    assert versions == [(SCHEMA_VERSION,)]


async def test_schemas_on_one_database_are_separate_stores(server: TestServer) -> None:
    one, other = Stores(server), Stores(server)
    try:
        mine = await one.open()
        theirs = await other.open()
        session = await mine.create_session(ADA, session_id="shared-name")
        assert await theirs.get_session("shared-name") is None
        await theirs.create_session(BOB, session_id="shared-name")
        assert await mine.get_session(session.id) == session
    finally:
        await one.close()
        await other.close()
