"""Google ADK's session service on every backend, with the real google-adk package."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from convostore import Message, Role, Store
from convostore.integrations.adk import ConvostoreSessionService
from convostore.integrations.langchain import ConvostoreChatMessageHistory


def _text_event(author: str, text: str, at: float, **kwargs: Any) -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        invocation_id="inv-1",
        author=author,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
        timestamp=at,
        **kwargs,
    )


async def test_create_get_list_delete(store: Store) -> None:
    service = ConvostoreSessionService(store)
    created = await service.create_session(
        app_name="shop", user_id="ada", state={"cart": [1], "app:currency": "EUR"}
    )
    assert created.state == {"cart": [1], "app:currency": "EUR"}
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name="shop", user_id="ada", session_id=created.id)
    other = await service.create_session(app_name="shop", user_id="bob", session_id="s-bob")
    assert other.state == {"app:currency": "EUR"}
    await service.create_session(app_name="blog", user_id="ada", session_id="s-blog")
    got = await service.get_session(app_name="shop", user_id="ada", session_id=created.id)
    assert got is not None
    assert (got.id, got.app_name, got.user_id, got.state) == (
        created.id,
        "shop",
        "ada",
        {"cart": [1], "app:currency": "EUR"},
    )
    assert await service.get_session(app_name="blog", user_id="ada", session_id=created.id) is None
    mine = await service.list_sessions(app_name="shop", user_id="ada")
    assert [s.id for s in mine.sessions] == [created.id]
    everyone = await service.list_sessions(app_name="shop")
    assert {s.id for s in everyone.sessions} == {created.id, "s-bob"}
    assert all(s.events == [] for s in everyone.sessions)
    await service.delete_session(app_name="shop", user_id="ada", session_id=created.id)
    assert await service.get_session(app_name="shop", user_id="ada", session_id=created.id) is None
    assert [s.id for s in (await service.list_sessions(app_name="shop")).sessions] == ["s-bob"]


async def test_events_round_trip_and_map_to_messages(store: Store) -> None:
    service = ConvostoreSessionService(store)
    session = await service.create_session(app_name="app", user_id="u", session_id="s1")
    now = time.time()
    call = types.FunctionCall(id="fc1", name="lookup", args={"q": "tea"})
    response = types.FunctionResponse(id="fc1", name="lookup", response={"found": 3})
    events = [
        _text_event("user", "Find tea", now),
        Event(
            invocation_id="inv-1",
            author="shopper",
            timestamp=now + 1,
            content=types.Content(role="model", parts=[types.Part(function_call=call)]),
        ),
        Event(
            invocation_id="inv-1",
            author="shopper",
            timestamp=now + 2,
            content=types.Content(role="user", parts=[types.Part(function_response=response)]),
        ),
        _text_event("shopper", "Three teas.", now + 3),
        Event(
            invocation_id="inv-1",
            author="shopper",
            timestamp=now + 4,
            actions=EventActions(state_delta={"seen": True}, transfer_to_agent="other"),
        ),
    ]
    for event in events:
        await service.append_event(session, event)
    got = await service.get_session(app_name="app", user_id="u", session_id="s1")
    assert got is not None
    assert got.events == events
    assert got.state == {"seen": True}
    stored = await store.read("s1")
    messages = [e for e in stored if isinstance(e, Message)]
    assert [(m.role, m.content) for m in messages] == [
        (Role.USER, "Find tea"),
        (Role.ASSISTANT, ""),
        (Role.TOOL, '{"found": 3}'),
        (Role.ASSISTANT, "Three teas."),
    ]
    assert messages[1].tool_calls[0].arguments == {"q": "tea"}
    assert messages[2].tool_call_id == "fc1"
    assert stored[-1].type == "ADK.EVENT"
    assert [e.created_at.timestamp() for e in stored] == pytest.approx(
        [e.timestamp for e in events]
    )
    # Readable through the other adapters too.
    history = await ConvostoreChatMessageHistory("s1", store).aget_messages()
    assert next(m.content for m in history) == "Find tea"


async def test_get_session_config(store: Store) -> None:
    service = ConvostoreSessionService(store)
    session = await service.create_session(app_name="app", user_id="u", session_id="s1")
    start = time.time()
    for i in range(5):
        await service.append_event(
            session, _text_event("user" if i % 2 == 0 else "a", f"m{i}", start + i)
        )
    recent = await service.get_session(
        app_name="app", user_id="u", session_id="s1", config=GetSessionConfig(num_recent_events=2)
    )
    assert recent is not None
    assert [e.content.parts[0].text for e in recent.events if e.content and e.content.parts] == [
        "m3",
        "m4",
    ]
    after = await service.get_session(
        app_name="app",
        user_id="u",
        session_id="s1",
        config=GetSessionConfig(after_timestamp=start + 3),
    )
    assert after is not None
    assert len(after.events) == 2
    none = await service.get_session(
        app_name="app", user_id="u", session_id="s1", config=GetSessionConfig(num_recent_events=0)
    )
    assert none is not None
    assert none.events == []


async def test_state_scopes(store: Store) -> None:
    service = ConvostoreSessionService(store)
    one = await service.create_session(app_name="app", user_id="u", session_id="one")
    two = await service.create_session(app_name="app", user_id="u", session_id="two")
    other_user = await service.create_session(app_name="app", user_id="v", session_id="three")
    delta = {"app:theme": "dark", "user:lang": "fr", "temp:scratch": 1, "step": 2}
    event = Event(invocation_id="i", author="agent", actions=EventActions(state_delta=delta))
    await service.append_event(one, event)
    assert one.state["temp:scratch"] == 1
    read_one = await service.get_session(app_name="app", user_id="u", session_id="one")
    read_two = await service.get_session(app_name="app", user_id="u", session_id="two")
    read_three = await service.get_session(app_name="app", user_id="v", session_id=other_user.id)
    assert read_one is not None
    assert read_two is not None
    assert read_three is not None
    assert read_one.state == {"app:theme": "dark", "user:lang": "fr", "step": 2}
    assert read_two.state == {"app:theme": "dark", "user:lang": "fr"}
    assert read_three.state == {"app:theme": "dark"}
    assert await service.get_user_state(app_name="app", user_id="u") == {"lang": "fr"}
    assert two.id == "two"
    # temp: keys are never stored, not even in the stored event.
    stored = read_one.events[-1]
    assert "temp:scratch" not in stored.actions.state_delta


async def test_a_stale_session_is_refused(store: Store) -> None:
    service = ConvostoreSessionService(store)
    await service.create_session(app_name="app", user_id="u", session_id="s1")
    first = await service.get_session(app_name="app", user_id="u", session_id="s1")
    second = await service.get_session(app_name="app", user_id="u", session_id="s1")
    assert first is not None
    assert second is not None
    await service.append_event(first, _text_event("user", "one", time.time()))
    with pytest.raises(StaleSessionError):
        await service.append_event(second, _text_event("user", "two", time.time()))
    await service.append_event(first, _text_event("user", "three", time.time()))
    got = await service.get_session(app_name="app", user_id="u", session_id="s1")
    assert got is not None
    assert [e.content.parts[0].text for e in got.events if e.content and e.content.parts] == [
        "one",
        "three",
    ]


async def test_concurrent_appends_on_one_session_object_never_both_win(store: Store) -> None:
    service = ConvostoreSessionService(store)
    await service.create_session(app_name="app", user_id="u", session_id="s1")
    readers = [
        await service.get_session(app_name="app", user_id="u", session_id="s1") for _ in range(4)
    ]
    results = await asyncio.gather(
        *(service.append_event(s, _text_event("user", "x", time.time())) for s in readers if s),
        return_exceptions=True,
    )
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(isinstance(r, StaleSessionError) for r in results if isinstance(r, BaseException))


class ScriptedLlm(BaseLlm):
    """A model that answers from a script and records the contents it was sent."""

    replies: list[str] = []
    sent: list[list[types.Content]] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.sent.append(list(llm_request.contents))
        text = self.replies.pop(0)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


async def _run(runner: Runner, text: str) -> list[Event]:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    return [
        event async for event in runner.run_async(user_id="u", session_id="s1", new_message=message)
    ]


async def test_runner_resumes_a_session_offline(store: Store) -> None:
    llm = ScriptedLlm(model="scripted", replies=["Hello Ada.", "Your name is Ada."], sent=[])
    agent = LlmAgent(name="greeter", model=llm, instruction="Be brief.")
    await ConvostoreSessionService(store).create_session(
        app_name="app", user_id="u", session_id="s1"
    )
    first = Runner(app_name="app", agent=agent, session_service=ConvostoreSessionService(store))
    assert [
        e.content.parts[0].text
        for e in await _run(first, "I am Ada.")
        if e.content and e.content.parts
    ] == ["Hello Ada."]
    # A new service and runner (as after a restart) resume the session from the store.
    second = Runner(app_name="app", agent=agent, session_service=ConvostoreSessionService(store))
    await _run(second, "What is my name?")
    texts = [part.text for content in llm.sent[-1] for part in content.parts or [] if part.text]
    assert texts == ["I am Ada.", "Hello Ada.", "What is my name?"]
    messages = await store.messages("s1")
    assert [(m.role, m.content) for m in messages] == [
        (Role.USER, "I am Ada."),
        (Role.ASSISTANT, "Hello Ada."),
        (Role.USER, "What is my name?"),
        (Role.ASSISTANT, "Your name is Ada."),
    ]
