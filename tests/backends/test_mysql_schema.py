"""MySQL's schema rendered from `convostore.backends.sql.tables` equals the one its
hand-written migrations made (`tests.backends.frozen_ddl`), on MariaDB 10.11 and 11.8:
the same tables, columns, types, collations, indexes and constraints, as
``information_schema`` and ``SHOW CREATE TABLE`` give them; and a database those made is
up to date for the rendered migrations."""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest

from tests.backends.support import missing_driver
from tests.servers.mariadb import TestServer

if skip_reason := missing_driver("asyncmy", "mysql"):
    pytest.skip(skip_reason, allow_module_level=True)

from convostore.backends.mysql import parse_mysql_url
from convostore.backends.mysql.connection import DRIVER, Connection, open_connection
from convostore.backends.mysql.schema import (
    CREATE_DATABASE,
    STOPWORDS_OFF,
    VERSION_TABLE,
    prepare_database,
    read_pending_migrations,
)
from tests.backends.frozen_ddl import MYSQL

# What the server says of a database's tables (``%s``: the database).
CATALOG = (
    "SELECT table_name, column_name, ordinal_position, column_default, is_nullable,"
    " column_type, character_set_name, collation_name, extra, generation_expression"
    " FROM information_schema.columns WHERE table_schema = %s",
    "SELECT table_name, index_name, non_unique, seq_in_index, column_name, sub_part,"
    " index_type FROM information_schema.statistics WHERE table_schema = %s",
    "SELECT table_name, engine, table_collation, row_format, create_options"
    " FROM information_schema.tables WHERE table_schema = %s",
    "SELECT constraint_name, table_name, referenced_table_name, delete_rule, update_rule"
    " FROM information_schema.referential_constraints WHERE constraint_schema = %s",
    "SELECT constraint_name, table_name, column_name, ordinal_position,"
    " referenced_table_name, referenced_column_name"
    " FROM information_schema.key_column_usage WHERE table_schema = %s",
    "SELECT constraint_name, table_name, check_clause"
    " FROM information_schema.check_constraints WHERE constraint_schema = %s",
    "SELECT schema_name, default_character_set_name, default_collation_name"
    " FROM information_schema.schemata WHERE schema_name = %s",
)

_databases = itertools.count(1)


async def catalog(connection: Connection, database: str) -> list[Any]:
    """The database's tables as the server describes them, its name left out."""
    described: list[Any] = []
    for statement in CATALOG:
        rows = await DRIVER.fetch_all(connection, statement, (database,))
        described.append(sorted(tuple("" if v == database else v for v in r) for r in rows))
    tables = await DRIVER.fetch_all(
        connection, "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        (database,),
    )  # fmt: skip
    for (table,) in sorted(tables):
        # Names from information_schema: letters and underscores only.
        (_, create) = await DRIVER.fetch_one(connection, f"SHOW CREATE TABLE {database}.{table}")
        described.append(create)
    return described


@pytest.mark.parametrize("server_fixture", ["server_10", "server_11"])
async def test_the_rendered_schema_equals_the_hand_written_one(
    request: pytest.FixtureRequest, server_fixture: str
) -> None:
    server: TestServer = request.getfixturevalue(server_fixture)
    prefix = f"schema_{os.getpid()}_{next(_databases)}"
    old_target = parse_mysql_url(server.url(f"{prefix}_old"))
    new_target = parse_mysql_url(server.url(f"{prefix}_new"))
    facts = await prepare_database(new_target)
    admin = await open_connection(old_target, None)
    try:
        create = CREATE_DATABASE.format(name=old_target.database, collation=facts.collation)
        await DRIVER.execute(admin, create)
        old = await open_connection(old_target, old_target.database)
        try:
            await DRIVER.execute(old, VERSION_TABLE.create)
            await DRIVER.execute(old, STOPWORDS_OFF)
            for number, statements in enumerate(MYSQL, start=1):
                for statement in statements:
                    await DRIVER.execute(old, statement.format(collation=facts.collation))
                record = {"version": number, "applied_at": 0}
                await DRIVER.execute(old, VERSION_TABLE.record, record)
        finally:
            old.close()
        old_catalog = await catalog(admin, old_target.database)
        new_catalog = await catalog(admin, new_target.database)
        assert "events" in str(new_catalog)
        assert new_catalog == old_catalog
        assert await read_pending_migrations(old_target) == []
        assert await prepare_database(old_target) == facts
        assert await catalog(admin, old_target.database) == old_catalog
    finally:
        for target in (old_target, new_target):
            await DRIVER.execute(admin, f"DROP DATABASE IF EXISTS {target.database}")
        admin.close()
