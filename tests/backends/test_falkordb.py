"""What is the FalkorDB backend's own: its URLs, the schema and indexes it creates in a
graph, the graph model a user's own Cypher walks, a server killed during appends and
restarted from its files, the pool after a lost server, and a 10 MB message. What every
backend does is the contract suite's (tests/contract)."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import convostore
from convostore import (
    BackendUnavailableError,
    EventFilter,
    InvalidArgumentError,
    MessageWrite,
    NotIndexedError,
    Role,
    SchemaVersionError,
    Store,
    User,
)
from convostore.backends.cypher.values import metadata_entry
from convostore.embedding import HashingEmbedder
from tests.backends.support import missing_driver, server_unavailable

if skip_reason := missing_driver("falkordb", "falkordb"):
    pytest.skip(skip_reason, allow_module_level=True)

from convostore.backends.falkordb import SCHEMA_VERSION, FalkorDBBackend, parse_falkordb_url
from convostore.backends.falkordb.schema import indexes
from tests.servers.falkordb import FalkorDBServer, ServerUnavailable, TestServer, shared_server

ADA = User("ada", "Ada")
PLANNER = User("planner", "Planner", kind="agent")
_graphs = itertools.count(1)


@pytest.fixture(scope="module")
def server() -> TestServer:
    try:
        return shared_server()
    except ServerUnavailable as why:
        server_unavailable("falkordb", str(why))
        raise


def falkor_of(store: Store) -> FalkorDBBackend:
    """The FalkorDB backend under ``store`` (its graph and queries)."""
    assert isinstance(store.backend, FalkorDBBackend)
    return store.backend


@pytest.fixture
def url(server: TestServer) -> str:
    return server.url(f"backend_{os.getpid()}_{next(_graphs)}")


@pytest.fixture
async def store(url: str) -> AsyncIterator[Store]:
    opened = await convostore.connect(url)
    assert isinstance(opened.backend, FalkorDBBackend)
    yield opened
    await opened.close()


@pytest.fixture
def own_server() -> Iterator[FalkorDBServer]:
    """A server of this test's own, which it may kill."""
    server = FalkorDBServer()
    try:
        server.start()
    except ServerUnavailable as why:
        server_unavailable("falkordb", str(why))
    yield server
    server.stop()


# ---------------------------------------------------------------------------- URLs


def test_url_defaults_and_parts() -> None:
    target = parse_falkordb_url("falkordb://db.internal")
    assert (target.host, target.port, target.graph, target.tls) == (
        "db.internal",
        6379,
        "convostore",
        False,
    )
    target = parse_falkordb_url(
        "falkordbs://chat:s%40cret@db.internal:6380/chat.prod?pool_max_size=4&pool_timeout=5"
        "&ssl_ca_certs=/etc/ca.pem"
    )
    assert (target.username, target.password, target.graph, target.tls) == (
        "chat",
        "s@cret",
        "chat.prod",
        True,
    )
    assert (target.pool_max_size, target.pool_timeout) == (4, 5.0)
    assert target.ssl == {"ssl_ca_certs": "/etc/ca.pem"}
    assert "s@cret" not in target.where
    assert "s@cret" not in repr(target)


@pytest.mark.parametrize(
    "bad",
    [
        "falkordb://h/bad name",
        "falkordb://h/g?pool_max_size=0",
        "falkordb://h/g?pool_timeout=never",
        "falkordb://h/g?unknown=1",
        "falkordb://h/g?ssl_ca_certs=/ca.pem",
        "falkordbs://h/g?ssl_cert_reqs=maybe",
        "falkordb://h:notaport/g",
        "falkordb://h/g?pool_max_size=2&pool_max_size=3",
    ],
)
def test_bad_urls_are_refused(bad: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_falkordb_url(bad)


async def test_an_unreachable_server_is_backend_unavailable() -> None:
    with pytest.raises(BackendUnavailableError):
        await convostore.connect("falkordb://127.0.0.1:1/g?connect_timeout=2")


def test_a_missing_client_names_the_extra() -> None:
    script = (
        "import asyncio, sys\n"
        "sys.modules['falkordb'] = None\n"
        "import convostore\n"
        "try:\n"
        "    asyncio.run(convostore.connect('falkordb://h/g'))\n"
        "except convostore.BackendUnavailableError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'convostore[falkordb]'" in result.stdout


# ---------------------------------------------------------------------------- schema


async def test_connect_creates_every_index_once(url: str) -> None:
    first = await convostore.connect(url, embedder=HashingEmbedder(16))
    second = await convostore.connect(url, embedder=HashingEmbedder(16))
    found = await indexes(falkor_of(first)._schema_query)
    await first.close()
    await second.close()
    for label, prop in [("User", "id"), ("Session", "owner_id"), ("Event", "session_id")]:
        assert (label, prop, "RANGE") in found
    assert ("Event", "seq", "RANGE") in found
    assert ("Session", "metadata_entries", "RANGE") in found
    assert ("Message", "search_text", "FULLTEXT") in found
    assert ("Message", "embedding", "VECTOR") in found


async def test_a_newer_schema_is_refused(store: Store, url: str) -> None:
    await falkor_of(store).graph.query(
        "MATCH (c:ConvostoreSchema) SET c.version = $version", {"version": SCHEMA_VERSION + 1}
    )
    with pytest.raises(SchemaVersionError):
        await convostore.connect(url)


# ---------------------------------------------------------------------------- indexed keys


async def _entries(store: Store) -> dict[str, list[str]]:
    rows = (
        await falkor_of(store).graph.query(
            "MATCH (s:Session) RETURN s.id, s.metadata_entries ORDER BY s.id"
        )
    ).result_set
    return {session_id: sorted(entries or []) for session_id, entries in rows}


async def test_recording_and_dropping_a_key_is_one_query_and_a_rerun_writes_the_same(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await convostore.connect(url, indexed_metadata=["tenant"])
    try:
        for n in range(5):
            await store.create_session(ADA, metadata={"tenant": f"t{n % 2}", "colour": f"c{n}"})
        backend = falkor_of(store)
        writes: list[tuple[str, dict[str, Any]]] = []
        run = backend._run

        async def counting(query: str, parameters: dict[str, Any], *, write: bool) -> Any:
            if " SET " in query:  # the schema's reads run as writes too; these write
                writes.append((query, parameters))
            return await run(query, parameters, write=write)

        monkeypatch.setattr(backend, "_run", counting)
        # The first query only marks the key as being indexed (writes from then on index
        # it themselves); the second, one transaction on FalkorDB, records it with every
        # entry: a failure (or a crash) leaves the key indexed with every entry, or not.
        assert await backend.add_indexed_keys(frozenset({"colour"})) == {"tenant", "colour"}
        assert len(writes) == 2
        added = await _entries(store)
        assert all(len(entries) == 2 for entries in added.values())
        # A retry after a lost reply runs the same query again: nothing doubles.
        await run(*writes[1], write=True)
        assert await _entries(store) == added
        assert await backend.indexed_keys() == {"tenant", "colour"}
        writes.clear()
        assert await backend.remove_indexed_key("tenant") is True
        assert len(writes) == 1
        assert all(len(entries) == 1 for entries in (await _entries(store)).values())
        assert await backend.remove_indexed_key("tenant") is False
        assert await backend.indexed_keys() == {"colour"}
        (found,) = await store.find_sessions_by_metadata("colour", "c3")
        assert found.metadata["colour"] == "c3"
    finally:
        await store.close()


async def test_a_key_marked_but_not_yet_recorded_is_written_but_not_searchable(
    url: str,
) -> None:
    """What an add that stopped after marking its key leaves: writes index the key, a
    lookup refuses it, and the next add of it backfills the rest."""
    store = await convostore.connect(url)
    try:
        before = await store.create_session(ADA, metadata={"colour": "red"})
        await falkor_of(store).graph.query(
            "MATCH (c:ConvostoreSchema {key: 'convostore'}) SET c.indexing_keys = ['colour']"
        )
        during = await store.create_session(ADA, metadata={"colour": "red"})
        assert await _entries(store) == {
            before.id: [],
            during.id: [metadata_entry("colour", "red")],
        }
        with pytest.raises(NotIndexedError):
            await store.find_sessions_by_metadata("colour", "red")
        assert await falkor_of(store).add_indexed_keys(frozenset({"colour"})) == {"colour"}
        assert await store.find_sessions_by_metadata("colour", "red") == [before, during]
    finally:
        await store.close()


async def test_dropping_a_key_an_add_left_marked_stops_writes_indexing_it(url: str) -> None:
    """An add that stopped after marking its key leaves writes indexing it; a drop of
    the key ends that, and takes the entries written meanwhile."""
    store = await convostore.connect(url)
    try:
        await falkor_of(store).graph.query(
            "MATCH (c:ConvostoreSchema {key: 'convostore'}) SET c.indexing_keys = ['colour']"
        )
        during = await store.create_session(ADA, metadata={"colour": "red"})
        assert await _entries(store) == {during.id: [metadata_entry("colour", "red")]}
        # It was never indexed (no lookup could use it), so the drop answers False.
        assert await store.drop_metadata_index("colour") is False
        after = await store.create_session(ADA, metadata={"colour": "red"})
        assert await _entries(store) == {during.id: [], after.id: []}
        assert await falkor_of(store).indexed_keys() == frozenset()
    finally:
        await store.close()


async def test_a_key_dropped_while_it_is_being_added_is_not_recorded(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await convostore.connect(url)
    try:
        first = await store.create_session(ADA, metadata={"colour": "red"})
        backend = falkor_of(store)
        run = backend._run

        async def dropping_after_the_mark(
            query: str, parameters: dict[str, Any], *, write: bool
        ) -> Any:
            rows = await run(query, parameters, write=write)
            if "indexing_keys = coalesce" in query:  # the add has marked its key
                assert await backend.remove_indexed_key("colour") is False
            return rows

        monkeypatch.setattr(backend, "_run", dropping_after_the_mark)
        # The drop came last: the add records nothing, and nothing is indexed.
        assert await backend.add_indexed_keys(frozenset({"colour"})) == frozenset()
        monkeypatch.setattr(backend, "_run", run)
        second = await store.create_session(ADA, metadata={"colour": "red"})
        assert await _entries(store) == {first.id: [], second.id: []}
        with pytest.raises(NotIndexedError):
            await store.find_sessions_by_metadata("colour", "red")
    finally:
        await store.close()


# ---------------------------------------------------------------------------- graph model


async def test_the_graph_answers_a_users_own_cypher(store: Store) -> None:
    session = await store.create_session(ADA, title="Launch")
    first = await store.add_message(
        session.id, MessageWrite(Role.USER, "Launch in March?", author=ADA, recipients=[PLANNER])
    )
    await store.add_message(
        session.id,
        MessageWrite(
            Role.ASSISTANT, "Checking", author=PLANNER, recipients=[ADA], in_reply_to=first.id
        ),
    )
    other = await store.create_session(ADA)
    await store.add_message(other.id, MessageWrite(Role.USER, "hello", author=ADA))
    graph = falkor_of(store).graph
    # Every session where an agent was a recipient.
    rows = (
        await graph.query(
            "MATCH (s:Session)-[:HAS_EVENT]->(:Message)-[:RECIPIENT]->(u:User {kind: 'agent'})"
            " RETURN DISTINCT s.id"
        )
    ).result_set
    assert rows == [[session.id]]
    # The conversation in order, with authors and replies.
    rows = (
        await graph.query(
            "MATCH (s:Session {id: $id})-[h:HAS_EVENT]->(m:Message)-[:AUTHOR]->(a:User)"
            " OPTIONAL MATCH (m)-[:IN_REPLY_TO]->(r) RETURN a.id, m.content, r.id"
            " ORDER BY h.seq",
            {"id": session.id},
        )
    ).result_set
    assert rows == [["ada", "Launch in March?", None], ["planner", "Checking", first.id]]
    # Recipients in the order written.
    rows = (
        await graph.query(
            "MATCH (s:Session)-[:OWNER]->(:User {id: 'ada'}) RETURN count(s)",
        )
    ).result_set
    assert rows == [[2]]


async def test_a_ten_megabyte_message_round_trips(store: Store) -> None:
    words = [f"wörd{n % 5000} Ünï" for n in range(800_000)]
    content = " ".join(words)[: 10 * 1024 * 1024]
    session = await store.create_session(ADA)
    await store.add_message(session.id, MessageWrite(Role.USER, content, author=ADA))
    [message] = await store.messages(session.id)
    assert message.content == content
    assert await store.read(session.id, EventFilter(text="WÖRD4999 ünï")) == [message]
    [hit] = await store.search("word4999", mode="text")
    assert hit.message.id == message.id


# ---------------------------------------------------------------------------- a lost server


async def test_killed_during_appends_every_acknowledged_append_survives(
    own_server: FalkorDBServer,
) -> None:
    url = own_server.url("durable")
    store = await convostore.connect(url)
    session = await store.create_session(ADA)
    acknowledged: list[str] = []
    enough = asyncio.Event()

    async def writer(index: int) -> None:
        for n in itertools.count():
            message = await store.add_message(
                session.id, MessageWrite(Role.USER, f"{index}-{n}", author=ADA)
            )
            acknowledged.append(message.id)
            if len(acknowledged) >= 60:
                enough.set()

    writers = [asyncio.create_task(writer(i)) for i in range(4)]
    await enough.wait()
    own_server.kill()
    results = await asyncio.gather(*writers, return_exceptions=True)
    assert all(isinstance(r, BackendUnavailableError) for r in results), results
    with pytest.raises(BackendUnavailableError):
        await store.get_session(session.id)

    own_server.start()
    # The same store's pool finds its connections lost and opens new ones.
    log = await store.read(session.id)
    stored = {event.id for event in log}
    assert set(acknowledged) <= stored
    assert [event.seq for event in log] == list(range(1, len(log) + 1))
    again = await store.add_message(session.id, MessageWrite(Role.USER, "after", author=ADA))
    assert again.seq == len(log) + 1
    await store.close()


async def test_the_pool_waits_for_a_free_connection(url: str) -> None:
    store = await convostore.connect(url.replace("/backend_", "/pool_") + "?pool_max_size=2")
    session = await store.create_session(ADA)
    results: list[Any] = await asyncio.gather(
        *(store.add_message(session.id, MessageWrite(Role.USER, f"m{n}")) for n in range(20))
    )
    assert sorted(m.seq for m in results) == list(range(1, 21))
    await store.close()


# ---------------------------------------------------------------------------- processes

_WRITER = """
import asyncio, sys
import convostore
from convostore import EventWrite, MessageWrite, Role

async def main(url, session_id, index):
    async with await convostore.connect(url) as store:
        applied = await store.append_events(
            session_id, [EventWrite("APP.RACE", {"w": index})], expected_version=0
        )
        for n in range(10):
            await store.add_message(session_id, MessageWrite(Role.USER, f"{index}-{n}"))
        print("applied" if applied else "refused")

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
"""


async def test_writers_in_several_processes_get_gap_free_seq(url: str) -> None:
    store = await convostore.connect(url)
    session = await store.create_session(ADA)
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _WRITER,
            url,
            session.id,
            str(index),
            stdout=asyncio.subprocess.PIPE,
        )
        for index in range(4)
    ]
    outputs = [(await process.communicate())[0].decode().strip() for process in processes]
    assert all(process.returncode == 0 for process in processes)
    # Every process first tries a batch for version 0: exactly one applies.
    assert sorted(outputs) == ["applied"] + ["refused"] * 3
    log = await store.read(session.id)
    assert [event.seq for event in log] == list(range(1, 42))
    assert [event.type for event in log].count("APP.RACE") == 1
    assert await store.version(session.id) == 41
    await store.close()
