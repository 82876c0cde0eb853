"""What is the FalkorDB backend's own: its URLs, the schema and indexes it creates in a
graph, the graph model a user's own Cypher walks, the pool, and a 10 MB message. What
every backend does is the contract suite's (tests/contract: test_crash.py kills its
server during appends)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

import convostore
from convostore import (
    EventFilter,
    InvalidArgumentError,
    MessageWrite,
    NotIndexedError,
    Role,
    Store,
)
from convostore.backends.cypher.values import metadata_entry
from convostore.embedding import HashingEmbedder
from tests.backends.graphs import ADA, FALKORDB, backend_of, store

FALKORDB.skip_without_driver(module=True)

from convostore.backends.falkordb import FalkorDBBackend, parse_falkordb_url  # noqa: E402

__all__ = ["store"]


url = FALKORDB.url_fixture()


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


# ---------------------------------------------------------------------------- schema


async def test_connect_creates_every_index_once(url: str) -> None:
    first = await convostore.connect(url, embedder=HashingEmbedder(16))
    second = await convostore.connect(url, embedder=HashingEmbedder(16))
    found = await backend_of(first, FalkorDBBackend)._inventory()
    await first.close()
    await second.close()
    for label, prop in [("User", "id"), ("Session", "owner_id"), ("Event", "session_id")]:
        assert f"RANGE {label}.{prop}" in found.keys
    assert "RANGE Event.seq" in found.keys
    assert "RANGE Session.metadata_entries" in found.keys
    assert "FULLTEXT Message.search_text" in found.keys
    assert "VECTOR Message.embedding" in found.keys
    assert found.vector_shape == (16, "cosine")


# ---------------------------------------------------------------------------- indexed keys


async def _entries(store: Store) -> dict[str, list[str]]:
    rows = (
        await backend_of(store, FalkorDBBackend).graph.query(
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
        backend = backend_of(store, FalkorDBBackend)
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
        await backend_of(store, FalkorDBBackend).graph.query(
            "MATCH (c:ConvostoreSchema {key: 'convostore'}) SET c.indexing_keys = ['colour']"
        )
        during = await store.create_session(ADA, metadata={"colour": "red"})
        assert await _entries(store) == {
            before.id: [],
            during.id: [metadata_entry("colour", "red")],
        }
        with pytest.raises(NotIndexedError):
            await store.find_sessions_by_metadata("colour", "red")
        assert await backend_of(store, FalkorDBBackend).add_indexed_keys(frozenset({"colour"})) == {
            "colour"
        }
        assert await store.find_sessions_by_metadata("colour", "red") == [before, during]
    finally:
        await store.close()


async def test_dropping_a_key_an_add_left_marked_stops_writes_indexing_it(url: str) -> None:
    """An add that stopped after marking its key leaves writes indexing it; a drop of
    the key ends that, and takes the entries written meanwhile."""
    store = await convostore.connect(url)
    try:
        await backend_of(store, FalkorDBBackend).graph.query(
            "MATCH (c:ConvostoreSchema {key: 'convostore'}) SET c.indexing_keys = ['colour']"
        )
        during = await store.create_session(ADA, metadata={"colour": "red"})
        assert await _entries(store) == {during.id: [metadata_entry("colour", "red")]}
        # It was never indexed (no lookup could use it), so the drop answers False.
        assert await store.drop_metadata_index("colour") is False
        after = await store.create_session(ADA, metadata={"colour": "red"})
        assert await _entries(store) == {during.id: [], after.id: []}
        assert await backend_of(store, FalkorDBBackend).indexed_keys() == frozenset()
    finally:
        await store.close()


async def test_a_key_dropped_while_it_is_being_added_is_not_recorded(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await convostore.connect(url)
    try:
        first = await store.create_session(ADA, metadata={"colour": "red"})
        backend = backend_of(store, FalkorDBBackend)
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


# ---------------------------------------------------------------------------- the pool


async def test_the_pool_waits_for_a_free_connection(url: str) -> None:
    store = await convostore.connect(url.replace("/graph_", "/pool_") + "?pool_max_size=2")
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
