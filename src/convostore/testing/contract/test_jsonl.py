"""JSONL export and import: a round trip keeps everything, and importing is idempotent."""

from __future__ import annotations

import json

import pytest

import convostore
from convostore import (
    Asset,
    Attachment,
    DataAttachment,
    EventFilter,
    InvalidArgumentError,
    Role,
    Store,
    ToolCall,
)
from convostore.jsonl import export_lines, import_lines
from convostore.model import Event, Message
from convostore.testing.helpers import AGENT, ALICE, BOB, T0, event, new_session, say


async def _filled(store: Store) -> list[str]:
    thread = await new_session(
        store, title="Thread", metadata={"tenant": "t1"}, kind="support", expires_at=T0
    )
    side = await store.create_session(ALICE, part_of=thread.id, held_with=AGENT)
    await store.add_message(
        thread.id,
        say(
            "Hello",
            author=ALICE,
            recipients=[BOB, AGENT],
            attachments=[Attachment("a1", "plan.pdf", "application/pdf", 12, "h", "s3://x", T0)],
            data=[DataAttachment("d1", "table", "Numbers", {"rows": [1, 2]})],
            created_at=T0,
            metadata={"k": 1},
        ),
    )
    await store.add_message(
        thread.id,
        say(
            "Checking",
            Role.ASSISTANT,
            author=AGENT,
            tool_calls=[ToolCall("c1", "look", {"q": "x"})],
            assets=[Asset("as1", "chart.png", "image/png", 3, None, None, T0)],
            embedding=[0.5, 0.25, 0.0],
            embedding_model="m",
            branch="research",
        ),
    )
    await store.add_message(thread.id, say("result", Role.TOOL, tool_call_id="c1"))
    await store.append_event(thread.id, event("APP.NOTE", {"n": [1, "two"]}, synthetic=True))
    await store.add_message(side.id, say("side talk", author=ALICE, recipients=[AGENT]))
    return [thread.id, side.id]


def _comparable(events: list[Event]) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for item in events:
        base = (item.id, item.seq, item.type, item.created_at, item.branch)
        rows.append((*base, dict(item.metadata), item.payload, item.synthetic))
        if isinstance(item, Message):
            rows.append(
                (
                    item.role,
                    item.content,
                    item.author_id,
                    item.recipient_ids,
                    item.tool_calls,
                    item.tool_call_id,
                    item.attachments,
                    item.data,
                    item.assets,
                    item.embedding,
                    item.embedding_model,
                )
            )
    return rows


async def _export(store: Store, owners: list[str]) -> list[str]:
    return [line async for line in export_lines(store, owners)]


async def _check_copy(source: Store, target: Store) -> None:
    session_ids = await _filled(source)
    lines = await _export(source, [ALICE.id])
    records = [json.loads(line) for line in lines]
    assert [r["record"] for r in records].count("session") == 2
    counts = await import_lines(target, lines)
    before = {sid: await source.read(sid) for sid in session_ids}
    assert counts.events == sum(len(v) for v in before.values())
    for session_id, events in before.items():
        assert _comparable(await target.read(session_id)) == _comparable(events)
    thread = await target.get_session(session_ids[0])
    assert thread is not None
    assert (thread.title, thread.kind, dict(thread.metadata)) == (
        "Thread",
        "support",
        {"tenant": "t1"},
    )
    assert thread.expires_at == T0
    side = await target.get_session(session_ids[1])
    assert side is not None
    assert (side.part_of, side.held_with) == (session_ids[0], AGENT.id)
    assert await target.get_user(AGENT.id) == AGENT
    assert await target.get_user(BOB.id) == BOB


async def test_export_then_import_elsewhere_keeps_everything(store: Store) -> None:
    async with await convostore.connect("memory://") as reference:
        await _check_copy(store, reference)


async def test_import_from_elsewhere_keeps_everything(store: Store) -> None:
    async with await convostore.connect("memory://") as reference:
        await _check_copy(reference, store)


async def test_import_twice_writes_once(store: Store) -> None:
    session_ids = await _filled(store)
    lines = await _export(store, [ALICE.id])
    versions = [await store.version(sid) for sid in session_ids]
    counts = await import_lines(store, lines)
    assert counts.events == 0
    assert counts.sessions == 0
    assert counts.events_kept == 5
    assert [await store.version(sid) for sid in session_ids] == versions


async def test_interrupted_import_resumes(store: Store) -> None:
    session_ids = await _filled(store)
    lines = await _export(store, [ALICE.id])
    full = await store.read(session_ids[0])
    await store.delete_session(session_ids[0])
    # The first run stops after the thread's second event.
    cut = [i for i, line in enumerate(lines) if '"record":"event"' in line][1] + 1
    await import_lines(store, lines[:cut])
    assert len(await store.read(session_ids[0])) == 2
    counts = await import_lines(store, lines)
    # The rest of the thread, and the part's message: the part went with its thread.
    assert counts.events == len(full) - 2 + 1
    assert _comparable(await store.read(session_ids[0])) == _comparable(full)


async def test_malformed_line_names_it_and_writes_nothing_of_it(store: Store) -> None:
    session = await new_session(store)
    lines = [
        json.dumps({"record": "session", "id": "s-new", "owner_id": ALICE.id}),
        "{not json",
    ]
    with pytest.raises(InvalidArgumentError, match="line 2"):
        await import_lines(store, lines)
    bad_event = [
        json.dumps({"record": "session", "id": session.id, "owner_id": ALICE.id}),
        json.dumps({"record": "event", "session_id": session.id, "role": "user", "content": 5}),
    ]
    with pytest.raises(InvalidArgumentError, match="line 2: content"):
        await import_lines(store, bad_event)
    assert await store.read(session.id, EventFilter()) == []
