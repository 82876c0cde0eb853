"""What every backend holds whatever its own limits: long indexed values, huge messages,
the same words for text search, and a store dropped without close."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import warnings
from dataclasses import replace

import pytest

import convostore
from convostore import EventFilter, Store
from convostore.testing.fixtures import BackendUnderTest, StoreFactory
from convostore.testing.helpers import ALICE, new_session, say

# ------------------------------------------------------------------ indexed metadata


async def test_long_indexed_values_are_stored_found_and_compared_in_full(
    indexed_store: Store,
) -> None:
    shared = "ü" * 512 + "界" * 3000
    values = [
        shared + "a",
        shared + "b",
        shared,
        "x" * 100_000,
        "x" * 100_001,
        "short",
    ]
    sessions = [
        await indexed_store.create_session(ALICE, metadata={"tenant": value, "topic": value})
        for value in values
    ]
    for value, session in zip(values, sessions, strict=True):
        assert await indexed_store.find_sessions_by_metadata("tenant", value) == [session]
        assert await indexed_store.find_sessions_by_metadata("topic", value) == [session]
    assert await indexed_store.find_sessions_by_metadata("tenant", shared + "c") == []
    assert await indexed_store.find_sessions_by_metadata("tenant", "x" * 99_999) == []
    # Changing a long value moves the session from one value to the other.
    moved = await indexed_store.update_session(
        replace(sessions[0], metadata={"tenant": shared + "b"})
    )
    assert await indexed_store.find_sessions_by_metadata("tenant", shared + "a") == []
    assert await indexed_store.find_sessions_by_metadata("tenant", shared + "b") == [
        moved,
        await indexed_store.get_session(sessions[1].id),
    ]


async def test_a_second_store_without_indexed_metadata_keeps_the_index(
    connect_store: StoreFactory,
) -> None:
    first = await connect_store(indexed_metadata=["tenant"])
    if not first.capabilities.persistent:
        pytest.skip("a second store sees the first's data only on a persistent backend")
    session = await first.create_session(ALICE, metadata={"tenant": "acme"})
    second = await connect_store()
    assert await first.find_sessions_by_metadata("tenant", "acme") == [session]
    later = await second.create_session(ALICE, metadata={"tenant": "acme"})
    third = await connect_store(indexed_metadata=["tenant"])
    assert await third.find_sessions_by_metadata("tenant", "acme") == [session, later]


# ------------------------------------------------------------------ text search tokens


@pytest.mark.parametrize(
    ("content", "queries"),
    [
        ("Die Straße ist lang", ["strasse", "straße", "STRASSE", "Strasse"]),
        ("the ﬁnal answer", ["final", "ﬁnal", "FINAL"]),
        ("the final answer", ["ﬁnal"]),
        ("Crème brûlée", ["creme", "brulee", "CRÈME"]),
        ("ǅemal Ⅻ ①", ["džemal", "xii", "1"]),
    ],
)
async def test_text_search_matches_the_same_words_everywhere(
    store: Store, content: str, queries: list[str]
) -> None:
    session = await new_session(store)
    message = await store.add_message(session.id, say(content))
    await store.add_message(session.id, say("unrelated words only"))
    for query in queries:
        hits = await store.search(query, mode="text")
        assert [hit.message.id for hit in hits] == [message.id], query


# ------------------------------------------------------------------ huge messages


def _prose(size: int) -> str:
    sentence = "The quick brown fox jumps over the lazy dog while the river runs on. "
    return (sentence * (size // len(sentence) + 1))[:size]


def _distinct_words(size: int) -> str:
    words: list[str] = []
    total = 0
    number = 0
    while total < size:
        word = f"w{number:07d}"
        words.append(word)
        total += len(word) + 1
        number += 1
    return " ".join(words)[:size]


MEGABYTE = {"1MB-distinct-words": lambda: "needle " + _distinct_words(1 << 20)}
SEVERAL_MEGABYTES = {
    "3MB-distinct-words": lambda: "needle " + _distinct_words(3 << 20),
    "8MB-prose": lambda: "needle " + _prose(8 << 20),
}


@pytest.mark.parametrize("make", list(MEGABYTE.values()), ids=list(MEGABYTE))
async def test_huge_messages_are_stored_whole(store: Store, make: object) -> None:
    """What the text index holds of a huge message may be less than all its words (see
    the backend's documentation); the message itself is stored and read back whole."""
    await _stored_whole(store, make)


@pytest.mark.parametrize("make", list(SEVERAL_MEGABYTES.values()), ids=list(SEVERAL_MEGABYTES))
async def test_messages_of_several_megabytes_are_stored_whole(store: Store, make: object) -> None:
    await _stored_whole(store, make)


async def _stored_whole(store: Store, make: object) -> None:
    assert callable(make)
    content: str = make()
    session = await new_session(store)
    message = await store.add_message(session.id, say(content))
    [stored] = await store.messages(session.id)
    assert stored == message
    assert len(stored.content) == len(content)
    assert stored.content == content
    hits = await store.search("needle", mode="text")
    assert [hit.message.id for hit in hits] == [message.id]
    assert await store.read(session.id, EventFilter(text="NEEDLE")) == [message]


@pytest.mark.slow
async def test_a_100_megabyte_message_is_stored_whole(store: Store) -> None:
    content = "needle " + _prose(100 << 20)
    session = await new_session(store)
    message = await store.add_message(session.id, say(content))
    del content
    [stored] = await store.messages(session.id)
    assert stored == message
    hits = await store.search("needle", mode="text")
    assert [hit.message.id for hit in hits] == [message.id]


# ------------------------------------------------------------------ dropped stores


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
async def test_stores_dropped_without_close_release_their_threads(
    connect_store: StoreFactory, backend: BackendUnderTest
) -> None:
    # A first store opens whatever a backend opens once per process (a server). It is
    # closed: SQLite keeps a closed connection's descriptor while another connection of
    # the process still locks that file, to keep the locks POSIX would drop with it.
    await (await connect_store()).close()
    gc.collect()
    threads_before = set(threading.enumerate())
    descriptors_before = _open_descriptors()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stores = [await convostore.connect(backend()) for _ in range(50)]
        # The event loop's default executor (where name resolution runs) is the loop's,
        # bounded, and ends with it: not a store's thread.
        started = {
            thread
            for thread in set(threading.enumerate()) - threads_before
            if not thread.name.startswith("asyncio_")
        }
        del stores
        gc.collect()
    # A backend on asyncio closes its sockets on the loop's next turn (a transport is
    # closed by a callback of the loop).
    await asyncio.sleep(0)
    for thread in started:
        thread.join(timeout=30)
    assert [t.name for t in started if t.is_alive()] == []
    assert not started & set(threading.enumerate())
    assert _open_descriptors() <= descriptors_before
    dropped = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert len(dropped) >= 50
    assert "without close()" in str(dropped[0].message)
