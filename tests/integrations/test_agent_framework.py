"""Microsoft Agent Framework's history provider on every backend, and the framework's
own core tests of history providers and sessions run against it."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from agent_framework import AgentResponse, AgentSession, Content, Message, SessionContext

import convostore.sync
from convostore import Role, Store
from convostore.errors import ConflictError
from convostore.integrations.agent_framework import ConvostoreHistoryProvider
from convostore.testing.fixtures import BackendUnderTest
from tests.integrations.upstream import run_snapshot_suite


def _turn() -> list[Message]:
    return [
        Message("user", ["Weather in Paris?"], message_id="u1"),
        Message(
            "assistant",
            [
                Content.from_text("Checking."),
                Content.from_function_call(call_id="c1", name="weather", arguments={"city": "P"}),
            ],
            author_name="planner",
        ),
        Message("tool", [Content.from_function_result(call_id="c1", result="18C")]),
        Message("assistant", ["Sunny, 18C."], author_name="planner"),
    ]


def _dicts(messages: list[Message]) -> list[dict[str, Any]]:
    return [message.to_dict() for message in messages]


async def test_messages_read_back_as_saved_and_as_convostore_messages(store: Store) -> None:
    provider = ConvostoreHistoryProvider(store)
    await provider.save_messages("s1", _turn())
    assert _dicts(await provider.get_messages("s1")) == _dicts(_turn())
    stored = await store.messages("s1")
    assert [m.role for m in stored] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert [(c.id, c.name, c.arguments) for c in stored[1].tool_calls] == [
        ("c1", "weather", {"city": "P"})
    ]
    assert (stored[2].tool_call_id, stored[2].content) == ("c1", "18C")
    assert await provider.get_messages("unknown") == []


async def test_a_resave_stores_nothing_twice(store: Store) -> None:
    provider = ConvostoreHistoryProvider(store)
    turn = _turn()
    await provider.save_messages("s1", turn)
    await provider.save_messages("s1", turn)
    # A full transcript replayed with one new message: only that one is new.
    await provider.save_messages("s1", [*turn, Message("user", ["Thanks"])])
    assert [m.text for m in await provider.get_messages("s1")][-2:] == ["Sunny, 18C.", "Thanks"]
    assert len(await store.messages("s1")) == 5
    # The framework's rule keeps a repeated input without an id: the user said it twice.
    await provider.save_messages("s1", [Message("user", ["Thanks"])])
    assert len(await store.messages("s1")) == 6


async def test_the_run_hooks_load_before_and_store_after(store: Store) -> None:
    provider = ConvostoreHistoryProvider(store, source_id="history")
    session = AgentSession(session_id="run-1")
    first = SessionContext(session_id="run-1", input_messages=[Message("user", ["Hi"])])
    state: dict[str, Any] = {}
    await provider.before_run(agent=None, session=session, context=first, state=state)  # type: ignore[arg-type]
    first._response = AgentResponse(messages=[Message("assistant", ["Hello!"])])
    await provider.after_run(agent=None, session=session, context=first, state=state)  # type: ignore[arg-type]
    second = SessionContext(session_id="run-1", input_messages=[Message("user", ["Again"])])
    await provider.before_run(agent=None, session=session, context=second, state=state)  # type: ignore[arg-type]
    loaded = second.context_messages["history"]
    assert [m.text for m in loaded] == ["Hi", "Hello!"]
    assert state == {}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
async def test_values_json_cannot_hold_strictly_are_kept(store: Store, value: float) -> None:
    provider = ConvostoreHistoryProvider(store)
    message = Message(
        "assistant",
        [Content.from_function_call(call_id="c1", name="f", arguments={"x": value})],
        additional_properties={"value": value},
    )
    await provider.save_messages("s1", [message])
    (loaded,) = await provider.get_messages("s1")
    restored = [loaded.additional_properties["value"], loaded.contents[0].arguments["x"]]  # type: ignore[index]
    if math.isnan(value):
        assert all(math.isnan(v) for v in restored)
    else:
        assert restored == [value, value]
    (stored,) = await store.messages("s1")
    assert stored.tool_calls[0].arguments == {"x": str(value)}


async def test_a_save_gives_up_with_a_clear_error_when_others_always_win(store: Store) -> None:
    provider = ConvostoreHistoryProvider(store)
    await provider.save_messages("s1", [Message("user", ["first"])])

    async def always_moved(*args: Any, **kwargs: Any) -> bool:
        return False

    store.append_events = always_moved  # type: ignore[method-assign]
    with pytest.raises(ConflictError, match="16 attempts"):
        await provider.save_messages("s1", [Message("user", ["second"])])


def test_a_sync_store_serves_providers_on_other_loops(backend: BackendUnderTest) -> None:
    with convostore.sync.connect(backend()) as store:
        provider = ConvostoreHistoryProvider(store)

        async def run() -> list[str]:
            message = Message("user", ["on a loop of its own"], message_id="m1")
            await provider.save_messages(None, [message])
            return [m.text for m in await provider.get_messages(None)]

        assert asyncio.run(run()) == ["on a loop of its own"]
        assert asyncio.run(run()) == ["on a loop of its own"]
        assert [m.content for m in store.messages("agent-framework:default")] == [
            "on a loop of its own"
        ]


# ---------------------------------------------------------------- the framework's own tests

AGENT_FRAMEWORK = "microsoft/agent-framework"
_CORE = "python/packages/core/tests/"
SELECTED = [
    _CORE + name
    for name in (
        "__init__.py",
        "conftest.py",
        "core/__init__.py",
        "core/conftest.py",
        "core/utils.py",
        "core/test_sessions.py",
        "core/test_agents.py",
        "core/test_middleware_with_agent.py",
        "core/test_compaction.py",
        "core/test_agent_hooks.py",
        "core/test_harness_agent.py",
        "core/test_harness_memory.py",
        "core/test_harness_tool_approval.py",
    )
]
# The framework's own providers pass 223 of the 230 chosen (7 fail on the version skew).
MINIMUM_PASSED = 192


def test_agent_framework_own_tests(backend: BackendUnderTest) -> None:
    result = run_snapshot_suite(
        backend, AGENT_FRAMEWORK, SELECTED, "agent_framework", (_CORE, "agent_framework_tests/")
    )
    assert not result.failed, result.output
    assert len(result.passed) >= MINIMUM_PASSED, result.summary()
