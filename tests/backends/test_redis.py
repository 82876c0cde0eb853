"""What is the Redis backend's own: its URLs, its schema record, its durability wait, and
its promises kept while a cluster's nodes die, freeze, move slots or all restart.

The fault tests run a cluster of their own (3 masters x 1 replica, a 2 s node timeout)
with writers appending by their own event ids, each retrying the same id after an
error; afterwards every acknowledged event is present exactly once, each log's seqs are
gap-free, versions agree with the logs, listings through their cursors hold every
session and metadata lookups find every indexed session. Each prints the longest time
a writer could not append (its unavailability).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.crc import key_slot

import convostore
from convostore import (
    BackendUnavailableError,
    EventWrite,
    HashingEmbedder,
    InvalidArgumentError,
    MessageWrite,
    PageRequest,
    Role,
    SchemaVersionError,
    Store,
    User,
)
from tests.backends.support import missing_driver, server_unavailable

if skip_reason := missing_driver("redis", "redis"):
    pytest.skip(skip_reason, allow_module_level=True)

from convostore.backends import pending_migrations
from convostore.backends.redis import RedisBackend
from convostore.backends.redis.functions import function
from convostore.backends.redis.url import parse_redis_url
from convostore.testing.populated import NamedHashingEmbedder
from tests.servers.redis import (
    RedisCluster,
    RedisServer,
    TestServer,
    shared_server,
    shared_valkey_cluster,
)
from tests.servers.shared import ServerUnavailable

_namespaces = itertools.count(1)
FAST_FAILOVER = {"cluster-node-timeout": "2000"}
# No fault test may take longer than this, failover and recovery included.
FAULT_BUDGET = 45.0


def _namespace() -> str:
    return f"backend_{os.getpid()}_{next(_namespaces)}"


# ---------------------------------------------------------------------------- URLs


def test_url_defaults_and_parts() -> None:
    target = parse_redis_url("redis://cache.internal")
    assert target.nodes == (("cache.internal", 6379),)
    assert (target.cluster, target.db, target.tls, target.namespace) == (
        False,
        0,
        False,
        "convostore",
    )
    assert target.wait_replicas == 0
    target = parse_redis_url("rediss://ann:s%40cret@h:7000/3?namespace=chat&replicas=2")
    assert (target.username, target.password, target.db, target.tls) == ("ann", "s@cret", 3, True)
    assert (target.namespace, target.wait_replicas) == ("chat", 2)
    assert "s@cret" not in repr(target)
    assert "s@cret" not in target.where


def test_cluster_urls_name_their_seeds() -> None:
    target = parse_redis_url("valkey+cluster://a:7000,b:7001,[::1]:7002?buckets=1024")
    assert target.cluster
    assert target.nodes == (("a", 7000), ("b", 7001), ("::1", 7002))
    assert (target.buckets, target.wait_replicas) == (1024, 1)
    assert parse_redis_url("rediss+cluster://a:7000").tls


@pytest.mark.parametrize(
    "bad",
    [
        "redis://a:7000,b:7001",
        "redis+cluster://a:7000/1",
        "redis://h/zero",
        "redis://h:99999",
        "redis://h?namespace=a{b}",
        "redis://h?buckets=0",
        "redis://h?replicas=x",
        "redis://h?fsync=maybe",
        "redis://h?ssl_ca_certs=/ca.pem",
        "redis://h?unknown=1",
        "memcached://h",
    ],
)
def test_bad_urls_are_refused(bad: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_redis_url(bad)


async def test_an_unreachable_server_is_backend_unavailable() -> None:
    with pytest.raises(BackendUnavailableError):
        await convostore.connect("redis://127.0.0.1:1?connect_timeout=1")


# ---------------------------------------------------------------------------- one server


@pytest.fixture(scope="module")
def server() -> RedisServer:
    try:
        started = shared_server()
    except ServerUnavailable as why:
        server_unavailable("redis", str(why))
    assert isinstance(started, RedisServer)
    return started


async def test_a_newer_schema_is_refused(server: RedisServer) -> None:
    url = server.url(_namespace())
    store = await convostore.connect(url)
    backend = store.backend
    assert isinstance(backend, RedisBackend)
    meta = backend._meta
    await backend.nodes.call(meta, [("HSET", meta, "schema", 99)], write=True)
    await store.close()
    with pytest.raises(SchemaVersionError):
        await convostore.connect(url)
    with pytest.raises(SchemaVersionError):
        await pending_migrations(url)


async def _expected_vector_path(backend: RedisBackend) -> str:
    """The path the server's own INFO says a store takes: vector sets on Redis past
    8.2.3 (whose VREM crashed here), the change feed's cache on Valkey and up to it."""
    info = await backend.nodes._client(backend.nodes.masters()[0]).info("server")
    version = tuple(int(n) for n in str(info["redis_version"]).split(".")[:3])
    if "valkey_version" in info or version <= (8, 2, 3):
        return "vector cache"
    return "vector sets"


async def test_a_database_of_schema_1_is_searched_by_the_exact_scan(server: RedisServer) -> None:
    """Schema 1 kept vectors in no vector set: its stores scan, and find every vector."""
    url = server.url(_namespace())
    store = await convostore.connect(url, embedder=HashingEmbedder(16))
    backend = store.backend
    assert isinstance(backend, RedisBackend)
    assert backend.vector_search_path == await _expected_vector_path(backend)
    owner = User("ada", "Ada")
    session = await store.create_session(owner)
    for number in range(300):  # More than a bucket's scanned-at-once count.
        await store.add_message(session.id, MessageWrite(Role.USER, f"note {number} apples"))
    # As schema 1 left it: the vectors stored, neither a vector set nor the change feed
    # (whichever schema 2 keeps on this server) beside them.
    meta = backend._meta
    sets = []
    for pattern in ("*vx:*", "*:vf", "*:vrow", "*:vrn", "*:vfp"):
        key_pattern = f"cs:{backend.target.namespace}:{pattern}"
        [found] = await backend.nodes.call(meta, [("KEYS", key_pattern)], write=False)
        sets += found
    assert sets, "the vector sets (or the change feed) were not where this test looks"
    await backend.nodes.call(meta, [("HSET", meta, "schema", 1)], write=True)
    for key in sets:
        await backend.nodes.call(key, [("DEL", key)], write=True)
    await store.close()
    async with await convostore.connect(url, embedder=HashingEmbedder(16)) as reopened:
        assert isinstance(reopened.backend, RedisBackend)
        assert reopened.backend.vector_search_path == "scan"
        assert not reopened.capabilities.native_vector_index
        # Vectors written now go to the vector set or the feed too: it holds more than k,
        # none of them the nearest.
        for number in range(20):
            await reopened.add_message(session.id, MessageWrite(Role.USER, f"pear {number}"))
        hits = await reopened.search("note 7 apples", mode="vector", k=5, owner_id=owner.id)
        assert len(hits) == 5
        assert hits[0].message.content == "note 7 apples"


async def test_the_bucket_count_is_fixed_when_the_database_is_created(server: RedisServer) -> None:
    url = server.url(_namespace())
    first = await convostore.connect(url + "&buckets=8")
    second = await convostore.connect(url + "&buckets=64")
    try:
        assert isinstance(second.backend, RedisBackend)
        assert second.backend.buckets == 8
        session = await first.create_session(User("ada", "Ada"))
        assert await second.get_session(session.id) == session
    finally:
        await first.close()
        await second.close()


async def test_a_session_id_reused_by_another_owner_is_found_by_every_store(
    server: RedisServer,
) -> None:
    url = server.url(_namespace())
    first = await convostore.connect(url)
    second = await convostore.connect(url)
    try:
        backend = first.backend
        assert isinstance(backend, RedisBackend)
        assert backend._bucket("ada") != backend._bucket("bob")  # or this proves nothing
        await first.create_session(User("ada", "Ada"), session_id="shared-id")
        assert await second.get_session("shared-id") is not None  # second remembers it
        assert await first.delete_session("shared-id")
        again = await first.create_session(User("bob", "Bob"), session_id="shared-id")
        assert again.owner_id == "bob"
        assert await second.get_session("shared-id") == again
        assert await second.version("shared-id") == 0
    finally:
        await first.close()
        await second.close()


# ---------------------------------------------------------------------------- a cluster


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    """A cluster of this test's own, which it may break."""
    own = RedisCluster(settings=FAST_FAILOVER)
    try:
        own.start()
    except ServerUnavailable as why:
        server_unavailable("redis_cluster", str(why))
    yield own
    own.stop()


@dataclass
class Writers:
    """Writers appending to their own sessions by their own event ids, each retrying the
    same id after an error, recording what was acknowledged and the longest outage."""

    store: Store
    sessions: list[str]
    acknowledged: dict[str, list[str]] = field(default_factory=dict)
    longest_outage: float = 0.0
    errors: int = 0
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        for session_id in self.sessions:
            self.acknowledged[session_id] = []
            self._tasks.append(asyncio.create_task(self._write(session_id)))

    async def _write(self, session_id: str) -> None:
        # The outage: the longest time between two acknowledged appends of one writer
        # (a call the client retried inside counts, not only the errors it raised).
        last = time.monotonic()
        for number in itertools.count():
            event_id = f"{session_id}-{number}"
            while True:
                if self._stop.is_set():
                    return
                try:
                    await self.store.append_event(session_id, EventWrite("APP.TICK", id=event_id))
                    break
                except BackendUnavailableError:
                    self.errors += 1
                    await asyncio.sleep(0.05)
            self.acknowledged[session_id].append(event_id)
            now = time.monotonic()
            self.longest_outage = max(self.longest_outage, now - last)
            last = now

    def counts(self) -> list[int]:
        return [len(self.acknowledged[s]) for s in self.sessions]

    async def until_each_wrote(self, more: int, budget: float) -> None:
        """Until every writer acknowledged ``more`` events past its count now."""
        wanted = [count + more for count in self.counts()]
        deadline = time.monotonic() + budget
        while any(have < want for have, want in zip(self.counts(), wanted, strict=True)):
            assert time.monotonic() < deadline, f"writers stalled at {self.counts()}"
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()


OWNERS = [User(f"owner-{n}", f"Owner {n}") for n in range(6)]


async def _sessions(store: Store) -> list[str]:
    """Two sessions for each of six owners (spread over the masters), indexed by team."""
    ids = []
    for owner in OWNERS:
        for _ in range(2):
            session = await store.create_session(owner, metadata={"team": "faults"})
            ids.append(session.id)
    return ids


async def _check_everything(store: Store, writers: Writers) -> None:
    for session_id, acknowledged in writers.acknowledged.items():
        events = await store.read(session_id)
        ids = [event.id for event in events]
        assert len(ids) == len(set(ids)), "an event is stored twice"
        assert set(acknowledged) <= set(ids), "an acknowledged event is missing"
        assert [event.seq for event in events] == list(range(1, len(events) + 1))
        assert await store.version(session_id) == len(events)
    listed: set[str] = set()
    for owner in OWNERS:
        page = await store.list_sessions(owner.id, PageRequest(size=1))
        while True:
            listed.update(session.id for session in page.items)
            if page.next_cursor is None:
                break
            page = await store.list_sessions(owner.id, PageRequest(size=1, cursor=page.next_cursor))
    assert listed == set(writers.sessions)
    found = await store.find_sessions_by_metadata("team", "faults")
    assert {session.id for session in found} == set(writers.sessions)


def _master_of(cluster: RedisCluster, store: Store, owner: User) -> RedisServer:
    """The node that serves the bucket of ``owner`` now."""
    backend = store.backend
    assert isinstance(backend, RedisBackend)
    bucket = zlib.crc32(owner.id.encode()) % backend.buckets
    _, port = backend.nodes._address_of(backend._prefix(bucket) + b"fence")
    return next(node for node in cluster.nodes if node.port == port)


async def _under_writers(
    cluster: RedisCluster, fault: Callable[[Store], Awaitable[None]], name: str
) -> None:
    started = time.monotonic()
    store = await convostore.connect(cluster.url(_namespace()), indexed_metadata=["team"])
    writers = Writers(store, await _sessions(store))
    try:
        writers.start()
        await writers.until_each_wrote(5, FAULT_BUDGET)
        await fault(store)
        await writers.until_each_wrote(5, FAULT_BUDGET)
        await writers.stop()
        await _check_everything(store, writers)
        print(
            f"\n{name}: longest outage {writers.longest_outage:.2f} s, "
            f"{writers.errors} failed attempts, {sum(writers.counts())} acknowledged"
        )
        assert time.monotonic() - started < FAULT_BUDGET * 2
    finally:
        writers.cancel()
        await store.close()


async def test_a_killed_master_loses_no_acknowledged_append(cluster: RedisCluster) -> None:
    async def kill(store: Store) -> None:
        victim = _master_of(cluster, store, OWNERS[0])
        victim.kill()
        # Its replica takes over after the node timeout; the old master comes back as
        # the new master's replica, so writes there are confirmed again.
        await asyncio.sleep(3.0)
        await asyncio.to_thread(victim.start)

    await _under_writers(cluster, kill, "SIGKILL of a master")


async def test_a_frozen_master_loses_no_acknowledged_append(cluster: RedisCluster) -> None:
    async def freeze(store: Store) -> None:
        victim = _master_of(cluster, store, OWNERS[0])
        victim.freeze()
        await asyncio.sleep(4.0)  # twice the node timeout: its replica takes over
        victim.thaw()

    await _under_writers(cluster, freeze, "SIGSTOP of a master past the node timeout")


async def test_a_whole_cluster_restarted_from_its_files_keeps_every_append(
    cluster: RedisCluster,
) -> None:
    async def restart(store: Store) -> None:
        for node in cluster.nodes:
            node.kill()
        for node in cluster.nodes:
            await asyncio.to_thread(node.start)
        await asyncio.to_thread(cluster.wait_until_healthy)

    await _under_writers(cluster, restart, "the whole cluster killed and restarted")


async def test_slots_moved_to_a_new_node_lose_no_acknowledged_append(
    cluster: RedisCluster,
) -> None:
    async def reshard(store: Store) -> None:
        backend = store.backend
        assert isinstance(backend, RedisBackend)
        source = _master_of(cluster, store, OWNERS[0])
        target = await asyncio.to_thread(cluster.add_master)
        fences = [backend._prefix(b) + b"fence" for b in range(backend.buckets)]
        slot = key_slot(fences[zlib.crc32(OWNERS[0].id.encode()) % backend.buckets])
        freeze = [
            ("FCALL", function("freeze"), 1, fence) for fence in fences if key_slot(fence) == slot
        ]
        await asyncio.to_thread(cluster.move_slot, slot, source, target, freeze)
        for command in freeze:
            fence = command[3]
            await backend.nodes.call(fence, [("FCALL", function("thaw"), 1, fence)], write=True)
        assert _master_of(cluster, store, OWNERS[0]) is target

    await _under_writers(cluster, reshard, "a slot moved to a new node")


async def test_a_write_not_confirmed_by_enough_replicas_raises_and_may_have_written(
    cluster: RedisCluster,
) -> None:
    url = cluster.url(_namespace())
    store = await convostore.connect(url)
    demanding = await convostore.connect(url + "&replicas=2&wait_timeout=0.2")
    try:
        session = await store.create_session(User("ada", "Ada"))
        with pytest.raises(BackendUnavailableError, match="may have been applied"):
            await demanding.append_event(session.id, EventWrite("APP.TICK", id="e1"))
        # The write reached the master: it is there, and a retry of it is a replay.
        assert [event.id for event in await store.read(session.id)] == ["e1"]
        await store.append_event(session.id, EventWrite("APP.TICK", id="e1"))
        assert await store.version(session.id) == 1
    finally:
        await store.close()
        await demanding.close()


@pytest.fixture
async def cluster_store(cluster: RedisCluster) -> AsyncIterator[Store]:
    store = await convostore.connect(cluster.url(_namespace()))
    yield store
    await store.close()


async def test_durability_waits_cost_milliseconds_not_a_second(cluster_store: Store) -> None:
    session = await cluster_store.create_session(User("ada", "Ada"))
    started = time.monotonic()
    for number in range(20):
        await cluster_store.append_event(session.id, EventWrite("APP.TICK", id=f"e{number}"))
    # A lone WAITAOF 1 1 waits for the replica's once-a-second report: 20 s here.
    assert time.monotonic() - started < 5.0


# ---------------------------------------------------------------------------- vector search


@pytest.fixture(params=["redis", "valkey_cluster"])
def search_server(request: pytest.FixtureRequest) -> TestServer:
    """One Redis 8 server (vector sets), a Valkey cluster (none: the vector cache)."""
    try:
        return shared_server() if request.param == "redis" else shared_valkey_cluster()
    except ServerUnavailable as why:
        server_unavailable(request.param, str(why))


def _vectors(rng: random.Random, count: int, width: int) -> list[list[float]]:
    return [[rng.gauss(0.0, 1.0) for _ in range(width)] for _ in range(count)]


async def _same_search(backend: Store, reference: Store, **query: Any) -> None:
    """The backend's hits are the reference's top k by exact score, in order."""
    got = await backend.search(mode="vector", **query)
    want = await reference.search(mode="vector", **{**query, "k": 1000})
    assert want, f"nothing to find for {query}: this proves nothing"
    scores = {hit.message.content: hit.score for hit in want}
    k = query["k"]
    assert [hit.score for hit in got] == pytest.approx([h.score for h in want[:k]], abs=1e-5)
    for hit in got:
        assert hit.score == pytest.approx(scores[hit.message.content], abs=1e-5)


async def test_vector_search_on_a_populated_database_answers_as_the_exact_scan(
    search_server: TestServer,
) -> None:
    """Other owners' vectors, of the model and of another, in buckets large enough that
    a vector set (or the cache) ranks them: every scope answers as the reference, before
    and after a re-embedding to a new width, an append and a deletion."""
    rng = random.Random(26)
    url = search_server.url(_namespace()) + "&buckets=2"
    backend = await convostore.connect(url, embedder=NamedHashingEmbedder("m1", 16))
    reference = await convostore.connect("memory://", embedder=NamedHashingEmbedder("m1", 16))
    stores = (backend, reference)
    try:
        assert isinstance(backend.backend, RedisBackend)
        path = await _expected_vector_path(backend.backend)
        native = path == "vector sets"
        assert backend.backend.vector_search_path == path
        assert backend.capabilities.native_vector_index is native
        crowd, few, other = User("crowd", "Crowd"), User("few", "Few"), User("other", "Other")
        sessions: dict[Store, list[str]] = {store: [] for store in stores}
        plan = [(crowd, 100, "m1", 16)] * 6 + [(few, 8, "m1", 16)] + [(other, 100, "m0", 24)] * 2
        for number, (owner, count, model, width) in enumerate(plan):
            writes = [
                MessageWrite(
                    Role.USER if i % 3 else Role.ASSISTANT,
                    f"{owner.id} {number} says {i}",
                    embedding=vector,
                    embedding_model=model,
                )
                for i, vector in enumerate(_vectors(rng, count, width))
            ]
            for store in stores:
                session = await store.create_session(owner)
                sessions[store].append(session.id)
                assert await store.append_events(session.id, writes, 0)

        async def compare(width: int) -> None:
            for vector in _vectors(rng, 3, width):
                for scope in ({}, {"owner_id": "crowd"}, {"owner_id": "few"}):
                    await _same_search(backend, reference, vector=vector, k=10, **scope)
                await _same_search(
                    backend, reference, vector=vector, k=5, owner_id="crowd", roles=["assistant"]
                )
                # Another model's vectors are searched once re-embedded, never before.
                if width == 24:
                    await _same_search(backend, reference, vector=vector, k=10, owner_id="other")
                else:
                    assert not await backend.search(vector=vector, k=10, owner_id="other")

        await compare(16)
        caches = backend.backend._caches.values()
        # The cache holds the vectors it ranked (not every search fell back to a scan).
        assert native or any(c.table is not None and c.table.count > 256 for c in caches)
        for store in stores:
            await store.reembed(NamedHashingEmbedder("m2", 24))
        await compare(24)
        for store in stores:
            await store.add_message(sessions[store][6], MessageWrite(Role.USER, "few says more"))
            assert await store.delete_session(sessions[store][0])
        await compare(24)
        await _same_search(
            backend, reference, vector=NamedHashingEmbedder("m2", 24).embed_one("few says more"),
            k=3, owner_id="few",
        )  # fmt: skip
    finally:
        await backend.close()
        await reference.close()
