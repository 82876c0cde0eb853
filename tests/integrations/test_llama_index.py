"""LlamaIndex's chat stores on every backend, LlamaIndex's own tests of its SQL chat
store, `Memory` and chat memory buffers run against them, and the ``llamaindex-sql``
importer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock, ToolCallBlock
from llama_index.core.memory import ChatMemoryBuffer, Memory
from llama_index.core.storage.chat_store.base_db import MessageStatus
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore

import convostore.sync
from convostore import EventFilter, Role, Store
from convostore.cli import main
from convostore.errors import StoreError
from convostore.integrations.importers import import_source
from convostore.integrations.llama_index import (
    ConvostoreChatStore,
    ConvostoreDBChatStore,
    session_id_for,
)
from convostore.testing.fixtures import BackendUnderTest
from tests.integrations.upstream import run_snapshot_suite


def _conversation() -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="Weather in Paris?"),
        ChatMessage(
            role="assistant",
            blocks=[
                TextBlock(text="Checking."),
                ToolCallBlock(tool_call_id="c1", tool_name="weather", tool_kwargs={"city": "P"}),
            ],
        ),
        ChatMessage(role="tool", content="18C", additional_kwargs={"tool_call_id": "c1"}),
        ChatMessage(
            role="user",
            blocks=[TextBlock(text="And this?"), ImageBlock(image=b"\x89PNG", image_mimetype="x")],
        ),
        ChatMessage(role="assistant", content="Sunny, 18C.", additional_kwargs={"n": 1}),
    ]


async def test_every_message_reads_back_equal_and_as_convostore_messages(store: Store) -> None:
    chat_store = ConvostoreChatStore(store)
    sent = _conversation()
    for message in sent:
        await chat_store.async_add_message("paris", message)
    assert await chat_store.aget_messages("paris") == sent
    stored = await store.messages(session_id_for("chat_store", "paris"))
    assert [m.role for m in stored] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.USER,
        Role.ASSISTANT,
    ]
    assert [(c.id, c.name, c.arguments) for c in stored[2].tool_calls] == [
        ("c1", "weather", {"city": "P"})
    ]
    assert stored[3].tool_call_id == "c1"
    assert stored[5].content == "Sunny, 18C."


async def test_keys_list_in_the_order_first_written(store: Store) -> None:
    chat_store = ConvostoreChatStore(store)
    for key in ["zeta", "alpha", "mid", "alpha", "zeta"]:
        await chat_store.async_add_message(key, ChatMessage(role="user", content=key))
    assert await chat_store.aget_keys() == ["zeta", "alpha", "mid"]
    other = ConvostoreChatStore(store, namespace="other")
    await other.async_add_message("alpha", ChatMessage(role="user", content="elsewhere"))
    assert await other.aget_keys() == ["alpha"]
    assert [m.content for m in await chat_store.aget_messages("alpha")] == ["alpha", "alpha"]


async def test_positions_insert_delete_and_replace(store: Store) -> None:
    chat_store = ConvostoreChatStore(store)

    def contents(messages: list[ChatMessage] | None) -> list[str | None]:
        return [m.content for m in messages or []]

    await chat_store.aset_messages("k", [ChatMessage(role="user", content=c) for c in "abc"])
    await chat_store.async_add_message("k", ChatMessage(role="user", content="first"), idx=0)
    await chat_store.async_add_message("k", ChatMessage(role="user", content="x"), idx=2)
    assert contents(await chat_store.aget_messages("k")) == ["first", "a", "x", "b", "c"]
    deleted = await chat_store.adelete_message("k", 1)
    assert deleted is not None
    assert deleted.content == "a"
    assert await chat_store.adelete_message("k", 99) is None
    last = await chat_store.adelete_last_message("k")
    assert last is not None
    assert last.content == "c"
    assert contents(await chat_store.aget_messages("k")) == ["first", "x", "b"]
    # The full log keeps every write: an insert writes the messages after it again.
    assert len(await store.messages(session_id_for("chat_store", "k"))) == 3 + 4 + 3
    await chat_store.aset_messages("k", [ChatMessage(role="user", content="only")])
    assert contents(await chat_store.aget_messages("k")) == ["only"]
    assert contents(await chat_store.adelete_messages("k")) == ["only"]
    assert await chat_store.aget_keys() == []
    assert await chat_store.adelete_messages("k") is None


async def test_active_and_archived_map_onto_the_view_and_the_log(store: Store) -> None:
    db = ConvostoreDBChatStore(store, table_name="memory")
    messages = [ChatMessage(role="user", content=f"m{i}") for i in range(6)]
    await db.add_messages("s", messages)

    async def contents(status: MessageStatus | None = MessageStatus.ACTIVE) -> list[str | None]:
        return [m.content for m in await db.get_messages("s", status=status)]

    assert [m.content for m in await db.archive_oldest_messages("s", 2)] == ["m0", "m1"]
    assert [m.content for m in await db.delete_oldest_messages("s", 1)] == ["m2"]
    assert await contents() == ["m3", "m4", "m5"]
    assert await contents(MessageStatus.ARCHIVED) == ["m0", "m1"]
    assert await contents(None) == ["m0", "m1", "m3", "m4", "m5"]
    assert await db.count_messages("s") == 3
    assert await db.count_messages("s", MessageStatus.ARCHIVED) == 2
    page = await db.get_messages("s", status=None, limit=2, offset=1)
    assert [m.content for m in page] == ["m1", "m3"]
    # idx is the message's position in the log (its seq), archived or active.
    log = await store.messages(session_id_for("memory", "s"))
    by_content = {m.content: m.seq for m in log}
    removed = await db.delete_message("s", by_content["m0"])
    assert removed is not None
    assert removed.content == "m0"
    removed = await db.delete_message("s", by_content["m4"])
    assert removed is not None
    assert removed.content == "m4"
    assert await db.delete_message("s", by_content["m2"]) is None
    assert await contents(None) == ["m1", "m3", "m5"]
    await db.add_message("s", ChatMessage(role="user", content="old"), MessageStatus.ARCHIVED)
    assert await contents(MessageStatus.ARCHIVED) == ["m1", "old"]
    assert await contents() == ["m3", "m5"]
    await db.delete_messages("s", MessageStatus.ARCHIVED)
    assert (await contents(None), await contents()) == (["m3", "m5"], ["m3", "m5"])
    await db.set_messages("s", [ChatMessage(role="user", content="new")])
    assert await contents(None) == ["new"]
    await db.delete_messages("s", MessageStatus.ACTIVE)
    assert await contents(None) == []
    assert await db.get_keys() == ["s"]
    await db.delete_messages("s")
    assert await db.get_keys() == []
    # Every message written stays in the store's full log until the key is deleted.
    assert await store.read(session_id_for("memory", "s")) == []


async def test_memory_archives_into_the_full_log(store: Store) -> None:
    db = ConvostoreDBChatStore(store)
    memory = Memory.from_defaults(
        session_id="ada", chat_store=db, token_limit=60, chat_history_token_ratio=0.5
    )
    for i in range(12):
        role = "user" if i % 2 == 0 else "assistant"
        await memory.aput(ChatMessage(role=role, content=f"message {i} with a few more words"))
    active = await db.get_messages("ada")
    archived = await db.get_messages("ada", status=MessageStatus.ARCHIVED)
    assert archived
    assert active
    assert [m.content for m in archived + active] == [
        f"message {i} with a few more words" for i in range(12)
    ]
    assert active[0].role == "user"
    view = await store.read(
        session_id_for("llama_index_memory", "ada"), EventFilter(active_view=True)
    )
    assert len([e for e in view if e.type == "MESSAGE"]) == len(active)


def test_blocking_methods_on_a_sync_store_inside_a_running_loop(backend: BackendUnderTest) -> None:
    with convostore.sync.connect(backend()) as store:
        chat_store = ConvostoreChatStore(store)
        db = ConvostoreDBChatStore(store)

        async def inside_a_loop() -> tuple[list[str | None], list[str | None]]:
            chat_store.add_message("k", ChatMessage(role="user", content="hi"))
            buffer = ChatMemoryBuffer.from_defaults(chat_store=chat_store, chat_store_key="b")
            buffer.put(ChatMessage(role="user", content="buffered"))
            memory = Memory.from_defaults(session_id="m", chat_store=db)
            # LlamaIndex runs it on a loop of its own in another thread.
            memory.put(ChatMessage(role="user", content="remembered"))
            # Awaited on this loop, not the sync store's.
            await chat_store.async_add_message("k", ChatMessage(role="assistant", content="yo"))
            return (
                [m.content for m in chat_store.get_messages("k")],
                [m.content for m in memory.get_all() + buffer.get()],
            )

        assert asyncio.run(inside_a_loop()) == (["hi", "yo"], ["remembered", "buffered"])
        assert ConvostoreChatStore(store).get_keys() == ["k", "b"]


async def test_async_methods_awaited_on_other_loops(store: Store) -> None:
    chat_store = ConvostoreChatStore(store)
    db = ConvostoreDBChatStore(store)

    def on_a_loop_of_its_own() -> list[str | None]:
        async def run() -> list[str | None]:
            await chat_store.async_add_message("k", ChatMessage(role="user", content="away"))
            await db.add_message("k", ChatMessage(role="user", content="db"))
            return [m.content for m in await chat_store.aget_messages("k")]

        return asyncio.run(run())

    assert await asyncio.to_thread(on_a_loop_of_its_own) == ["away"]
    assert [m.content for m in await db.get_messages("k")] == ["db"]
    # Called on the async store's own loop, a blocking method cannot wait: it says so.
    with pytest.raises(StoreError, match="own event loop"):
        chat_store.get_messages("k")
    # Memory's blocking methods run the async ones on a loop of their own in another
    # thread while this loop waits for them: the call says so, rather than hang, and
    # writes nothing.
    memory = Memory.from_defaults(session_id="blocked", chat_store=db)
    with pytest.raises(StoreError, match="blocked"):
        memory.put(ChatMessage(role="user", content="never"))
    await asyncio.sleep(0.05)
    assert await db.get_messages("blocked", status=None) == []


async def test_llamaindex_sql_import(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    peer = SQLAlchemyChatStore(
        table_name="llama_index_memory", async_database_uri=f"sqlite+aiosqlite:///{path}"
    )
    sent = _conversation()
    await peer.add_messages("ada", sent)
    await peer.archive_oldest_messages("ada", 2)
    await peer.add_message("bob", ChatMessage(role="user", content="hello"))
    seen: list[tuple[int, int, str]] = []
    report = await import_source("llamaindex-sql", path, store, progress=lambda *a: seen.append(a))
    ada, bob = (session_id_for("llama_index_memory", key) for key in ("ada", "bob"))
    assert (report.imported, report.events_written) == ([ada, bob], 8)
    assert [done for done, _, _ in seen] == [1, 2]
    db = ConvostoreDBChatStore(store)
    assert await db.get_keys() == ["ada", "bob"]
    assert await db.get_messages("ada") == sent[2:]
    assert await db.get_messages("ada", status=MessageStatus.ARCHIVED) == sent[:2]
    again = await import_source("llamaindex-sql", path, store)
    assert (again.unchanged, again.events_written) == ([ada, bob], 0)
    await peer.add_message("bob", ChatMessage(role="assistant", content="hi"))
    await peer.archive_oldest_messages("bob", 1)
    grown = await import_source("llamaindex-sql", path, store)
    assert (grown.imported, grown.events_written) == ([bob], 2)
    assert [m.content for m in await db.get_messages("bob")] == ["hi"]
    assert [m.content for m in await db.get_messages("bob", status=None)] == ["hello", "hi"]
    if peer._async_engine is not None:
        await peer._async_engine.dispose()


def test_llamaindex_sql_import_command(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "memory.db"

    async def write() -> None:
        peer = SQLAlchemyChatStore(
            table_name="llama_index_memory", async_database_uri=f"sqlite+aiosqlite:///{path}"
        )
        await peer.add_message("ada", ChatMessage(role="user", content="hi"))
        if peer._async_engine is not None:
            await peer._async_engine.dispose()

    asyncio.run(write())
    url = f"sqlite:///{tmp_path / 'to.db'}"
    assert main(["import", "llamaindex-sql", str(path), "--to", url]) == 0
    assert "1 session(s) imported" in capsys.readouterr().out
    assert main(["import", "llamaindex-sql", str(tmp_path / "none.db"), "--to", url]) == 1


# ---------------------------------------------------------------- LlamaIndex's own tests

LLAMA_INDEX = "fenghaitao/llama_index"
SELECTED = ["llama-index-core/tests/storage/chat_store", "llama-index-core/tests/memory"]
# LlamaIndex's own stores pass 90 of these 96 on the installed version (6 are skew).
MINIMUM_PASSED = 79


def test_llama_index_own_tests(backend: BackendUnderTest) -> None:
    result = run_snapshot_suite(backend, LLAMA_INDEX, SELECTED, "llama_index")
    assert not result.failed, result.output
    assert len(result.passed) >= MINIMUM_PASSED, result.summary()
