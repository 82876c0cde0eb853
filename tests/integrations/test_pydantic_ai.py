"""Pydantic AI's conversation store on every backend, each behaviour checked on the
framework's own `InMemoryConversationStore` too (the reference: a test that fails there
tests the wrong thing), and the history capability and helpers end to end with its
`TestModel` and `FunctionModel`.

No fetchable snapshot of pydantic-ai has the tests of `InMemoryConversationStore` (the
one reachable here predates `pydantic_ai.conversation_store`), so these stand in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.messages import (
    BinaryContent,
    CompactionPart,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import convostore.sync
from convostore import Role, Store
from convostore.integrations.pydantic_ai import (
    ConvostoreConversationStore,
    ConvostoreHistory,
    load_history,
    save_messages,
)
from convostore.testing.fixtures import BackendUnderTest

Kind = Callable[[], ConversationStore]


@pytest.fixture(params=["in-memory", "convostore"])
def conversations(request: pytest.FixtureRequest, backend: BackendUnderTest) -> Any:
    if request.param == "in-memory":
        if backend.name != "memory":
            pytest.skip("the reference store runs once, beside the memory backend")
        return InMemoryConversationStore()
    store: Store = request.getfixturevalue("store")
    return ConvostoreConversationStore(store)


def _agent() -> Agent[None, str]:
    agent: Agent[None, str] = Agent(TestModel())

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"18C in {city}"

    return agent


def _json(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


async def test_a_saved_run_loads_whole_and_a_second_run_appends(conversations: Any) -> None:
    agent = _agent()
    result = await agent.run("Weather?", conversation=Conversation(conversation_id="c1"))
    first = await conversations.save(result)
    assert len(first) == len(result.all_messages()) >= 4
    loaded = await conversations.load("c1")
    assert loaded is not None
    assert _json(loaded.messages) == _json(result.all_messages())
    again = await agent.run("And tomorrow?", conversation=loaded)
    second = await conversations.save(again)
    assert len(second) == len(again.new_messages())
    assert second[0].parent_id == first[-1].id
    reloaded = await conversations.load("c1")
    assert reloaded is not None
    assert _json(reloaded.messages) == _json(again.all_messages())
    window = await conversations.load("c1", limit=2)
    assert window is not None
    assert _json(window.messages) == _json(again.all_messages()[-2:])
    assert await conversations.save(reloaded) == []


async def test_a_stale_save_conflicts_and_writes_nothing(conversations: Any) -> None:
    agent = _agent()
    await conversations.save(await agent.run("Hi", conversation=Conversation(conversation_id="c")))
    one = await conversations.load("c")
    two = await conversations.load("c")
    assert one is not None
    assert two is not None
    await conversations.save(await agent.run("From one", conversation=one))
    stale = await agent.run("From two", conversation=two)
    record = await conversations.read_record("c")
    with pytest.raises(ConversationConflict):
        await conversations.save(stale)
    assert await conversations.read_record("c") == record
    fresh = Conversation(conversation_id="c", messages=[ModelRequest.user_text_prompt("x")])
    with pytest.raises(ConversationConflict):
        await conversations.save(fresh)


async def test_write_record_stores_entries_and_record_together_or_neither(
    conversations: Any,
) -> None:
    entry = ConversationEntry(parent_id=None, message=ModelRequest.user_text_prompt("hi"))
    record = ConversationRecord(conversation_id="w", head_id=entry.id)
    await conversations.write_record(record, new_entries=[entry], expected_revision=None)
    assert await conversations.read_history(entry.id) == [entry]
    later = ConversationEntry(parent_id=entry.id, message=ModelRequest.user_text_prompt("no"))
    stale = ConversationRecord(conversation_id="w", head_id=later.id)
    with pytest.raises(ConversationConflict):
        await conversations.write_record(stale, new_entries=[later], expected_revision="old")
    with pytest.raises(ConversationConflict):
        await conversations.write_record(stale, new_entries=[later], expected_revision=None)
    assert await conversations.read_record("w") == record
    with pytest.raises(LookupError):
        await conversations.read_entry(later.id)
    # A head neither stored nor written is refused.
    dangling = ConversationRecord(conversation_id="w", head_id="no-such-entry")
    with pytest.raises(ConversationConflict):
        await conversations.write_record(dangling, expected_revision=record.revision)


async def test_branches_and_forks_share_what_they_keep(conversations: Any) -> None:
    agent: Agent[None, str] = Agent(TestModel())
    first = await agent.run("Hello", conversation=Conversation(conversation_id="b"))
    await conversations.save(first)
    loaded = await conversations.load("b")
    assert loaded is not None
    result = await agent.run("Weather?", conversation=loaded)
    saved = await conversations.save(result)
    loaded = await conversations.load("b")
    assert loaded is not None
    branched = await conversations.branch("b", at=2, expected_revision=loaded.revision)
    assert len(branched.messages) == 2
    await conversations.save(await agent.run("Other question", conversation=branched))
    record = await conversations.read_record("b")
    assert record is not None
    assert record.branches == [saved[-1].id]
    back = await conversations.branch(
        "b", from_entry=saved[-1].id, expected_revision=record.revision
    )
    assert _json(back.messages) == _json(result.all_messages())
    fork = await conversations.fork("b", at=2, new_conversation_id="f", scope="ada")
    assert _json(fork.messages) == _json(result.all_messages()[:2])
    await conversations.save(await agent.run("Forked", conversation=fork))
    forked = await conversations.load("f")
    assert forked is not None
    assert _json(forked.messages[:2]) == _json(result.all_messages()[:2])
    fork_record = await conversations.read_record("f")
    assert fork_record is not None
    assert fork_record.forked_from == "b"
    assert fork_record.forked_at == (await conversations.load_entries("f"))[1].id
    # The fork keeps what it shares when the conversation it came from is deleted.
    await conversations.delete("b")
    assert await conversations.load("b") is None
    still = await conversations.load("f")
    assert still is not None
    assert _json(still.messages) == _json(forked.messages)


async def test_a_scope_keeps_a_conversation_to_its_owner(conversations: Any) -> None:
    agent = _agent()
    for cid, scope in [("a1", "ada"), ("a2", "ada"), ("b1", "bob")]:
        result = await agent.run("Hi", conversation=Conversation(conversation_id=cid))
        await conversations.save(result, scope=scope)
    assert await conversations.load("a1", scope="bob") is None
    assert await conversations.load("a1", scope="ada") is not None
    assert [r.conversation_id for r in await conversations.list_conversations(scope="ada")] == [
        "a2",
        "a1",
    ]
    everything = await conversations.list_conversations()
    assert [r.conversation_id for r in everything] == ["b1", "a2", "a1"]
    assert len(await conversations.list_conversations(limit=1)) == 1
    await conversations.delete("a1", scope="bob")
    assert await conversations.load("a1") is not None
    await conversations.delete("a1", scope="ada")
    assert [r.conversation_id for r in await conversations.list_conversations(scope="ada")] == [
        "a2"
    ]


async def test_a_scope_is_the_sessions_owner(store: Store) -> None:
    conversations = ConvostoreConversationStore(store)
    result = await _agent().run("Hi", conversation=Conversation(conversation_id="s"))
    await conversations.save(result, scope="ada")
    session = await store.get_session("s")
    assert session is not None
    assert session.owner_id == "ada"
    assert [s.id for s in (await store.list_sessions("ada")).items] == ["s"]


def _every_part_kind() -> list[ModelMessage]:
    image = BinaryContent(b"\x89PNG", media_type="image/png")
    return [
        ModelRequest(
            parts=[
                SystemPromptPart("Be brief."),
                UserPromptPart(["Look:", image, ImageUrl("https://example.com/a.png")]),
            ]
        ),
        ModelResponse(
            parts=[
                ThinkingPart("hmm", signature="sig"),
                TextPart("Checking."),
                ToolCallPart("weather", {"city": "P"}, tool_call_id="c1"),
                NativeToolCallPart("web_search", {"q": "x"}, tool_call_id="n1"),
                NativeToolReturnPart("web_search", {"hits": 1}, tool_call_id="n1"),
                FilePart(image),
                CompactionPart("summary"),
            ],
            model_name="test",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("weather", {"temp": 18}, tool_call_id="c1"),
                ToolReturnPart("weather", "try again", tool_call_id="c2", outcome="retried"),
            ]
        ),
        ModelResponse(parts=[TextPart("Sunny.")]),
        ModelRequest(parts=[RetryFeedbackPart("not JSON", retry=RetryInfo("validation_error"))]),
        ModelResponse(parts=[TextPart("{}")]),
    ]


async def test_every_part_kind_round_trips(store: Store) -> None:
    messages = _every_part_kind()
    await save_messages(store, "parts", messages)
    assert _json(await load_history(store, "parts")) == _json(messages)
    stored = await store.messages("parts")
    assert [m.role for m in stored] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.USER,
        Role.ASSISTANT,
    ]
    assert [(c.id, c.name, c.arguments) for c in stored[1].tool_calls] == [
        ("c1", "weather", {"city": "P"})
    ]
    assert stored[2].tool_call_id == "c1"
    assert stored[3].content == "Sunny."


async def test_a_last_read_never_starts_on_an_orphan_tool_return(store: Store) -> None:
    messages = _every_part_kind()
    await save_messages(store, "w", messages)
    # The newest four start on a tool return: widened back to the response that called it.
    assert _json(await load_history(store, "w", last=4)) == _json(messages[1:])
    assert _json(await load_history(store, "w", last=3)) == _json(messages[3:])
    assert _json(await load_history(store, "w", last=10)) == _json(messages)
    assert await load_history(store, "unknown") == []


async def test_the_history_capability_carries_a_conversation_across_runs(store: Store) -> None:
    seen: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(len(messages))
        return ModelResponse(parts=[TextPart(f"answer {len(seen)}")])

    agent = Agent(FunctionModel(model), capabilities=[ConvostoreHistory(store, "cap")])
    first = await agent.run("one")
    second = await agent.run("two")
    assert seen == [1, 3]
    history = await load_history(store, "cap")
    assert _json(history) == _json(first.new_messages() + second.new_messages())
    # The same conversation, read through the ConversationStore.
    loaded = await ConvostoreConversationStore(store).load("cap")
    assert loaded is not None
    assert _json(loaded.messages) == _json(history)


def test_a_sync_store_serves_other_event_loops(backend: BackendUnderTest) -> None:
    with convostore.sync.connect(backend()) as store:

        async def run(prompt: str) -> int:
            agent = Agent(TestModel(), capabilities=[ConvostoreHistory(store, "sync")])
            await agent.run(prompt)
            return len(await load_history(store, "sync"))

        assert asyncio.run(run("one")) == 2
        assert asyncio.run(run("two")) == 4
        assert [m.content for m in store.messages("sync")][::2] == ["one", "two"]
