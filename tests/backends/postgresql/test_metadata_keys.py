"""PostgreSQL: a session write and a key change exclude each other through the lock the
write's own statement takes on session_metadata, taken before its snapshot."""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any

import pytest

import convostore
from convostore import Store
from tests.backends.support import missing_driver
from tests.servers.postgresql import TestServer

if skip_reason := missing_driver("psycopg", "postgresql"):
    pytest.skip(skip_reason, allow_module_level=True)

import psycopg

from convostore.backends.postgresql.statements import LOCK_INDEXED_KEYS
from tests.backends.postgresql.support import ADA

# How many times the test looks for the write waiting on the lock before giving up.
LOOKS = 10_000
_schemas = itertools.count(1)


async def _waits_on_session_metadata(connection: psycopg.AsyncConnection[Any]) -> bool:
    cursor = await connection.execute(
        "SELECT count(*) FROM pg_locks WHERE NOT granted"
        " AND relation = 'session_metadata'::regclass"
    )
    row = await cursor.fetchone()
    return row is not None and row[0] == 1


async def test_a_write_that_waited_on_a_key_add_indexes_the_key(server: TestServer) -> None:
    schema = f"keys_{os.getpid()}_{next(_schemas)}"
    url = server.url()
    store: Store = await convostore.connect(f"{url}{'&' if '?' in url else '?'}schema={schema}")
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as adder:
            await adder.execute(f"SET search_path TO {schema}")
            async with adder.transaction():
                # A key add, stopped between its lock and its commit.
                await adder.execute(LOCK_INDEXED_KEYS)
                await adder.execute("INSERT INTO indexed_metadata_keys (name) VALUES ('colour')")
                create = asyncio.create_task(store.create_session(ADA, metadata={"colour": "red"}))
                for _ in range(LOOKS):
                    if await _waits_on_session_metadata(adder):
                        break
                else:
                    raise AssertionError("the write never waited on the key add's lock")
                assert not create.done()
            session = await create
            cursor = await adder.execute("SELECT name, value, session_id FROM session_metadata")
            assert await cursor.fetchall() == [("colour", "red", session.id)]
    finally:
        await store.close()


async def test_a_key_add_indexes_a_session_whose_delete_rolled_back(
    server: TestServer,
) -> None:
    schema = f"keys_{os.getpid()}_{next(_schemas)}"
    url = server.url()
    schema_url = f"{url}{'&' if '?' in url else '?'}schema={schema}"
    store: Store = await convostore.connect(schema_url)
    try:
        session = await store.create_session(ADA, metadata={"colour": "red"})
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as holder:
            # A delete that stops once it has locked the session's row (row triggers
            # run after that), before its cascade reaches session_metadata, and then
            # fails: what a delete cancelled at that moment does.
            await holder.execute(f"SET search_path TO {schema}")
            await holder.execute(
                "CREATE FUNCTION stop_delete() RETURNS trigger LANGUAGE plpgsql AS $$"
                " BEGIN PERFORM pg_advisory_xact_lock(4242);"
                " RAISE EXCEPTION 'the delete stops here'; END $$"
            )
            await holder.execute(
                "CREATE TRIGGER stop_delete BEFORE DELETE ON sessions"
                " FOR EACH ROW EXECUTE FUNCTION stop_delete()"
            )
            async with holder.transaction():
                await holder.execute("SELECT pg_advisory_xact_lock(4242)")
                delete = asyncio.create_task(store.delete_session(session.id))
                for _ in range(LOOKS):
                    if await _waits_on_advisory_lock(holder):
                        break
                else:
                    raise AssertionError("the delete never reached its trigger")
                adder = asyncio.create_task(
                    convostore.connect(schema_url, indexed_metadata={"colour"})
                )
                # The key add waits for the delete (or, without the delete's early lock,
                # ends without waiting); either way the delete goes on only after.
                for _ in range(LOOKS):
                    if adder.done() or await _waits_on_session_metadata(holder):
                        break
                else:
                    raise AssertionError("the key add neither waited nor ended")
            with pytest.raises(convostore.StoreError, match="the delete stops here"):
                await delete
            second = await adder
            try:
                found = await second.find_sessions_by_metadata("colour", "red")
                assert [s.id for s in found] == [session.id]
            finally:
                await second.close()
    finally:
        await store.close()


async def _waits_on_advisory_lock(connection: psycopg.AsyncConnection[Any]) -> bool:
    cursor = await connection.execute(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'advisory'"
    )
    row = await cursor.fetchone()
    return row is not None and row[0] == 1
