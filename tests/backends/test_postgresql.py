"""What is the PostgreSQL backend's own: its URLs, schema and migrations, prepared
statements and round trips, the HNSW and GIN indexes its searches walk, life without
pgvector, a lost server, and stores on separate connections racing. What every backend
does is the contract suite's (tests/contract)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

import convostore
import convostore.prepare
from convostore import (
    BackendUnavailableError,
    EventFilter,
    InvalidArgumentError,
    MessageWrite,
    Role,
    SchemaVersionError,
    Store,
    User,
)
from convostore.embedding import HashingEmbedder, VectorIndexSpec
from tests.backends.faults import appends_survive_a_restart, the_pool_recovers
from tests.backends.support import missing_driver, server_unavailable
from tests.servers.postgresql import (
    PostgresServer,
    ServerUnavailable,
    TestServer,
    shared_server,
    stop_shared_server,
)

if skip_reason := missing_driver("psycopg", "postgresql"):
    pytest.skip(skip_reason, allow_module_level=True)

import psycopg
from psycopg.pq import Trace

from convostore.backends.postgresql import (
    SCHEMA_VERSION,
    PostgreSQLBackend,
    PostgreSQLTarget,
    parse_postgresql_url,
)
from convostore.backends.postgresql import schema as pg_schema
from convostore.backends.postgresql import search as pg_search
from convostore.backends.postgresql.rows import search_terms
from convostore.backends.postgresql.statements import STATEMENTS as PG_STATEMENTS
from convostore.backends.postgresql.statements import VALUE_DIGEST

ADA = User("ada", "Ada")
BOB = User("bob", "Bob")
WRITERS = 8


@pytest.fixture(scope="session")
def server() -> Iterator[TestServer]:
    try:
        started = shared_server()
    except ServerUnavailable as why:
        server_unavailable("postgresql", str(why))
        raise AssertionError("unreachable") from why
    yield started
    stop_shared_server()


_schemas = itertools.count(1)


def fresh_schema() -> str:
    return f"backend_{os.getpid()}_{next(_schemas)}"


def store_url(server: TestServer, schema: str, **options: object) -> str:
    url = server.url()
    query = "&".join([f"schema={schema}", *(f"{k}={v}" for k, v in options.items())])
    return f"{url}{'&' if '?' in url else '?'}{query}"


class Stores:
    """Opens stores on one fresh schema and closes them all at teardown."""

    def __init__(self, server: TestServer) -> None:
        self.server = server
        self.schema = fresh_schema()
        self.opened: list[Store] = []

    def url(self, **options: object) -> str:
        return store_url(self.server, self.schema, **options)

    async def open(self, **options: Any) -> Store:
        url_options = options.pop("url_options", {})
        store = await convostore.connect(self.url(**url_options), **options)
        assert isinstance(store.backend, PostgreSQLBackend)
        self.opened.append(store)
        return store

    async def close(self) -> None:
        for store in reversed(self.opened):
            await store.close()


@pytest.fixture
async def stores(server: TestServer) -> AsyncIterator[Stores]:
    opened = Stores(server)
    yield opened
    await opened.close()


@pytest.fixture
async def store(stores: Stores) -> Store:
    return await stores.open()


def pg_of(store: Store) -> PostgreSQLBackend:
    """The PostgreSQL backend under ``store`` (its pool, target and server facts)."""
    assert isinstance(store.backend, PostgreSQLBackend)
    return store.backend


async def admin_rows(server: TestServer, statement: Any, *parameters: Any) -> list[Any]:
    """Rows read by a superuser connection of the test's own, outside any store."""
    async with await psycopg.AsyncConnection.connect(server.url(), autocommit=True) as conn:
        cursor = await conn.execute(statement, parameters or None)
        return await cursor.fetchall() if cursor.description else []


def say(content: str, **options: Any) -> MessageWrite:
    return MessageWrite(Role.USER, content, **options)


# ------------------------------------------------------------------ URLs


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://u@h/db",
            PostgreSQLTarget("postgresql://u@h/db?application_name=convostore"),
        ),
        (
            "postgres://u:pw@h:5433/db?schema=chat_2&sslmode=require",
            PostgreSQLTarget(
                "postgresql://u:pw@h:5433/db?sslmode=require&application_name=convostore",
                schema="chat_2",
            ),
        ),
        (
            "postgresql+psycopg://h/db?pool_min_size=0&pool_max_size=3&pool_timeout=2.5"
            "&ef_search=40&application_name=mine",
            PostgreSQLTarget(
                "postgresql://h/db?application_name=mine",
                pool_min_size=0,
                pool_max_size=3,
                pool_timeout=2.5,
                ef_search=40,
            ),
        ),
    ],
)
def test_urls_give_libpq_its_options_and_keep_ours(url: str, expected: PostgreSQLTarget) -> None:
    assert parse_postgresql_url(url) == expected


@pytest.mark.parametrize(
    "schema",
    [
        "Public",
        "chat;DROP TABLE users",
        '"x"',
        "a b",
        "a-b",
        "1abc",
        "x" * 64,
        "",
        "chat%3B--",
        "ünï",
    ],
)
def test_a_schema_name_outside_the_allowlist_is_refused(schema: str) -> None:
    with pytest.raises(InvalidArgumentError, match="schema"):
        parse_postgresql_url(f"postgresql://h/db?schema={schema}")


@pytest.mark.parametrize(
    "schema", ["information_schema", "pg_catalog", "pg_toast", "pg_temp_3", "pg_anything"]
)
def test_a_system_schema_is_refused(schema: str) -> None:
    with pytest.raises(InvalidArgumentError, match="belongs to PostgreSQL"):
        parse_postgresql_url(f"postgresql://h/db?schema={schema}")


@pytest.mark.parametrize(
    "query",
    [
        "pool_max_size=0",
        "pool_min_size=5&pool_max_size=2",
        "pool_min_size=-1",
        "ef_search=0",
        "ef_search=1001",
        "pool_timeout=nan",
        "pool_timeout=0",
        "schema=a&schema=b",
    ],
)
def test_bad_options_are_refused(query: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_postgresql_url(f"postgresql://h/db?{query}")


async def test_libpq_options_reach_the_server_as_written(stores: Stores) -> None:
    store = await stores.open(
        url_options={"options": "-c%20statement_timeout%3D4321", "pool_max_size": 1}
    )
    async with pg_of(store).pool.connection() as connection:
        cursor = await connection.execute("SHOW statement_timeout")
        assert await cursor.fetchone() == ("4321ms",)


def test_messages_name_the_server_never_the_password() -> None:
    target = parse_postgresql_url("postgresql://u:secret@db.example:5433/chat?schema=s")
    assert target.where == "PostgreSQL db.example:5433/chat (schema s)"
    with pytest.raises(InvalidArgumentError) as refused:
        parse_postgresql_url("mysql://u:secret@h/db")
    assert "secret" not in str(refused.value)


async def test_unknown_store_options_are_refused(server: TestServer) -> None:
    with pytest.raises(InvalidArgumentError, match="options"):
        await convostore.connect(store_url(server, fresh_schema()), durability="none")


async def test_an_unreachable_server_is_unavailable() -> None:
    with pytest.raises(BackendUnavailableError, match=r"127\.0\.0\.1:1/"):
        await convostore.connect("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


def test_a_missing_driver_names_the_extra() -> None:
    script = (
        "import asyncio, sys\n"
        "sys.modules['psycopg'] = None\n"
        "import convostore\n"
        "try:\n"
        "    asyncio.run(convostore.connect('postgresql://h/db'))\n"
        "except convostore.BackendUnavailableError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'convostore[postgresql]'" in result.stdout


# ------------------------------------------------------------------ schema


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


# ------------------------------------------------------------------ statements and round trips


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


# ------------------------------------------------------------------ vector index


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


# ------------------------------------------------------------------ without pgvector


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


# ------------------------------------------------------------------ errors and a lost server


async def test_a_killed_connection_is_unavailable_and_the_pool_recovers(
    server: TestServer, stores: Stores
) -> None:
    store = await stores.open(url_options={"pool_min_size": 2, "pool_max_size": 2})

    async def kill_connections() -> int:
        killed = await admin_rows(
            server,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'convostore' AND pid <> pg_backend_pid()"
            " AND query NOT LIKE 'SELECT pg_terminate_backend%%'",
        )
        return sum(1 for (terminated,) in killed if terminated)

    await the_pool_recovers(store, kill_connections, psycopg.OperationalError)


async def test_appends_that_returned_survive_a_server_restart() -> None:
    """Writers append while the server restarts (`faults.appends_survive_a_restart`)."""
    try:
        own = PostgresServer()
        own.start()
    except ServerUnavailable as why:
        server_unavailable("postgresql", str(why))
    try:
        url = own.url() + "?schema=restart&pool_max_size=4&pool_timeout=20"
        store = await convostore.connect(url)
        try:
            await appends_survive_a_restart(store, own.restart)
        finally:
            await store.close()
    finally:
        own.stop()
