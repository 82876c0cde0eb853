"""PostgreSQL URLs: libpq's options passed through and ours kept, schema names and
options refused, messages that name the server and never the password, and a
missing driver or an unreachable server."""

from __future__ import annotations

import subprocess
import sys

import pytest

import convostore
from convostore import BackendUnavailableError, InvalidArgumentError
from tests.backends.support import missing_driver
from tests.servers.postgresql import TestServer

if skip_reason := missing_driver("psycopg", "postgresql"):
    pytest.skip(skip_reason, allow_module_level=True)

from convostore.backends.postgresql import PostgreSQLTarget, parse_postgresql_url
from tests.backends.postgresql.support import Stores, fresh_schema, pg_of, store_url


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
