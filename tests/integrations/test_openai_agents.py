"""The OpenAI Agents SDK session on every backend, with the real SDK package."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.memory import Session
from agents.memory.session import OpenAIResponsesCompactionAwareSession
from agents.memory.session_settings import SessionSettings
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from convostore import EventFilter, Message, Role, Store
from convostore.compaction import SlidingWindow
from convostore.integrations.openai_agents import Compaction, ConvostoreSession

USER_TEXT: TResponseInputItem = {"role": "user", "content": "What is the capital of Peru?"}
ASSISTANT_MESSAGE: TResponseInputItem = cast(
    TResponseInputItem,
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Lima.", "annotations": []}],
    },
)
FUNCTION_CALL: TResponseInputItem = cast(
    TResponseInputItem,
    {
        "type": "function_call",
        "call_id": "call_7",
        "name": "population",
        "arguments": '{"city": "Lima"}',
        "id": "fc_7",
        "status": "completed",
    },
)
FUNCTION_OUTPUT: TResponseInputItem = cast(
    TResponseInputItem,
    {"type": "function_call_output", "call_id": "call_7", "output": "10.1 million"},
)
REASONING: TResponseInputItem = cast(
    TResponseInputItem,
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
)
# Offline: no trace is sent anywhere.
set_tracing_disabled(True)

ITEMS = [USER_TEXT, ASSISTANT_MESSAGE, FUNCTION_CALL, FUNCTION_OUTPUT, REASONING]


async def test_is_the_sdk_session_protocol(store: Store) -> None:
    session = ConvostoreSession("s-1", store)
    assert isinstance(session, Session)
    assert isinstance(session, OpenAIResponsesCompactionAwareSession)


async def test_items_round_trip_exactly(store: Store) -> None:
    session = ConvostoreSession("s-1", store)
    await session.add_items(list(ITEMS))
    await session.add_items([{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}])
    items = await session.get_items()
    assert items[:5] == ITEMS
    assert items[5] == {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    assert await ConvostoreSession("s-1", store).get_items(limit=2) == items[-2:]
    assert await session.get_items(limit=0) == []


async def test_items_are_messages_and_tool_calls_in_the_store(store: Store) -> None:
    session = ConvostoreSession("s-1", store)
    await session.add_items(list(ITEMS))
    events = await store.read("s-1")
    messages = [e for e in events if isinstance(e, Message)]
    assert [m.role for m in messages] == [Role.USER, Role.ASSISTANT, Role.ASSISTANT, Role.TOOL]
    assert messages[0].content == "What is the capital of Peru?"
    assert messages[1].content == "Lima."
    assert messages[2].tool_calls[0].name == "population"
    assert messages[2].tool_calls[0].arguments == {"city": "Lima"}
    assert messages[3].tool_call_id == "call_7"
    assert messages[3].content == "10.1 million"
    # An item with no meaning in the model is kept whole under the framework's type.
    assert events[-1].type == "OPENAI_AGENTS.REASONING"
    assert events[-1].payload == REASONING
    hits = await store.search("capital of peru", mode="text", session_id="s-1")
    assert [hit.message.id for hit in hits] == [messages[0].id]


async def test_messages_written_through_the_store_read_as_items(store: Store) -> None:
    from convostore import MessageWrite, ToolCall

    await store.create_session(None, session_id="s-2")
    await store.add_message("s-2", MessageWrite(Role.USER, "hello"))
    await store.add_message(
        "s-2",
        MessageWrite(Role.ASSISTANT, "checking", tool_calls=[ToolCall("c1", "lookup", {"q": 1})]),
    )
    await store.add_message("s-2", MessageWrite(Role.TOOL, "found", tool_call_id="c1"))
    assert await ConvostoreSession("s-2", store).get_items() == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "checking"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
    ]


async def test_pop_and_clear_are_recorded_not_rewritten(store: Store) -> None:
    session = ConvostoreSession("s-1", store)
    assert await session.pop_item() is None
    await session.add_items(list(ITEMS))
    assert await session.pop_item() == REASONING
    assert await session.pop_item() == FUNCTION_OUTPUT
    assert await session.get_items() == ITEMS[:3]
    await session.add_items([USER_TEXT])
    assert await session.get_items() == [*ITEMS[:3], USER_TEXT]
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    # The full log still holds every item that was added.
    log = await store.read("s-1", EventFilter(exclude_synthetic=True))
    assert len(log) == len(ITEMS) + 1
    await session.add_items([ASSISTANT_MESSAGE])
    assert await session.get_items() == [ASSISTANT_MESSAGE]


async def test_pop_of_a_message_with_several_tool_calls_keeps_the_others(store: Store) -> None:
    from convostore import MessageWrite, ToolCall

    await store.create_session(None, session_id="s-3")
    calls = [ToolCall("a", "one", {}), ToolCall("b", "two", {})]
    await store.add_message("s-3", MessageWrite(Role.ASSISTANT, "two calls", tool_calls=calls))
    session = ConvostoreSession("s-3", store)
    before = await session.get_items()
    assert len(before) == 3
    assert await session.pop_item() == before[-1]
    assert await session.get_items() == before[:-1]


async def test_concurrent_pops_never_return_the_same_item(store: Store) -> None:
    session = ConvostoreSession("s-1", store)
    items: list[TResponseInputItem] = [{"role": "user", "content": f"m{i}"} for i in range(8)]
    await session.add_items(items)
    others = [ConvostoreSession("s-1", store) for _ in range(6)]
    popped = await asyncio.gather(*(other.pop_item() for other in others))
    assert sorted(str(p) for p in popped) == sorted(str(i) for i in items[2:])
    assert await session.get_items() == items[:2]


async def test_session_settings_limit(store: Store) -> None:
    session = ConvostoreSession("s-1", store, session_settings=SessionSettings(limit=2))
    await session.add_items(list(ITEMS))
    assert await session.get_items() == ITEMS[-2:]
    assert await session.get_items(limit=3) == ITEMS[-3:]


async def test_run_compaction_uses_convostore_compaction(store: Store) -> None:
    compaction = Compaction(SlidingWindow(keep_last=2), lambda events: f"{len(events)} earlier")
    session = ConvostoreSession("s-1", store, compaction=compaction)
    turns: list[TResponseInputItem] = []
    for i in range(4):
        turns += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
    await session.add_items(turns)
    await session.run_compaction({"force": True})
    items = await session.get_items()
    assert items[0] == {"role": "system", "content": "6 earlier"}
    assert items[1:] == turns[-2:]
    assert len(await store.read("s-1", EventFilter(exclude_synthetic=True))) == 8


class ScriptedModel(Model):
    """A model that answers from a script and records what it was sent."""

    def __init__(self, replies: list[list[Any]]) -> None:
        self.replies = list(replies)
        self.inputs: list[list[Any]] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        sent = kwargs["input"] if "input" in kwargs else args[1]
        self.inputs.append(list(sent) if isinstance(sent, list) else [sent])
        return ModelResponse(output=self.replies.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the scripted model does not stream")


def _say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


@function_tool
def city_population(city: str) -> str:
    """The population of a city."""
    return f"{city}: 10 million"


async def test_runner_resumes_a_session_offline(connect_store: Any) -> None:
    store = await connect_store()
    call = ResponseFunctionToolCall(
        type="function_call",
        call_id="call_1",
        name="city_population",
        arguments='{"city": "Lima"}',
        id="fc_1",
        status="completed",
    )
    model = ScriptedModel([[call], [_say("About 10 million.")], [_say("You asked about Lima.")]])
    agent = Agent(name="geo", model=model, tools=[city_population])
    first = await Runner.run(
        agent, "How many people live in Lima?", session=ConvostoreSession("run-1", store)
    )
    assert first.final_output == "About 10 million."
    # A new session object (as after a restart) resumes from the store.
    second = await Runner.run(agent, "What did I ask?", session=ConvostoreSession("run-1", store))
    assert second.final_output == "You asked about Lima."
    resumed = model.inputs[-1]
    assert resumed[0] == {"content": "How many people live in Lima?", "role": "user"}
    assert any(item.get("type") == "function_call_output" for item in resumed)
    assert resumed[-1] == {"content": "What did I ask?", "role": "user"}
    messages = await store.messages("run-1")
    assert [m.role for m in messages] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.USER,
        Role.ASSISTANT,
    ]
    assert messages[2].content == "Lima: 10 million"


async def test_a_bad_item_is_refused_and_nothing_is_written(store: Store) -> None:
    from convostore import InvalidArgumentError

    session = ConvostoreSession("s-1", store)
    await session.add_items([USER_TEXT])
    with pytest.raises(InvalidArgumentError, match="is a mapping"):
        await session.add_items([ASSISTANT_MESSAGE, cast(TResponseInputItem, "not an item")])
    with pytest.raises(InvalidArgumentError):
        await session.add_items([{"role": "user", "content": "nul \x00 in text"}])
    assert await session.get_items() == [USER_TEXT]
