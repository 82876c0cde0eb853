"""Each framework adapter on convostore's SQLite backend against the framework's own
default SQLite store, in one run, on fresh files:

- OpenAI Agents SDK: `ConvostoreSession` against `SQLiteSession`: ``add_items`` of one
  item; ``get_items(limit=20)`` on a long session.
- Google ADK: `ConvostoreSessionService` against `SqliteSessionService` (what ADK's
  ``sqlite://`` URI opens): ``append_event``; ``get_session`` with
  ``num_recent_events=20``.
- LangChain: `ConvostoreChatMessageHistory` against `SQLChatMessageHistory` (SQLite):
  ``add_messages`` of one message; reading a whole history (LangChain's history has no
  last-N read).
- LangGraph: `ConvostoreSaver` against `AsyncSqliteSaver`: ``aput`` of a checkpoint;
  ``aget_tuple`` of the latest, and ``alist(limit=20)``, on a long thread.
- Strands Agents: `ConvostoreSessionRepository` (on a `convostore.sync` store, as a
  Strands app holds it) against `FileSessionManager` (Strands' default: a JSON file per
  message): ``create_message`` of one message, at SQLite's default ``synchronous=FULL``
  (an fsync per write) and at ``NORMAL`` (the file store writes without an fsync);
  ``list_messages`` of a whole long session, which is what restoring an agent reads.
  Strands' calls are blocking, so both run on the benchmark's thread.
- LlamaIndex: `ConvostoreDBChatStore` against `SQLAlchemyChatStore` on SQLite (what
  `Memory` uses): ``add_message``; ``get_messages`` of the active queue (what `Memory`
  reads before each call) on a long history.
- Microsoft Agent Framework: `ConvostoreHistoryProvider` against `FileHistoryProvider`:
  ``save_messages`` of one new message (both read what is stored to find what is new);
  ``get_messages`` on a long history.
- Pydantic AI: `ConvostoreConversationStore` against `InMemoryConversationStore` (its only
  shipped store, in memory): ``save`` of a conversation one message longer;
  ``load(limit=20)`` of a long one.

Figures are operations per second (higher is better); the ratio is convostore over the
peer (above 1: convostore is faster). The target is a ratio above 1 on every line.

    .venv/bin/python benchmarks/frameworks.py [--adds N] [--history N] [--reads N]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import convostore
from convostore import Store

Operation = Callable[[int], Awaitable[object]]


def _same(call: Callable[[], Awaitable[object]]) -> Operation:
    """An operation that makes the same call every time."""

    async def operation(index: int) -> object:
        return await call()

    return operation


async def _rate(operation: Operation, count: int) -> float:
    """Operations per second over ``count`` calls, after one warm-up call."""
    await operation(-1)
    started = time.perf_counter()
    for index in range(count):
        await operation(index)
    return count / (time.perf_counter() - started)


def _line(name: str, ours: float, peer: float) -> None:
    ratio = ours / peer
    verdict = "met" if ratio > 1 else "MISSED"
    print(f"  {name:<44} {ours:>10,.0f} {peer:>10,.0f} {ratio:>7.2f}  {verdict}")


async def _store(folder: Path) -> Store:
    return await convostore.connect(f"sqlite:///{folder / f'{uuid.uuid4().hex}.db'}")


async def openai_agents(folder: Path, adds: int, history: int, reads: int) -> None:
    from agents import SQLiteSession

    from convostore.integrations.openai_agents import ConvostoreSession

    store = await _store(folder)
    ours = ConvostoreSession("bench", store)
    peer = SQLiteSession("bench", folder / "agents.db")

    def add_to(session: Any) -> Operation:
        return lambda i: session.add_items([{"role": "user", "content": f"message {i}"}])

    _line("openai-agents add_items (1 item)", *[await _rate(add_to(s), adds) for s in (ours, peer)])
    items: list[Any] = [{"role": "user", "content": f"old {i}"} for i in range(history)]
    await ours.add_items(items)
    await peer.add_items(items)
    rates = [await _rate(_same(partial(s.get_items, limit=20)), reads) for s in (ours, peer)]
    _line(f"openai-agents get_items(limit=20) of {history + adds:,}", *rates)
    peer.close()
    await store.close()


async def adk(folder: Path, adds: int, history: int, reads: int) -> None:
    from google.adk.events.event import Event
    from google.adk.sessions.base_session_service import GetSessionConfig
    from google.adk.sessions.sqlite_session_service import SqliteSessionService
    from google.genai import types

    from convostore.integrations.adk import ConvostoreSessionService

    store = await _store(folder)
    services = [ConvostoreSessionService(store), SqliteSessionService(str(folder / "adk.db"))]
    sessions = [
        await service.create_session(app_name="bench", user_id="u", session_id="s")
        for service in services
    ]

    def event(i: int) -> Event:
        text = types.Content(role="user", parts=[types.Part(text=f"message {i}")])
        return Event(invocation_id="i", author="user", content=text)

    def append_to(service: Any, session: Any) -> Operation:
        return lambda i: service.append_event(session, event(i))

    rates = [await _rate(append_to(sv, s), adds) for sv, s in zip(services, sessions, strict=True)]
    _line("adk append_event", *rates)
    for service, session in zip(services, sessions, strict=True):
        for i in range(history):
            await service.append_event(session, event(i))
    config = GetSessionConfig(num_recent_events=20)
    rates = [
        await _rate(
            _same(
                partial(
                    sv.get_session, app_name="bench", user_id="u", session_id="s", config=config
                )
            ),
            reads,
        )
        for sv in services
    ]
    _line(f"adk get_session(num_recent_events=20) of {history + adds:,}", *rates)
    await store.close()


async def langchain(folder: Path, adds: int, history: int, reads: int) -> None:
    from langchain_community.chat_message_histories import SQLChatMessageHistory
    from langchain_core.messages import HumanMessage

    from convostore.integrations.langchain import ConvostoreChatMessageHistory

    store = await _store(folder)
    ours = ConvostoreChatMessageHistory("bench", store)
    peer = SQLChatMessageHistory(
        "bench", connection=f"sqlite+aiosqlite:///{folder / 'lc.db'}", async_mode=True
    )

    def add_to(history_: Any) -> Operation:
        return lambda i: history_.aadd_messages([HumanMessage(f"message {i}")])

    _line(
        "langchain aadd_messages (1 message)", *[await _rate(add_to(h), adds) for h in (ours, peer)]
    )
    batch = [HumanMessage(f"old {i}") for i in range(history)]
    await ours.aadd_messages(batch)
    await peer.aadd_messages(batch)
    rates = [await _rate(_same(h.aget_messages), max(reads // 10, 5)) for h in (ours, peer)]
    _line(f"langchain aget_messages of {history + adds:,}", *rates)
    await store.close()


async def langgraph(folder: Path, adds: int, history: int, reads: int) -> None:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from convostore.integrations.langgraph import ConvostoreSaver

    store = await _store(folder)
    async with AsyncSqliteSaver.from_conn_string(str(folder / "lg.db")) as peer:
        savers: list[Any] = [ConvostoreSaver(store, mirror_messages=False), peer]
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

        def put_to(saver: Any) -> Operation:
            async def put(i: int) -> object:
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = {"counter": i, "note": f"step {i}"}
                checkpoint["channel_versions"] = {"counter": i + 2, "note": i + 2}
                return await saver.aput(config, checkpoint, {"step": i}, {"counter": i + 2})

            return put

        _line("langgraph aput", *[await _rate(put_to(s), adds) for s in savers])
        for saver in savers:
            put = put_to(saver)
            for i in range(history):
                await put(i)
        rates = [await _rate(_same(partial(s.aget_tuple, config)), reads) for s in savers]
        _line(f"langgraph aget_tuple (latest) of {history + adds:,}", *rates)

        async def listing(saver: Any) -> list[Any]:
            return [found async for found in saver.alist(config, limit=20)]

        rates = [await _rate(_same(partial(listing, s)), reads) for s in savers]
        _line(f"langgraph alist(limit=20) of {history + adds:,}", *rates)
    await store.close()


async def strands(folder: Path, adds: int, history: int, reads: int) -> None:
    from strands.session.file_session_manager import FileSessionManager
    from strands.types.session import Session, SessionAgent, SessionMessage, SessionType

    import convostore.sync
    from convostore.integrations.strands import ConvostoreSessionRepository

    def message(index: int) -> SessionMessage:
        text: Any = {"role": "user", "content": [{"text": f"message {index}"}]}
        return SessionMessage.from_message(text, index)

    def add_to(repository: Any, counter: Iterator[int]) -> Operation:
        async def add(i: int) -> object:
            return repository.create_message("bench", "agent", message(next(counter)))

        return add

    def restore(repository: Any) -> Operation:
        async def listing(i: int) -> object:
            return repository.list_messages("bench", "agent")

        return listing

    for synchronous in ("full", "normal"):
        peer = FileSessionManager(session_id="bench", storage_dir=str(folder / synchronous))
        peer.create_agent("bench", SessionAgent("agent", {}, {}))
        peer_counter = iter(range(10**9))
        url = f"sqlite:///{folder / f'strands-{synchronous}.db'}?synchronous={synchronous}"
        with convostore.sync.connect(url) as store:
            ours = ConvostoreSessionRepository(store)
            ours.create_session(Session("bench", SessionType.AGENT))
            ours.create_agent("bench", SessionAgent("agent", {}, {}))
            counter = iter(range(10**9))
            rates = [await _rate(add_to(ours, counter), adds)]
            rates.append(await _rate(add_to(peer, peer_counter), adds))
            _line(f"strands create_message (1 message, {synchronous})", *rates)
            if synchronous == "full":
                continue
            for repository, numbers in ((ours, counter), (peer, peer_counter)):
                for _ in range(history):
                    repository.create_message("bench", "agent", message(next(numbers)))
            rates = [await _rate(restore(r), max(reads // 10, 5)) for r in (ours, peer)]
            count = len(ours.list_messages("bench", "agent"))
            _line(f"strands list_messages (restore) of {count:,}", *rates)


async def llama_index(folder: Path, adds: int, history: int, reads: int) -> None:
    from llama_index.core.llms import ChatMessage
    from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore

    from convostore.integrations.llama_index import ConvostoreDBChatStore

    store = await _store(folder)
    ours = ConvostoreDBChatStore(store, table_name="bench")
    peer = SQLAlchemyChatStore(
        table_name="bench", async_database_uri=f"sqlite+aiosqlite:///{folder / 'li.db'}"
    )
    chat_stores: list[Any] = [ours, peer]

    def add_to(chat_store: Any) -> Operation:
        return lambda i: chat_store.add_message("k", ChatMessage(role="user", content=f"m {i}"))

    _line("llama-index add_message", *[await _rate(add_to(c), adds) for c in chat_stores])
    batch = [ChatMessage(role="user", content=f"old {i}") for i in range(history)]
    for chat_store in chat_stores:
        await chat_store.add_messages("k", batch)
    rates = [
        await _rate(_same(partial(c.get_messages, "k")), max(reads // 10, 5)) for c in chat_stores
    ]
    _line(f"llama-index get_messages (active) of {history + adds:,}", *rates)
    if peer._async_engine is not None:
        await peer._async_engine.dispose()
    await store.close()


async def agent_framework(folder: Path, adds: int, history: int, reads: int) -> None:
    import warnings

    from agent_framework import FileHistoryProvider, Message

    from convostore.integrations.agent_framework import ConvostoreHistoryProvider

    store = await _store(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        providers: list[Any] = [ConvostoreHistoryProvider(store), FileHistoryProvider(folder)]

    def save_to(provider: Any) -> Operation:
        return lambda i: provider.save_messages("s", [Message("user", [f"m {i}"])])

    _line(
        "agent-framework save_messages (1 new)", *[await _rate(save_to(p), adds) for p in providers]
    )
    batch = [Message("user", [f"old {i}"]) for i in range(history)]
    for provider in providers:
        await provider.save_messages("s", batch)
    rates = [
        await _rate(_same(partial(p.get_messages, "s")), max(reads // 10, 5)) for p in providers
    ]
    _line(f"agent-framework get_messages of {history + adds:,}", *rates)
    await store.close()


async def pydantic_ai(folder: Path, adds: int, history: int, reads: int) -> None:
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import InMemoryConversationStore
    from pydantic_ai.messages import ModelRequest

    from convostore.integrations.pydantic_ai import ConvostoreConversationStore

    store = await _store(folder)
    conversation_stores: list[Any] = [
        ConvostoreConversationStore(store),
        InMemoryConversationStore(),
    ]
    conversations = [Conversation(conversation_id="c") for _ in conversation_stores]

    def save_to(conversation_store: Any, conversation: Any) -> Operation:
        async def save(i: int) -> object:
            conversation.messages.append(ModelRequest.user_text_prompt(f"m {i}"))
            return await conversation_store.save(conversation)

        return save

    pairs = list(zip(conversation_stores, conversations, strict=True))
    _line("pydantic-ai save (1 new message)", *[await _rate(save_to(*p), adds) for p in pairs])
    for conversation_store, conversation in pairs:
        conversation.messages.extend(
            ModelRequest.user_text_prompt(f"old {i}") for i in range(history)
        )
        await conversation_store.save(conversation)
    rates = [await _rate(_same(partial(s.load, "c", limit=20)), reads) for s in conversation_stores]
    _line(f"pydantic-ai load(limit=20) of {history + adds:,}", *rates)
    await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--adds", type=int, default=300)
    parser.add_argument("--history", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=100)
    args = parser.parse_args()
    print("adapters on convostore's SQLite against each framework's own SQLite store (ops/s)")
    print(f"  {'operation':<44} {'convostore':>10} {'peer':>10} {'ratio':>7}  target >1")
    for run in (
        openai_agents,
        adk,
        langchain,
        langgraph,
        llama_index,
        agent_framework,
        pydantic_ai,
        strands,
    ):
        with tempfile.TemporaryDirectory() as folder:
            await run(Path(folder), args.adds, args.history, args.reads)


if __name__ == "__main__":
    asyncio.run(main())
