"""The schema as versioned migrations, and what runs at connect to bring a database to it.

``MIGRATIONS[i]`` takes a schema from version i to i + 1; each applied version is a row
of ``convostore_schema``. Connect runs them under a transaction-scoped advisory lock per
schema, so stores connecting at once migrate one after another, and refuses a schema a
newer convostore wrote.

Types: times are ``timestamptz`` (microseconds, read back in UTC); JSON is ``json``,
which keeps the text as written (key order, number spelling) where ``jsonb`` would not;
ids are ``text COLLATE "C"`` so they sort by code point, as everywhere else; a vector is
``real[]`` (pgvector's HNSW index casts it, so the table needs no extension); the
full-text terms are a ``tsvector`` computed by convostore (`convostore.embedding.text_tokens`),
so text search splits words exactly as every other backend does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

from psycopg import AsyncConnection, sql
from psycopg.errors import Error as DatabaseError

from convostore.backends.migrations import version_tuple
from convostore.backends.postgresql.connection import DRIVER
from convostore.backends.postgresql.statements import VALUE_DIGEST
from convostore.backends.sql import tables
from convostore.backends.sql.aio import drive
from convostore.backends.sql.migrate import VersionTable, migrate, pending_migrations
from convostore.backends.sql.tables import Type
from convostore.backends.sql.writes import KeyStatements
from convostore.errors import SchemaVersionError

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ServerFacts",
    "prepare_database",
    "read_pending_migrations",
    "version_table",
]

log = logging.getLogger("convostore.postgresql")

DDL: Final = tables.DDL(
    tables.POSTGRESQL,
    types={
        Type.ID: 'text COLLATE "C"', Type.LABEL: "text", Type.TEXT: "text", Type.JSON: "json",
        Type.TIME: "timestamptz", Type.BIGINT: "bigint", Type.INT: "integer",
        Type.FLAG: "boolean", Type.VECTOR: "real[]", Type.ONE: "integer CHECK ({name} = 1)",
    },
    checks=True,
)  # fmt: skip

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    # The vector index's HNSW index, where pgvector is installed, is built from its one
    # row (see `search.hnsw_index_ddl`).
    DDL.create(tables.TABLES),
    (
        # A metadata value of any length: a btree entry holds at most about 2.7 kB, so
        # the index holds each value's MD5 and a lookup compares the whole value after
        # it. One value per key and session, so an update that replaces a value never
        # meets its old value's hash.
        "ALTER TABLE session_metadata DROP CONSTRAINT session_metadata_pkey",
        """CREATE UNIQUE INDEX session_metadata_by_value
            ON session_metadata (name, md5(value), session_id)""",
    ),
    (
        # MD5 is refused by a server in FIPS mode: the index holds each value's SHA-256
        # instead (built in since PostgreSQL 11). sha256() takes bytes, and the text's
        # bytes depend on the database's encoding, which never changes once the
        # database exists: this function of the schema is immutable, so it may index.
        f"""CREATE FUNCTION {VALUE_DIGEST}(value text) RETURNS bytea
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
            RETURN sha256(convert_to(value, 'UTF8'))""",
        "DROP INDEX session_metadata_by_value",
        f"""CREATE UNIQUE INDEX session_metadata_by_value
            ON session_metadata (name, {VALUE_DIGEST}(value), session_id)""",
    ),
)
SCHEMA_VERSION: Final = len(MIGRATIONS)

# Both keys of the advisory lock a connect takes: this one, and the schema's hash.
ADVISORY_LOCK_CLASS: Final = 0x636F6E76  # "conv"
# The extension is one per database, whatever the schema.
EXTENSION_LOCK_KEY: Final = 0

TAKE_SCHEMA_LOCK: Final = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"
TAKE_EXTENSION_LOCK: Final = "SELECT pg_advisory_xact_lock(%s, %s)"
SERVER_FACTS: Final = """SELECT
    current_setting('server_version_num')::integer,
    (SELECT n.nspname FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace
        WHERE x.extname = 'vector'),
    (SELECT extversion FROM pg_extension WHERE extname = 'vector'),
    EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector'),
    (SELECT array_agg(collname::text) FROM pg_collation
        WHERE collname IN ('pg_unicode_fast', 'und-x-icu')
        AND collencoding IN (-1, pg_char_to_encoding(current_setting('server_encoding')))),
    EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s)"""
VECTOR_EXTENSION: Final = (
    "SELECT n.nspname, x.extversion FROM pg_extension x"
    " JOIN pg_namespace n ON n.oid = x.extnamespace WHERE x.extname = 'vector'"
)
CREATE_VECTOR_EXTENSION: Final = "CREATE EXTENSION IF NOT EXISTS vector"
SET_LOCAL_SEARCH_PATH: Final = "SELECT set_config('search_path', %s, true)"

# Adding an indexed key; a key another store added meanwhile is left as it is.
KEY_STATEMENTS: Final = KeyStatements(
    # Found in the JSON text, which `decisions.backfill` then reads: PostgreSQL cannot
    # take apart a value holding a NUL (the escape \u0000), which JSON may hold. The rows
    # read are locked against deletion until the backfill commits (so their entries meet
    # their sessions). A session being deleted is waited for: its delete took the lock
    # on session_metadata before its row lock (`statements.DELETES_LOCK_ENTRIES`), so it
    # committed or rolled back before this key add took its own, and none is in flight.
    sessions_with_key=(
        "SELECT id, metadata FROM sessions"
        " WHERE strpos(metadata::text, '\"' || %(name)s || '\"') > 0 FOR KEY SHARE"
    ),
    insert_entry=(
        "INSERT INTO session_metadata (name, value, session_id) VALUES (%s, %s, %s)"
        " ON CONFLICT DO NOTHING"
    ),
    entry=lambda name, value, session_id: (name, value, session_id),
)

MIN_SERVER_VERSION: Final = 140000
# The collations whose lower() folds case as Python's str.lower() does, best first:
# PostgreSQL 18's builtin full case mapping, then ICU's root locale.
TEXT_COLLATIONS: Final = ("pg_unicode_fast", "und-x-icu")


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What connect learnt about the server: the schema pgvector is installed in (None:
    not in this database) and its version, and the collation the text filter folds case
    with (None: the database's own)."""

    vector_schema: str | None
    vector_version: tuple[int, ...]
    text_collation: str | None


async def prepare_database(
    connection: AsyncConnection[Any], schema: str, where: str
) -> ServerFacts:
    """Create the schema if need be, install pgvector where allowed and migrate to
    `SCHEMA_VERSION`: all in one transaction, under the schema's advisory lock. A newer
    schema raises `SchemaVersionError` and writes nothing."""
    async with connection.transaction():
        await connection.execute(TAKE_SCHEMA_LOCK, (ADVISORY_LOCK_CLASS, schema))
        facts = await connection.execute(SERVER_FACTS, (schema,))
        row = await facts.fetchone()
        assert row is not None
        (
            version_num, vector_schema, vector_version, vector_available, collations,
            schema_exists,
        ) = row  # fmt: skip
        if version_num < MIN_SERVER_VERSION:
            raise SchemaVersionError(
                f"{where} runs PostgreSQL {version_num // 10000}; convostore needs 14 or newer"
            )
        if vector_schema is None and vector_available:
            await connection.execute(TAKE_EXTENSION_LOCK, (ADVISORY_LOCK_CLASS, EXTENSION_LOCK_KEY))
            try:
                async with connection.transaction():  # a savepoint: a refusal is no failure
                    await connection.execute(CREATE_VECTOR_EXTENSION)
            except DatabaseError as error:
                log.warning(
                    "%s: pgvector is available but could not be installed (%s); vector "
                    "search is off until an administrator runs CREATE EXTENSION vector",
                    where,
                    error.diag.message_primary or error,
                )
            else:
                vector_schema, vector_version = await _vector_extension(connection)
        if not schema_exists:
            await connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        await connection.execute(SET_LOCAL_SEARCH_PATH, (search_path(schema, vector_schema),))
        # DDL only where something is missing: a role that may only read and write the
        # tables (not create in the schema) connects to an up-to-date schema.
        await drive(DRIVER, connection, migrate(version_table(schema), MIGRATIONS, where))
    text_collation = next((c for c in TEXT_COLLATIONS if c in (collations or ())), None)
    return ServerFacts(vector_schema, version_tuple(vector_version or ""), text_collation)


async def read_pending_migrations(
    connection: AsyncConnection[Any], schema: str, where: str
) -> list[str]:
    """The migrations `prepare_database` would apply to ``schema``, read without
    writing or locking: a missing schema has them all pending."""
    steps = pending_migrations(version_table(schema), MIGRATIONS, where)
    return await drive(DRIVER, connection, steps)


def version_table(schema: str) -> VersionTable:
    """The table of the versions applied to ``schema``, named with its schema."""
    table = sql.Identifier(schema, "convostore_schema").as_string(None)
    return VersionTable(
        exists="SELECT to_regclass(%(table)s) IS NOT NULL",
        recorded=f"SELECT coalesce(max(version), 0) FROM {table}",
        create=f"""CREATE TABLE IF NOT EXISTS {table} (
            version integer PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
        )""",
        record=f"INSERT INTO {table} (version) VALUES (%(version)s)",
        parameters={"table": table},
    )


def search_path(schema: str, vector_schema: str | None) -> str:
    """The search_path of a store's connections: its schema, then pgvector's (for the
    ``vector`` type and its operators), each quoted as an identifier."""
    schemas = [schema] + ([vector_schema] if vector_schema and vector_schema != schema else [])
    return ", ".join(sql.Identifier(name).as_string(None) for name in schemas)


async def _vector_extension(connection: AsyncConnection[Any]) -> tuple[str | None, str | None]:
    cursor = await connection.execute(VECTOR_EXTENSION)
    row = await cursor.fetchone()
    return (None, None) if row is None else (str(row[0]), str(row[1]))
