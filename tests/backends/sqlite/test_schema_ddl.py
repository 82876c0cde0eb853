"""SQLite's schema rendered from `convostore.backends.sql.tables` equals the one its
hand-written migrations made (`tests.backends.frozen_ddl`): the same tables, columns,
keys, indexes, checks and triggers; and a database those made is up to date."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from convostore.backends.sqlite import SQLiteTarget
from convostore.backends.sqlite.connection import open_connection
from convostore.backends.sqlite.schema import (
    VERSION_TABLE,
    prepare_database,
    read_pending_migrations,
)
from tests.backends.frozen_ddl import SQLITE

# A CHECK clause, with one level of parentheses inside.
CHECK = re.compile(r"CHECK \(((?:[^()]|\([^()]*\))*)\)")


def catalog(connection: sqlite3.Connection) -> dict[str, Any]:
    """Every object of the schema as SQLite describes it: a table by its columns, keys,
    indexes, foreign keys, rowid and checks; an index by its columns and statement; a
    trigger by its statement (whitespace aside)."""
    described: dict[str, Any] = {}
    objects = connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")
    for kind, name, table, text in objects.fetchall():
        if kind == "table":
            described[name] = (
                connection.execute("SELECT * FROM pragma_table_xinfo(?)", (name,)).fetchall(),
                sorted(
                    connection.execute(
                        'SELECT name, "unique", origin, partial FROM pragma_index_list(?)',
                        (name,),
                    ).fetchall()
                ),
                connection.execute("SELECT * FROM pragma_foreign_key_list(?)", (name,)).fetchall(),
                connection.execute("SELECT wr FROM pragma_table_list(?)", (name,)).fetchall(),
                sorted(CHECK.findall(text or "")),
            )
        else:
            index = connection.execute("SELECT * FROM pragma_index_xinfo(?)", (name,))
            statement = " ".join(text.split()) if text else None
            described[name] = (kind, table, statement, index.fetchall())
    return described


def test_the_rendered_schema_equals_the_hand_written_one(tmp_path: Path) -> None:
    old_target = SQLiteTarget(str(tmp_path / "old.db"))
    old = open_connection(old_target, reader=False)
    old.execute(VERSION_TABLE.create)
    for number, statements in enumerate(SQLITE, start=1):
        for statement in statements:
            old.execute(statement)
        old.execute(VERSION_TABLE.record, {"version": number, "applied_at": 0})
    old.commit()
    new_target = SQLiteTarget(str(tmp_path / "new.db"))
    new = open_connection(new_target, reader=False)
    prepare_database(new, new_target)
    try:
        old_catalog, new_catalog = catalog(old), catalog(new)
        assert "events" in new_catalog
        assert new_catalog == old_catalog
    finally:
        old.close()
        new.close()
    assert read_pending_migrations(old_target) == []
