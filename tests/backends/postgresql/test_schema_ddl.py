"""PostgreSQL's schema rendered from `convostore.backends.sql.tables` equals the one its
hand-written migrations made (`tests.backends.frozen_ddl`): the same tables, columns,
types, collations, defaults, indexes, constraints and functions, as ``pg_catalog`` gives
them; and a schema those made is up to date for the rendered migrations."""

from __future__ import annotations

from typing import Any

import pytest

from tests.backends.support import missing_driver
from tests.servers.postgresql import TestServer

if skip_reason := missing_driver("psycopg", "postgresql"):
    pytest.skip(skip_reason, allow_module_level=True)

import psycopg
from psycopg import sql

from convostore.backends.postgresql.schema import (
    prepare_database,
    read_pending_migrations,
    version_table,
)
from tests.backends.frozen_ddl import POSTGRESQL
from tests.backends.postgresql.support import fresh_schema

# What the catalog says of a schema's objects (``%s``: the schema).
CATALOG = (
    """SELECT c.relname, c.relkind, c.relpersistence, c.reloptions, a.attnum, a.attname,
        format_type(a.atttypid, a.atttypmod), a.attnotnull, co.collname,
        pg_get_expr(d.adbin, d.adrelid)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_collation co ON co.oid = a.attcollation
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
    WHERE n.nspname = %s""",
    """SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisunique, i.indisprimary
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s""",
    """SELECT con.conname, c.relname, con.contype, pg_get_constraintdef(con.oid)
    FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
    JOIN pg_namespace n ON n.oid = con.connamespace WHERE n.nspname = %s""",
    """SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p
    JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s""",
)


async def catalog(connection: psycopg.AsyncConnection[Any], schema: str) -> list[Any]:
    """The schema's objects as the catalog describes them, its name left out."""
    described = []
    for statement in CATALOG:
        rows = await (await connection.execute(statement, (schema,))).fetchall()
        described.append(
            sorted(tuple(str(v).replace(f"{schema}.", "") for v in row) for row in rows)
        )
    return described


async def test_the_rendered_schema_equals_the_hand_written_one(server: TestServer) -> None:
    old, new = fresh_schema() + "_old", fresh_schema() + "_new"
    async with await psycopg.AsyncConnection.connect(server.url(), autocommit=True) as conn:
        try:
            await prepare_database(conn, new, "the new schema")
            table = version_table(old)
            async with conn.transaction():
                await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(old)))
                await conn.execute("SELECT set_config('search_path', %s, true)", (old,))
                await conn.execute(table.create)
                for number, statements in enumerate(POSTGRESQL, start=1):
                    for statement in statements:
                        await conn.execute(statement)
                    await conn.execute(table.record, {"version": number})
            old_catalog = await catalog(conn, old)
            new_catalog = await catalog(conn, new)
            assert "events" in str(new_catalog)
            assert new_catalog == old_catalog
            assert await read_pending_migrations(conn, old, "the old schema") == []
        finally:
            for schema in (old, new):
                drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                await conn.execute(drop)
