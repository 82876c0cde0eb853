"""SQLite's inline reads: a window of the newest events and a row by key run on the
caller's thread, on a connection of their own, and see every write answered before
them; a window with conditions, a large one and every other read go through the reader
threads."""

from __future__ import annotations

from pathlib import Path

import pytest

import convostore
from convostore import Event, EventFilter, Message, MessageWrite, Role, Store
from convostore.backends.sqlite import inline as inline_module
from tests.backends.sqlite.support import ADA, db_url, sqlite_of


@pytest.fixture(autouse=True)
def never_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about where reads run, not about timing (see the pacer's test)."""
    monkeypatch.setattr(inline_module, "INLINE_LIMIT_S", 3600.0)


def contents(events: list[Event]) -> list[str]:
    return [event.content for event in events if isinstance(event, Message)]


def inline_reads(store: Store) -> int:
    reader = sqlite_of(store)._inline_reader
    assert reader is not None
    return reader.ran


async def test_windows_and_rows_by_key_are_read_inline(store: Store) -> None:
    session = await store.create_session(ADA)
    for n in range(30):
        role = Role.USER if n % 2 == 0 else Role.ASSISTANT
        await store.add_message(session.id, MessageWrite(role, f"m{n}"))
    before = inline_reads(store)
    window = await store.read(session.id, EventFilter(last=10))
    assert contents(window) == [f"m{n}" for n in range(20, 30)]
    assert await store.get_session(session.id) is not None
    assert await store.version(session.id) == 30
    assert await store.get_user("ada") == ADA
    assert inline_reads(store) == before + 4

    # A condition may make a read scan far back for its matches, and a large window
    # decodes much: both go through the reader threads, with the same answers.
    users = await store.read(session.id, EventFilter(last=4, roles=[Role.USER]))
    assert contents(users) == ["m22", "m24", "m26", "m28"]
    everything = await store.read(session.id, EventFilter(last=500))
    assert len(everything) == 30
    assert len(await store.read(session.id)) == 30
    assert inline_reads(store) == before + 4


async def test_an_inline_read_sees_every_write_answered_before_it(store: Store) -> None:
    session = await store.create_session(ADA)
    for n in range(60):
        written = await store.add_message(session.id, MessageWrite(Role.USER, f"m{n}"))
        (newest,) = await store.read(session.id, EventFilter(last=1))
        assert newest.id == written.id
        assert await store.version(session.id) == n + 1
    fresh = await store.set_title(session.id, "titled")
    assert (await store.get_session(session.id)) == fresh


async def test_another_store_on_the_file_sees_the_writes_inline(db_path: Path) -> None:
    async with (
        await convostore.connect(db_url(db_path)) as writer,
        await convostore.connect(db_url(db_path)) as reader,
    ):
        session = await writer.create_session(ADA)
        before = inline_reads(reader)
        for n in range(10):
            await writer.add_message(session.id, MessageWrite(Role.USER, f"m{n}"))
            window = await reader.read(session.id, EventFilter(last=2))
            assert contents(window)[-1] == f"m{n}"
        assert inline_reads(reader) == before + 10


async def test_after_close_reads_are_refused(store: Store) -> None:
    session = await store.create_session(ADA)
    await store.close()
    with pytest.raises(convostore.StoreClosedError):
        await store.read(session.id, EventFilter(last=5))
    with pytest.raises(convostore.StoreClosedError):
        await sqlite_of(store).get_session(session.id)
