"""LangChain's chat message history on every backend, with the real langchain-core."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

import convostore.sync
from convostore import EventFilter, Message, MessageWrite, Role, Store, ToolCall
from convostore.errors import ConflictError
from convostore.integrations.langchain import ConvostoreChatMessageHistory

CONVERSATION: list[BaseMessage] = [
    SystemMessage("You are terse."),
    HumanMessage("Weather in Oslo?", id="h1"),
    AIMessage(
        "",
        tool_calls=[{"id": "t1", "name": "weather", "args": {"city": "Oslo"}, "type": "tool_call"}],
    ),
    ToolMessage("-3C, snow", tool_call_id="t1"),
    AIMessage([{"type": "text", "text": "Cold and snowy."}], response_metadata={"model": "x"}),
]


async def test_messages_round_trip(store: Store) -> None:
    history = ConvostoreChatMessageHistory("lc-1", store)
    assert isinstance(history, BaseChatMessageHistory)
    assert await history.aget_messages() == []
    await history.aadd_messages(CONVERSATION)
    assert await history.aget_messages() == CONVERSATION
    assert await ConvostoreChatMessageHistory("lc-1", store).aget_messages() == CONVERSATION


async def test_messages_are_convostore_messages(store: Store) -> None:
    await ConvostoreChatMessageHistory("lc-1", store).aadd_messages(CONVERSATION)
    messages = await store.messages("lc-1")
    assert [m.role for m in messages] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    assert messages[2].tool_calls == (ToolCall("t1", "weather", {"city": "Oslo"}),)
    assert messages[3].tool_call_id == "t1"
    assert messages[4].content == "Cold and snowy."
    hits = await store.search("snowy", mode="text", session_id="lc-1")
    assert [hit.message.id for hit in hits] == [messages[4].id]


async def test_other_message_types_are_kept_whole(store: Store) -> None:
    odd: list[BaseMessage] = [
        FunctionMessage(content="42", name="answer"),
        ChatMessage(content="aside", role="critic"),
        ChatMessage(content="hi", role="user"),
    ]
    history = ConvostoreChatMessageHistory("lc-1", store)
    await history.aadd_messages(odd)
    assert await history.aget_messages() == odd
    events = await store.read("lc-1")
    assert [e.type for e in events] == ["LANGCHAIN.FUNCTION", "LANGCHAIN.CHAT", "MESSAGE"]


async def test_clear_is_recorded_and_the_log_kept(store: Store) -> None:
    history = ConvostoreChatMessageHistory("lc-1", store)
    await history.aclear()
    await history.aadd_messages(CONVERSATION[:2])
    await history.aclear()
    assert await history.aget_messages() == []
    await history.aadd_messages([HumanMessage("again")])
    assert await history.aget_messages() == [HumanMessage("again")]
    assert len(await store.read("lc-1", EventFilter(exclude_synthetic=True))) == 3


async def test_messages_written_another_way_read_as_langchain(store: Store) -> None:
    await store.create_session(None, session_id="lc-2")
    await store.add_message("lc-2", MessageWrite(Role.USER, "hi"))
    await store.add_message(
        "lc-2", MessageWrite(Role.ASSISTANT, "", tool_calls=[ToolCall("c", "f", {"x": 1})])
    )
    await store.add_message("lc-2", MessageWrite(Role.TOOL, "done", tool_call_id="c"))
    assert await ConvostoreChatMessageHistory("lc-2", store).aget_messages() == [
        HumanMessage("hi"),
        AIMessage("", tool_calls=[{"id": "c", "name": "f", "args": {"x": 1}, "type": "tool_call"}]),
        ToolMessage("done", tool_call_id="c"),
    ]


async def test_blocking_methods_from_another_thread(store: Store) -> None:
    history = ConvostoreChatMessageHistory("lc-1", store)

    def use() -> list[BaseMessage]:
        history.add_messages(CONVERSATION[:2])
        history.add_user_message("more")
        found = history.messages
        history.clear()
        return found

    found = await asyncio.to_thread(use)
    assert found == [*CONVERSATION[:2], HumanMessage("more")]
    assert await history.aget_messages() == []


async def test_a_blocking_method_on_the_stores_loop_says_what_to_use(store: Store) -> None:
    history = ConvostoreChatMessageHistory("lc-1", store)
    with pytest.raises(RuntimeError, match="use the async method"):
        history.add_messages([HumanMessage("x")])


def test_blocking_methods_with_a_sync_store(backend: Any) -> None:
    with convostore.sync.connect(backend()) as store:
        history = ConvostoreChatMessageHistory("lc-s", store)
        history.add_messages(CONVERSATION)
        assert history.messages == CONVERSATION
        history.clear()
        assert history.messages == []
        messages = store.messages("lc-s")
        assert all(isinstance(m, Message) for m in messages)
        assert len(messages) == len(CONVERSATION)


async def test_a_bad_message_is_refused_and_nothing_is_written(store: Store) -> None:
    from convostore import InvalidArgumentError

    history = ConvostoreChatMessageHistory("lc-1", store)
    await history.aadd_messages([HumanMessage("kept")])
    bad: Any = "not a message"
    with pytest.raises(InvalidArgumentError, match="expected a LangChain message"):
        await history.aadd_messages([HumanMessage("lost"), bad])
    assert await history.aget_messages() == [HumanMessage("kept")]


async def test_a_clear_other_writers_keep_beating_gives_up(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = ConvostoreChatMessageHistory("s", store)
    await history.aadd_messages([HumanMessage("hi")])

    async def always_beaten(*args: Any, **kwargs: Any) -> bool:
        return False

    monkeypatch.setattr(store, "append_events", always_beaten)
    with pytest.raises(ConflictError, match="gave up"):
        await history.aclear()
    assert [m.content for m in await history.aget_messages()] == ["hi"]
