"""PostgreSQL without superuser rights: a database without pgvector (everything but
vector search works), and a role that only reads and writes a migrated schema."""

from __future__ import annotations

import logging
import os

import pytest

import convostore
from convostore import BackendUnavailableError
from convostore.embedding import HashingEmbedder, VectorIndexSpec
from tests.backends.support import missing_driver
from tests.servers.postgresql import PostgresServer, TestServer

if skip_reason := missing_driver("psycopg", "postgresql"):
    pytest.skip(skip_reason, allow_module_level=True)

import psycopg

from tests.backends.postgresql.support import ADA, Stores, _schemas, admin_rows, say


@pytest.fixture
async def plain_database(server: TestServer) -> str:
    """A database owned by a role that is not a superuser: it may create schemas and
    tables, not the (untrusted) vector extension."""
    if not isinstance(server, PostgresServer):
        pytest.skip("needs a server of the test's own to create roles on")
    suffix = f"{os.getpid()}_{next(_schemas)}"
    role, database = f"plain_{suffix}", f"plain_{suffix}"
    await admin_rows(
        server, psycopg.sql.SQL("CREATE ROLE {} LOGIN").format(psycopg.sql.Identifier(role))
    )
    await admin_rows(
        server,
        psycopg.sql.SQL("CREATE DATABASE {} OWNER {}").format(
            psycopg.sql.Identifier(database), psycopg.sql.Identifier(role)
        ),
    )
    return server.url(database, user=role) + "?schema=chat"


async def test_without_pgvector_everything_but_vector_search_works(
    plain_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="convostore.postgresql"):
        store = await convostore.connect(plain_database, embedder=HashingEmbedder(16))
    try:
        assert "CREATE EXTENSION vector" in caplog.text
        assert not store.capabilities.native_vector_index
        assert store.vector_index == VectorIndexSpec(16, "cosine", "hashing-embedder-16")
        session = await store.create_session(ADA)
        message = await store.add_message(session.id, say("router password reset"))
        assert message.embedding is not None
        [stored] = await store.messages(session.id)
        assert stored.embedding == message.embedding
        assert [h.message.id for h in await store.search("router", mode="text")] == [message.id]
        with pytest.raises(BackendUnavailableError, match="extension 'vector'"):
            await store.search("router password", mode="vector")
        with pytest.raises(BackendUnavailableError, match="pgvector"):
            await store.search("router password", mode="hybrid")
    finally:
        await store.close()


async def test_a_role_that_only_reads_and_writes_connects_to_a_migrated_schema(
    server: TestServer, stores: Stores
) -> None:
    """The owner migrates and builds the index; an application role with USAGE on the
    schema and DML on its tables then connects, writes and searches, creating nothing."""
    if not isinstance(server, PostgresServer):
        pytest.skip("needs a server of the test's own to create roles on")
    owner_store = await stores.open(embedder=HashingEmbedder(16))
    await owner_store.close()
    role = f"app_{os.getpid()}_{next(_schemas)}"
    identifier = psycopg.sql.Identifier
    for statement in (
        "CREATE ROLE {role} LOGIN",
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
    ):
        await admin_rows(
            server,
            psycopg.sql.SQL(statement).format(
                role=identifier(role), schema=identifier(stores.schema)
            ),
        )
    url = server.url(user=role) + f"?schema={stores.schema}"
    store = await convostore.connect(url, embedder=HashingEmbedder(16), indexed_metadata=[])
    try:
        session = await store.create_session(ADA, metadata={"k": "v"})
        await store.add_message(session.id, say("router password reset"))
        [hit] = await store.search("router password", k=1)
        assert hit.message.content == "router password reset"
        assert await store.delete_session(session.id)
    finally:
        await store.close()
