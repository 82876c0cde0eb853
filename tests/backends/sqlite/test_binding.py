"""How parameters reach SQLite: None, bool and bytes bind as they always did, with the
sqlite3 module's failed adapter lookup skipped on Python 3.11 (`connection.bind_as_is`)."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator

import pytest

from convostore.backends.sqlite import connection

_KINDS = (type(None), bool, bytes)


@pytest.fixture
def adapters() -> Iterator[dict[tuple[type, type], object]]:
    """sqlite3's adapter registry, put back as it was after the test."""
    saved = dict(sqlite3.adapters)
    try:
        yield sqlite3.adapters  # type: ignore[misc]
    finally:
        sqlite3.adapters.clear()
        sqlite3.adapters.update(saved)


def test_none_bool_and_bytes_bind_as_null_integer_and_blob() -> None:
    db = sqlite3.connect(":memory:")
    try:
        row = db.execute(
            "SELECT typeof(?), typeof(?), ?, typeof(?), ?", (None, True, False, b"\x00v", b"\x00v")
        ).fetchone()
    finally:
        db.close()
    assert row == ("null", "integer", 0, "blob", b"\x00v")


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 and later skip the lookup themselves")
def test_python_3_11_binds_them_without_the_protocol_lookup() -> None:
    for kind in _KINDS:
        assert sqlite3.adapters[(kind, sqlite3.PrepareProtocol)] is connection._as_is


def test_an_adapter_of_the_application_stays(adapters: dict[tuple[type, type], object]) -> None:
    def as_text(value: bool) -> str:
        return "yes" if value else "no"

    adapters[(bool, sqlite3.PrepareProtocol)] = as_text
    connection.bind_as_is()
    assert adapters[(bool, sqlite3.PrepareProtocol)] is as_text
    db = sqlite3.connect(":memory:")
    try:
        assert db.execute("SELECT ?", (True,)).fetchone() == ("yes",)
    finally:
        db.close()
