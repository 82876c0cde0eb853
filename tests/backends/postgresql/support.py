"""What the PostgreSQL backend's own tests share: the users, a fresh schema's name and
URL, stores opened on one schema, the backend under a store, rows read by a superuser
connection outside any store, and a user's message. It imports psycopg: a test module
imports it only after its missing-driver skip."""

from __future__ import annotations

import itertools
import os
from typing import Any

import psycopg

import convostore
from convostore import MessageWrite, Role, Store, User
from convostore.backends.postgresql import PostgreSQLBackend
from tests.servers.postgresql import TestServer

ADA = User("ada", "Ada")
BOB = User("bob", "Bob")


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
