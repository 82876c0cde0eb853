"""The MySQL backend on a 3-node MariaDB Galera cluster (tests/servers/galera.py): URLs
listing several nodes, the migration lock held across the cluster, and a node killed
under writers. The contract suite runs on the cluster as the backend ``galera``
(tests/contract); what is here is what only a cluster can show."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import convostore
from convostore import (
    BackendUnavailableError,
    ConflictError,
    Message,
    MessageWrite,
    Role,
    Store,
    User,
)
from tests.backends.support import missing_driver, served

if skip_reason := missing_driver("asyncmy", "mysql"):
    pytest.skip(skip_reason, allow_module_level=True)

from convostore.backends.mysql import SCHEMA_VERSION, MySQLBackend, parse_mysql_url, schema
from convostore.backends.mysql.connection import fetch_all, open_connection
from convostore.backends.sql.migrate import migrate
from convostore.backends.sql.steps import Query, Steps
from tests.servers.galera import (
    GaleraCluster,
    TestCluster,
    node_urls,
    rotated,
    shared_cluster,
    stop_shared_cluster,
)
from tests.servers.mariadb import create_database_at_defaults

ADA = User("ada", "Ada")
WRITERS = 4
# A writer that met the fault waits this long before it tries the same id again.
RETRY_PAUSE = 0.05


@pytest.fixture(scope="session")
def cluster() -> Iterator[TestCluster]:
    yield from served("galera", shared_cluster, stop_shared_cluster)


_databases = itertools.count(1)


def fresh_database() -> str:
    return f"galera_{os.getpid()}_{next(_databases)}"


@pytest.fixture
async def opened() -> AsyncIterator[list[Store]]:
    """Stores a test opens, closed at its end."""
    stores: list[Store] = []
    yield stores
    for store in reversed(stores):
        await store.close()


async def rows(url: str, statement: str, parameters: Any = None) -> list[Any]:
    """Rows of a statement run outside any store, on the one node ``url`` names."""
    target = parse_mysql_url(url)
    connection = await open_connection(target, target.database)
    try:
        return await fetch_all(connection, statement, parameters)
    finally:
        connection.close()


def say(content: str) -> MessageWrite:
    return MessageWrite(Role.USER, content, author=ADA, id=content)


# ------------------------------------------------------------------ URLs


def test_a_url_lists_the_nodes_in_order() -> None:
    target = parse_mysql_url("mysql://u:p@a:3307,b,c:3309/chat?pool_max_size=4")
    assert target.nodes == (("a", 3307), ("b", 3306), ("c", 3309))
    assert (target.user, target.password, target.pool_max_size) == ("u", "p", 4)
    assert target.where == "MySQL a:3307,b:3306,c:3309/chat"
    moved = target.on_node(("c", 3309))
    assert (moved.host, moved.port, moved.other_nodes) == ("c", 3309, (("a", 3307), ("b", 3306)))


@pytest.mark.parametrize(
    "url",
    ["mysql://u@a:1,a:1/chat", "mysql://u@a:1,b:x/chat", "mysql://u@a,b/chat?unix_socket=/s"],
)
def test_a_bad_list_of_nodes_is_refused(url: str) -> None:
    with pytest.raises(convostore.InvalidArgumentError):
        parse_mysql_url(url)


async def test_a_store_uses_the_first_node_that_answers(
    cluster: TestCluster, opened: list[Store]
) -> None:
    database = fresh_database()
    # A node nothing listens on comes first: the store opens on the next one.
    live = node_urls(cluster.url(database))[0].split("@", 1)[1].split("/", 1)[0]
    url = f"mysql://root@127.0.0.1:1,{live}/{database}"
    store = await convostore.connect(url)
    opened.append(store)
    assert isinstance(store.backend, MySQLBackend)
    assert f"{store.backend.node[0]}:{store.backend.node[1]}" == live
    session = await store.create_session(ADA)
    await store.add_message(session.id, say("hello"))
    assert await store.version(session.id) == 1


# ------------------------------------------------------------------ the migration lock


async def test_stores_opening_at_once_on_every_node_migrate_once(
    cluster: TestCluster, opened: list[Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six stores, two on each node, open one new database at once: none fails, and each
    migration is applied (its version recorded) by one of them only."""
    recorded: list[int] = []

    def counting(*arguments: Any) -> Steps[None]:
        steps = migrate(*arguments)
        answer: Any = None
        while True:
            try:
                query: Query = steps.send(answer)
            except StopIteration:
                return
            if query.statement == schema.VERSION_TABLE.record:
                assert query.parameters is not None
                recorded.append(query.parameters["version"])
            answer = yield query

    monkeypatch.setattr(schema, "migrate", counting)
    database = fresh_database()
    nodes = node_urls(cluster.url(database))
    stores = await asyncio.gather(*(convostore.connect(nodes[i % 3]) for i in range(6)))
    opened.extend(stores)
    assert sorted(recorded) == list(range(1, SCHEMA_VERSION + 1))
    for node in nodes:
        versions = await rows(node, "SELECT version FROM convostore_schema ORDER BY version")
        assert [version for (version,) in versions] == list(range(1, SCHEMA_VERSION + 1))
        holder = await rows(node, "SELECT holder FROM convostore_migration_lock")
        assert holder == [("",)]
    # Each store works, on its own node, and sees what the others wrote.
    sessions = [await store.create_session(ADA) for store in stores]
    for store in stores:
        listed = (await store.list_sessions(ADA.id)).items
        assert {s.id for s in listed} >= {s.id for s in sessions}


async def test_the_migration_lock_holds_across_the_cluster(
    cluster: TestCluster, opened: list[Store]
) -> None:
    """While a store on one node holds the lock, a store opening on another waits for
    it; once it is given back, the other opens (and finds the schema to make)."""
    database = fresh_database()
    first, second, _ = node_urls(cluster.url(database))
    create_database_at_defaults(first)
    target = parse_mysql_url(first)
    connection = await open_connection(target, database)
    try:
        async with schema.cluster_lock(connection, target):
            waiting = asyncio.create_task(convostore.connect(second))
            done, _ = await asyncio.wait([waiting], timeout=1.5)
            assert not done, "a store on another node opened while the lock was held"
        store = await asyncio.wait_for(waiting, 30)
        opened.append(store)
    finally:
        connection.close()
    versions = await rows(second, "SELECT count(*) FROM convostore_schema")
    assert versions == [(SCHEMA_VERSION,)]


async def test_a_lease_that_ran_out_is_taken_over(
    cluster: TestCluster, opened: list[Store]
) -> None:
    """A store that died holding the lock (its row names it, its lease passed) keeps no
    one out: the next store takes the lock and migrates."""
    database = fresh_database()
    url = node_urls(cluster.url(database))[2]
    create_database_at_defaults(url)
    target = parse_mysql_url(url)
    connection = await open_connection(target, database)
    try:
        cursor = connection.cursor()
        await cursor.execute(schema.CLUSTER_LOCK_TABLE)
        await cursor.execute(
            "INSERT INTO convostore_migration_lock VALUES (1, 'dead', UNIX_TIMESTAMP() - 1)"
        )
    finally:
        connection.close()
    opened.append(await asyncio.wait_for(convostore.connect(url), 30))
    assert await rows(url, "SELECT holder FROM convostore_migration_lock") == [("",)]


# ------------------------------------------------------------------ a node killed


async def test_no_acknowledged_append_is_lost_when_a_node_is_killed(
    cluster: TestCluster, opened: list[Store]
) -> None:
    """Writers append by their own event ids, each trying the same id again after an
    error, while the node their store writes to is killed (SIGKILL): the store moves to
    the next node, and afterwards every acknowledged event is stored exactly once, each
    log's seqs are gap-free and its version agrees with it, on both nodes left."""
    if not isinstance(cluster, GaleraCluster):
        pytest.skip("killing a node needs the cluster the suite started")
    database = fresh_database()
    # The store writes to node 2 (not the one that made the cluster), then node 3.
    url = rotated(cluster.url(database), 1)
    store = await convostore.connect(url + "?pool_max_size=4&connect_timeout=2")
    opened.append(store)
    sessions = [await store.create_session(ADA) for _ in range(WRITERS)]
    acknowledged: list[list[str]] = [[] for _ in range(WRITERS)]
    errors: list[BaseException] = []
    stop = asyncio.Event()
    progress = asyncio.Condition()
    # When the node was killed, and when an append was next acknowledged.
    killed_at: list[float] = []
    back_at: list[float] = []

    async def writer(number: int) -> None:
        for count in itertools.count():
            event_id = f"w{number}-{count}"
            while not stop.is_set():
                try:
                    await store.append(sessions[number].id, say(event_id))
                except (BackendUnavailableError, ConflictError) as error:
                    errors.append(error)
                    await asyncio.sleep(RETRY_PAUSE)
                    continue
                acknowledged[number].append(event_id)
                if killed_at and not back_at:
                    back_at.append(time.monotonic())
                async with progress:
                    progress.notify_all()
                break
            if stop.is_set():
                return

    async def appended(count: int) -> None:
        async with progress:
            await progress.wait_for(lambda: sum(map(len, acknowledged)) >= count)

    victim = cluster.nodes[1]
    writers = [asyncio.create_task(writer(n)) for n in range(WRITERS)]
    started = time.monotonic()
    try:
        await asyncio.wait_for(appended(40), 20)
        before = sum(map(len, acknowledged))
        victim.kill()
        killed_at.append(time.monotonic())
        await asyncio.wait_for(appended(before + 80), 30)
    finally:
        stop.set()
        await asyncio.gather(*writers)
        outage = time.monotonic() - started
    try:
        assert errors, "the killed node went unnoticed"
        assert isinstance(store.backend, MySQLBackend)
        assert store.backend.node != ("127.0.0.1", victim.port)
        survivors = [u for u in node_urls(url) if f":{victim.port}/" not in u]
        for node_url in survivors:
            reader = await convostore.connect(node_url)
            opened.append(reader)
            for number, session in enumerate(sessions):
                log = await reader.read(session.id)
                ids = [event.id for event in log]
                assert len(ids) == len(set(ids)), "an event is stored twice"
                assert set(acknowledged[number]) <= set(ids), "an acknowledged event is lost"
                # Beyond those acknowledged, at most the one in flight when it stopped.
                assert len(ids) - len(acknowledged[number]) <= 1
                assert [event.seq for event in log] == list(range(1, len(log) + 1))
                assert await reader.version(session.id) == len(log)
                assert all(isinstance(event, Message) for event in log)
        print(
            f"\nnode killed under {WRITERS} writers: {len(errors)} errors, appends "
            f"acknowledged again after {back_at[0] - killed_at[0]:.2f} s, test {outage:.1f} s"
        )
    finally:
        # The node rejoins (by IST from the others), for the tests after this one.
        victim.rejoin()
        cluster.wait_until_synced()


def test_the_cluster_has_every_node_back(cluster: TestCluster) -> None:
    if isinstance(cluster, GaleraCluster):
        assert all(node.synced(3) for node in cluster.nodes)
