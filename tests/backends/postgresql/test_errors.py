"""PostgreSQL errors and a lost server: a killed connection is unavailable and the
pool recovers; appends that returned survive a server restart."""

from __future__ import annotations

import pytest

import convostore
from tests.backends.faults import appends_survive_a_restart, the_pool_recovers
from tests.backends.support import missing_driver, server_unavailable
from tests.servers.postgresql import PostgresServer, ServerUnavailable, TestServer

if skip_reason := missing_driver("psycopg", "postgresql"):
    pytest.skip(skip_reason, allow_module_level=True)

import psycopg

from tests.backends.postgresql.support import Stores, admin_rows


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
