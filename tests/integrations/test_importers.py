"""Importers, on files the peer packages themselves write in the test, into every backend."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.genai import types
from langchain_community.chat_message_histories import SQLChatMessageHistory
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from convostore import Role, Store
from convostore.cli import main
from convostore.integrations.adk import ConvostoreSessionService, store_session_id
from convostore.integrations.importers import (
    ImportSourceError,
    import_adk_db,
    import_langchain_sql,
    import_openai_sqlite,
    import_source,
)
from convostore.integrations.langchain import ConvostoreChatMessageHistory
from convostore.integrations.openai_agents import ConvostoreSession

ITEMS: list[Any] = [
    {"role": "user", "content": "Plan a trip to Kyoto"},
    {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Kyoto"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {"role": "assistant", "content": "Go in April."},
    {"type": "reasoning", "id": "rs_1", "summary": []},
]


async def _openai_file(path: Path) -> dict[str, list[Any]]:
    written: dict[str, list[Any]] = {}
    for session_id, items in (("trip", ITEMS), ("chat", ITEMS[:1])):
        peer = SQLiteSession(session_id, path)
        await peer.add_items(items)
        written[session_id] = await peer.get_items()
        peer.close()
    return written


async def test_openai_sqlite_import(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "agents.db"
    written = await _openai_file(path)
    seen: list[tuple[int, int, str]] = []
    report = await import_openai_sqlite(path, store, progress=lambda *a: seen.append(a))
    assert sorted(report.imported) == ["chat", "trip"]
    assert report.events_written == 6
    assert seen[-1][:2] == (2, 2)
    for session_id, items in written.items():
        assert await ConvostoreSession(session_id, store).get_items() == items
    messages = await store.messages("trip")
    assert [m.role for m in messages] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    with sqlite3.connect(path) as peer:
        times = [
            row[0]
            for row in peer.execute(
                "SELECT created_at FROM agent_messages WHERE session_id = 'trip' ORDER BY id"
            )
        ]
    stored = [e.created_at.strftime("%Y-%m-%d %H:%M:%S") for e in await store.read("trip")]
    assert stored == times
    # A rerun writes nothing new; a grown source adds only what is new.
    again = await import_openai_sqlite(path, store)
    assert (again.events_written, sorted(again.unchanged)) == (0, ["chat", "trip"])
    peer_session = SQLiteSession("chat", path)
    await peer_session.add_items([{"role": "assistant", "content": "Hello"}])
    peer_session.close()
    grown = await import_openai_sqlite(path, store)
    assert (grown.imported, grown.events_written) == (["chat"], 1)
    assert len(await store.read("chat")) == 2


async def test_adk_db_import(store: Store, tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}"
    peer = DatabaseSessionService(db_url=url)
    session = await peer.create_session(
        app_name="trips", user_id="ada", state={"app:region": "eu", "user:name": "Ada", "n": 1}
    )
    now = time.time()
    await peer.append_event(
        session,
        Event(
            invocation_id="i1",
            author="user",
            timestamp=now,
            content=types.Content(role="user", parts=[types.Part(text="Kyoto in spring?")]),
        ),
    )
    await peer.append_event(
        session,
        Event(
            invocation_id="i1",
            author="planner",
            timestamp=now + 1,
            content=types.Content(role="model", parts=[types.Part(text="Yes, April.")]),
            actions=EventActions(state_delta={"n": 2}),
        ),
    )
    await peer.create_session(app_name="trips", user_id="bob", session_id="bob-1")
    expected = await peer.get_session(app_name="trips", user_id="ada", session_id=session.id)
    await peer.close()
    assert expected is not None

    report = await import_adk_db(tmp_path / "adk.db", store)
    stored_id = store_session_id("trips", "ada", session.id)
    assert sorted(report.imported) == sorted([stored_id, store_session_id("trips", "bob", "bob-1")])
    service = ConvostoreSessionService(store)
    got = await service.get_session(app_name="trips", user_id="ada", session_id=session.id)
    assert got is not None
    assert got.events == expected.events
    assert got.state == expected.state
    assert got.last_update_time == pytest.approx(expected.last_update_time)
    listed = await service.list_sessions(app_name="trips")
    assert {s.id for s in listed.sessions} == {session.id, "bob-1"}
    messages = await store.messages(stored_id)
    assert [(m.role, m.content) for m in messages] == [
        (Role.USER, "Kyoto in spring?"),
        (Role.ASSISTANT, "Yes, April."),
    ]
    assert [m.created_at.timestamp() for m in messages] == pytest.approx([now, now + 1])
    before = await store.get_session(f"adk-app:{'trips'}")
    again = await import_adk_db(tmp_path / "adk.db", store)
    assert again.events_written == 0
    assert again.imported == []
    after = await store.get_session("adk-app:trips")
    assert before is not None
    assert after is not None
    assert after.stamp == before.stamp


def _langchain_history(path: Path) -> dict[str, list[Any]]:
    written: dict[str, list[Any]] = {}
    conversation = [
        SystemMessage("Be brief."),
        HumanMessage("Capital of Chile?"),
        AIMessage("", tool_calls=[{"id": "t", "name": "atlas", "args": {"q": "Chile"}}]),
        ToolMessage("Santiago", tool_call_id="t"),
        AIMessage("Santiago."),
    ]
    for session_id, messages in (("geo", conversation), ("hi", conversation[1:2])):
        peer = SQLChatMessageHistory(session_id, connection=f"sqlite:///{path}")
        peer.add_messages(messages)
        written[session_id] = peer.messages
    return written


async def test_langchain_sql_import(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "lc.db"
    written = _langchain_history(path)
    report = await import_langchain_sql(path, store)
    assert report.imported == ["geo", "hi"]
    for session_id, messages in written.items():
        assert await ConvostoreChatMessageHistory(session_id, store).aget_messages() == messages
    assert [m.role for m in await store.messages("geo")] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    again = await import_source("langchain-sql", path, store)
    assert (again.events_written, again.unchanged) == (0, ["geo", "hi"])


async def test_foreign_and_missing_files_are_refused(store: Store, tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, just some words " * 50)
    with pytest.raises(ImportSourceError, match="not a readable SQLite database"):
        await import_openai_sqlite(text, store)
    with pytest.raises(ImportSourceError, match="no such file"):
        await import_adk_db(tmp_path / "missing.db", store)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE things (id INTEGER)")
    with pytest.raises(ImportSourceError, match="has no table 'message_store'"):
        await import_langchain_sql(other, store)
    with pytest.raises(ImportSourceError, match="unknown import format"):
        await import_source("csv", other, store)
    assert await store.get_session("trip") is None


async def test_a_corrupt_session_stops_the_import_and_is_not_half_written(
    store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "agents.db"
    await _openai_file(path)
    with sqlite3.connect(path) as connection:
        connection.execute(
            "UPDATE agent_messages SET message_data = '{broken' "
            "WHERE id = (SELECT MAX(id) FROM agent_messages WHERE session_id = 'trip')"
        )
    with pytest.raises(ImportSourceError) as raised:
        await import_openai_sqlite(path, store)
    report = raised.value.report
    assert report is not None
    assert (report.imported, report.failed_session) == (["chat"], "trip")
    assert "holds no JSON item" in str(raised.value)
    assert len(await store.read("chat")) == 1
    assert await store.get_session("trip") is None


def test_import_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    path = tmp_path / "agents.db"
    asyncio.run(_openai_file(path))
    url = f"sqlite:///{tmp_path / 'convostore.db'}"
    assert main(["import", "openai-sqlite", str(path), "--to", url]) == 0
    out, err = capsys.readouterr()
    assert "2 session(s) imported" in out
    assert "6 event(s) written" in out
    assert "[" + "#" * 30 + "] 2/2" in err
    assert main(["import", "openai-sqlite", str(path), "--to", url]) == 0
    assert "0 event(s) written" in capsys.readouterr().out
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"\x00" * 4096)
    assert main(["import", "adk-db", str(broken), "--to", url]) == 1
    err = capsys.readouterr().err
    assert "convostore import: an ADK DatabaseSessionService database" in err
    assert "not a readable SQLite database" in err
