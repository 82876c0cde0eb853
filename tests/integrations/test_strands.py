"""Strands Agents' session repository on every backend, with the real strands-agents
package: an agent that calls a tool, restored after a restart, through a sync store and
an async one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest
from strands import Agent, tool
from strands.models import Model
from strands.session.file_session_manager import FileSessionManager
from strands.session.repository_session_manager import RepositorySessionManager
from strands.types.exceptions import SessionException
from strands.types.session import Session, SessionAgent, SessionMessage, SessionType

import convostore.sync
from convostore import EventFilter, Message, Role, Store
from convostore.cli import main
from convostore.integrations.importers import ImportSourceError, import_strands_files
from convostore.integrations.strands import (
    ConvostoreSessionManager,
    ConvostoreSessionRepository,
    agent_user,
)
from convostore.testing.fixtures import BackendUnderTest


class ScriptedModel(Model):
    """A model that answers from a script: each reply a list of content blocks."""

    def __init__(self, replies: list[list[dict[str, Any]]]) -> None:
        self.replies = replies

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    async def structured_output(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        raise NotImplementedError
        yield

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        blocks = self.replies.pop(0)
        stop = "end_turn"
        yield {"messageStart": {"role": "assistant"}}
        for block in blocks:
            if "text" in block:
                yield {"contentBlockStart": {"start": {}}}
                yield {"contentBlockDelta": {"delta": {"text": block["text"]}}}
            else:
                use = block["toolUse"]
                stop = "tool_use"
                start = {"toolUse": {"name": use["name"], "toolUseId": use["toolUseId"]}}
                yield {"contentBlockStart": {"start": start}}
                delta = {"toolUse": {"input": json.dumps(use["input"])}}
                yield {"contentBlockDelta": {"delta": delta}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": stop}}


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _script() -> list[list[dict[str, Any]]]:
    use = {"toolUseId": "t1", "name": "weather", "input": {"city": "Oslo"}}
    return [[{"text": "Let me look."}, {"toolUse": use}], [{"text": "Sunny."}], [{"text": "Oslo."}]]


@pytest.fixture
def sync_store(backend: BackendUnderTest) -> Iterator[convostore.sync.SyncStore]:
    with convostore.sync.connect(backend()) as opened:
        yield opened


def _agent(manager: RepositorySessionManager, model: ScriptedModel) -> Agent:
    return Agent(
        agent_id="helper",
        model=model,
        tools=[weather],
        session_manager=manager,
        callback_handler=None,
    )


def test_an_agent_with_a_tool_is_stored_and_restored(
    sync_store: convostore.sync.SyncStore,
) -> None:
    model = ScriptedModel(_script())
    agent = _agent(ConvostoreSessionManager("trip", sync_store), model)
    agent.state.set("city", "Oslo")
    agent("Weather in Oslo?")
    written = list(agent.messages)
    assert [m["role"] for m in written] == ["user", "assistant", "user", "assistant"]

    part = sync_store.find_part("trip", agent_user("helper"))
    assert part is not None
    assert part.part_of == "trip"
    messages = [
        e
        for e in sync_store.read(part.id, EventFilter(exclude_synthetic=True))
        if isinstance(e, Message)
    ]
    assert [(m.role, m.content) for m in messages] == [
        (Role.USER, "Weather in Oslo?"),
        (Role.ASSISTANT, "Let me look."),
        (Role.TOOL, "sunny in Oslo"),
        (Role.ASSISTANT, "Sunny."),
    ]
    assert [(c.id, c.name, c.arguments) for c in messages[1].tool_calls] == [
        ("t1", "weather", {"city": "Oslo"})
    ]
    assert messages[2].tool_call_id == "t1"
    assert messages[1].author_id == "strands.agent:helper"

    # A new manager (as after a restart) restores the messages and the agent's state.
    restored = _agent(ConvostoreSessionManager("trip", sync_store), model)
    assert restored.messages == written
    assert restored.state.get("city") == "Oslo"
    restored("And the capital?")
    assert len(ConvostoreSessionRepository(sync_store).list_messages("trip", "helper")) == 6


async def test_the_repository_runs_inside_a_running_loop_and_on_another_thread(
    sync_store: convostore.sync.SyncStore,
) -> None:
    # Called on this test's running loop, with a sync store.
    repository = ConvostoreSessionRepository(sync_store)
    repository.create_session(Session("s", SessionType.AGENT))
    assert repository.read_session("s") == Session(
        "s", SessionType.AGENT, *_times(repository.read_session("s"))
    )
    # With an async store, from another thread while its loop runs; on the loop itself
    # the blocking methods cannot wait and raise Strands' error.
    store: Store = sync_store.target
    on_loop = await asyncio.wrap_future(
        asyncio.run_coroutine_threadsafe(_repository_on(store), sync_store.loop_thread.loop)
    )
    agent = SessionAgent("a", {"k": 1}, {})
    await asyncio.to_thread(on_loop.create_agent, "s", agent)
    assert await asyncio.to_thread(on_loop.read_agent, "s", "a") == agent
    with pytest.raises(SessionException, match="convostore"):
        await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(_call_on_loop(on_loop), sync_store.loop_thread.loop)
        )


async def _repository_on(store: Store) -> ConvostoreSessionRepository:
    return ConvostoreSessionRepository(store)


async def _call_on_loop(repository: ConvostoreSessionRepository) -> object:
    return repository.read_session("s")


def _times(session: Session | None) -> tuple[str, str]:
    assert session is not None
    return session.created_at, session.updated_at


def test_messages_page_update_in_place_and_fail_as_strands_expects(
    sync_store: convostore.sync.SyncStore,
) -> None:
    repository = ConvostoreSessionRepository(sync_store)
    with pytest.raises(SessionException, match="does not exist"):
        repository.create_agent("nowhere", SessionAgent("a", {}, {}))
    repository.create_session(Session("s", SessionType.AGENT))
    with pytest.raises(SessionException, match="already exists"):
        repository.create_session(Session("s", SessionType.AGENT))
    repository.create_agent("s", SessionAgent("a", {}, {}))
    for index in range(5):
        text = {"role": "user", "content": [{"text": f"m{index}"}]}
        repository.create_message("s", "a", SessionMessage.from_message(text, index))  # type: ignore[arg-type]
    page = repository.list_messages("s", "a", limit=2, offset=1)
    assert [m.message["content"][0]["text"] for m in page] == ["m1", "m2"]
    # A redaction of message 2 keeps its place; the full log keeps the original.
    redacted = repository.read_message("s", "a", 2)
    assert redacted is not None
    redacted.redact_message = {"role": "user", "content": [{"text": "[redacted]"}]}
    repository.update_message("s", "a", redacted)
    texts = [m.to_message()["content"][0]["text"] for m in repository.list_messages("s", "a")]
    assert texts == ["m0", "m1", "[redacted]", "m3", "m4"]
    missing = SessionMessage.from_message({"role": "user", "content": []}, 9)
    with pytest.raises(SessionException, match="does not exist"):
        repository.update_message("s", "a", missing)
    # Multi-agent state, kept whole.
    assert repository.read_multi_agent("s", "swarm") is None
    with pytest.raises(SessionException, match="does not exist"):
        repository.update_multi_agent("s", _MultiAgent("swarm", {"n": 1}))  # type: ignore[arg-type]
    repository.create_multi_agent("s", _MultiAgent("swarm", {"n": 1}))  # type: ignore[arg-type]
    repository.update_multi_agent("s", _MultiAgent("swarm", {"n": 2}))  # type: ignore[arg-type]
    assert repository.read_multi_agent("s", "swarm") == {"id": "swarm", "state": {"n": 2}}
    repository.delete_session("s")
    assert repository.read_session("s") is None
    with pytest.raises(SessionException, match="does not exist"):
        repository.delete_session("s")


class _MultiAgent:
    def __init__(self, id: str, state: dict[str, Any]) -> None:
        self.id = id
        self.state = state

    def serialize_state(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state}


def _file_sessions(folder: Path) -> FileSessionManager:
    """Two sessions Strands' own FileSessionManager writes: an agent run with a tool
    call, a multi-agent's state, and a second, short one."""
    manager = FileSessionManager(session_id="trip", storage_dir=str(folder))
    _agent(manager, ScriptedModel(_script())).__call__("Weather in Oslo?")
    manager.create_multi_agent("trip", _MultiAgent("swarm", {"step": 3}))  # type: ignore[arg-type]
    other = FileSessionManager(session_id="hello", storage_dir=str(folder))
    _agent(other, ScriptedModel([[{"text": "Hi."}]])).__call__("Hello")
    return manager


async def test_strands_files_import(store: Store, tmp_path: Path) -> None:
    files = _file_sessions(tmp_path / "sessions")
    seen: list[tuple[int, int, str]] = []
    report = await import_strands_files(
        tmp_path / "sessions", store, progress=lambda *a: seen.append(a)
    )
    assert sorted(report.imported) == ["hello", "trip"]
    assert seen[-1][:2] == (2, 2)
    # Read back through the adapter (on another thread, as Strands calls it): equal.
    repository = ConvostoreSessionRepository(store)
    got = await asyncio.to_thread(repository.list_messages, "trip", "helper")
    assert got == files.list_messages("trip", "helper")
    assert await asyncio.to_thread(repository.read_agent, "trip", "helper") == files.read_agent(
        "trip", "helper"
    )
    assert await repository.aread_multi_agent("trip", "swarm") == {
        "id": "swarm",
        "state": {"step": 3},
    }
    part = await store.find_part("trip", agent_user("helper"))
    assert part is not None
    tool = [e for e in await store.messages(part.id) if e.role == Role.TOOL]
    assert [(m.tool_call_id, m.content) for m in tool] == [("t1", "sunny in Oslo")]
    again = await import_strands_files(tmp_path / "sessions", store)
    assert (again.events_written, sorted(again.unchanged)) == (0, ["hello", "trip"])


async def test_a_corrupt_strands_session_stops_the_import(store: Store, tmp_path: Path) -> None:
    _file_sessions(tmp_path / "sessions")
    broken = tmp_path / "sessions" / "session_trip" / "agents" / "agent_helper" / "messages"
    (broken / "message_2.json").write_text("{broken")
    with pytest.raises(ImportSourceError) as raised:
        await import_strands_files(tmp_path / "sessions", store)
    report = raised.value.report
    assert report is not None
    assert (report.imported, report.failed_session) == (["hello"], "trip")
    assert await store.get_session("trip") is None
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "notes.txt").write_text("no sessions here")
    with pytest.raises(ImportSourceError, match="not a Strands FileSessionManager directory"):
        await import_strands_files(tmp_path / "elsewhere", store)


def test_strands_files_import_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _file_sessions(tmp_path / "sessions")
    url = f"sqlite:///{tmp_path / 'convostore.db'}"
    assert main(["import", "strands-files", str(tmp_path / "sessions"), "--to", url]) == 0
    out, err = capsys.readouterr()
    assert "2 session(s) imported" in out
    assert "] 2/2" in err
    assert main(["import", "strands-files", str(tmp_path / "sessions"), "--to", url]) == 0
    assert "0 event(s) written" in capsys.readouterr().out
