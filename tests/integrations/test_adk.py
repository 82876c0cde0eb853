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
from convostore.filters import EventFilter
from convostore.integrations.adk import ConvostoreSessionService, store_session_id
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
    stored_id = store_session_id("app", "u", "s1")
    stored = await store.read(stored_id, EventFilter(exclude_synthetic=True))
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
    history = await ConvostoreChatMessageHistory(stored_id, store).aget_messages()
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
    messages = await store.messages(store_session_id("app", "u", "s1"))
    assert [(m.role, m.content) for m in messages] == [
        (Role.USER, "I am Ada."),
        (Role.ASSISTANT, "Hello Ada."),
        (Role.USER, "What is my name?"),
        (Role.ASSISTANT, "Your name is Ada."),
    ]


async def test_a_session_id_is_scoped_by_app_and_user(store: Store) -> None:
    service = ConvostoreSessionService(store)
    ada = await service.create_session(app_name="app", user_id="ada", session_id="s1")
    await service.append_event(ada, _text_event("user", "mine", time.time()))
    bob = await service.create_session(app_name="app", user_id="bob", session_id="s1")
    assert (bob.id, bob.user_id) == ("s1", "bob")
    got = await service.get_session(app_name="app", user_id="bob", session_id="s1")
    assert got is not None
    assert (got.user_id, got.events) == ("bob", [])
    assert store_session_id("app", "ada", "s1") != store_session_id("app", "bob", "s1")
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name="app", user_id="ada", session_id="s1")


async def test_update_time_is_the_events_and_listings_come_oldest_update_first(
    store: Store,
) -> None:
    service = ConvostoreSessionService(store)
    for name in ("a", "b", "c"):
        await service.create_session(app_name="app", user_id="u", session_id=name)
    a = await service.get_session(app_name="app", user_id="u", session_id="a")
    assert a is not None
    later = a.last_update_time + 3600
    await service.append_event(a, Event(invocation_id="i", author="user", timestamp=later))
    assert a.last_update_time == later
    again = await service.get_session(app_name="app", user_id="u", session_id="a")
    assert again is not None
    assert again.last_update_time == pytest.approx(later, abs=1e-6)
    assert again == a
    listed = await service.list_sessions(app_name="app", user_id="u")
    assert [s.id for s in listed.sessions] == ["b", "c", "a"]


async def test_an_event_and_its_state_are_one_write(store: Store) -> None:
    service = ConvostoreSessionService(store)
    session = await service.create_session(
        app_name="app", user_id="u", session_id="s1", state={"step": 0}
    )
    stored_id = store_session_id("app", "u", "s1")
    before = await store.get_session(stored_id)
    assert before is not None
    event = Event(
        invocation_id="i",
        author="agent",
        timestamp=time.time(),
        actions=EventActions(state_delta={"step": 1, "app:theme": "dark"}),
    )
    await service.append_event(session, event)
    after = await store.get_session(stored_id)
    assert after is not None
    # One batch: the version moved by one, the session's own record was not rewritten.
    assert after.version == before.version + 1
    assert after.metadata == before.metadata
    log = await store.read(stored_id)
    assert [e.type for e in log] == ["ADK.EVENT", "ADK.SESSION_STATE"]
    assert log[1].payload["state"] == {"step": 1}
    # A stale session object writes neither an event nor its state.
    stale = await service.get_session(app_name="app", user_id="u", session_id="s1")
    assert stale is not None
    await service.append_event(session, _text_event("user", "moves it on", time.time()))
    delta = EventActions(state_delta={"step": 99})
    with pytest.raises(StaleSessionError):
        await service.append_event(stale, Event(invocation_id="i", author="a", actions=delta))
    got = await service.get_session(app_name="app", user_id="u", session_id="s1")
    assert got is not None
    assert got.state == {"step": 1, "app:theme": "dark"}
    assert len(await store.read(stored_id)) == 4
    # A second service (no cached state) appends from the stored state.
    fresh = ConvostoreSessionService(store)
    reread = await fresh.get_session(app_name="app", user_id="u", session_id="s1")
    assert reread is not None
    reread._storage_update_marker = None
    await fresh.append_event(reread, Event(invocation_id="i", author="a", actions=delta))
    final = await service.get_session(app_name="app", user_id="u", session_id="s1")
    assert final is not None
    assert final.state == {"step": 99, "app:theme": "dark"}


async def test_a_redelivered_event_is_stored_once_and_another_under_its_id_too(
    store: Store,
) -> None:
    service = ConvostoreSessionService(store)
    session = await service.create_session(app_name="app", user_id="u", session_id="s1")
    event = Event(
        invocation_id="i",
        author="user",
        actions=EventActions(state_delta={"counter": 1, "user:seen": 1}),
    )
    await service.append_event(session, event)
    await service.append_event(session, event)
    await service.append_event(session, event.model_copy(deep=True))
    other = Event(id=event.id, invocation_id="j", author="agent")
    await service.append_event(session, other)
    got = await service.get_session(app_name="app", user_id="u", session_id="s1")
    assert got is not None
    assert [(e.id, e.author) for e in got.events] == [(event.id, "user"), (event.id, "agent")]
    assert got.state == {"counter": 1, "user:seen": 1}
    # A stale session object re-delivering a stored event writes nothing either.
    stale = await service.get_session(app_name="app", user_id="u", session_id="s1")
    assert stale is not None
    await service.append_event(session, _text_event("user", "moves on", time.time()))
    await service.append_event(stale, event)
    again = await service.get_session(app_name="app", user_id="u", session_id="s1")
    assert again is not None
    assert len(again.events) == 3
