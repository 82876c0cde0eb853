"""The model round-trips: every value written reads back as written, on every backend."""

from __future__ import annotations

from array import array
from datetime import UTC, datetime

import pytest

from convostore import (
    MESSAGE,
    Asset,
    Attachment,
    DataAttachment,
    EventFilter,
    Message,
    Role,
    Store,
    ToolCall,
)
from convostore.ids import is_uuid7
from convostore.testing.helpers import ALICE, BOB, CAROL, MINUS_7, event, new_session, say


async def test_session_and_event_ids_default_to_uuid7(store: Store) -> None:
    session = await new_session(store)
    assert is_uuid7(session.id)
    message = await store.add_message(session.id, say("hello"))
    other = await store.append_event(session.id, event())
    for value in (message.id, other.id):
        assert is_uuid7(value)
        assert value == value.lower()
    assert message.id < other.id


async def test_caller_supplied_unicode_ids_round_trip(store: Store) -> None:
    session = await new_session(store, session_id="séance-✓-会话")
    assert session.id == "séance-✓-会话"
    assert (await store.get_session("séance-✓-会话")) == session
    message = await store.add_message(session.id, say("x", id="événement-✓-事件"))
    stored = await store.read("séance-✓-会话")
    assert [e.id for e in stored] == ["événement-✓-事件"]
    assert stored[0] == message
    assert stored[0].session_id == "séance-✓-会话"


async def test_message_without_parts_reads_back_with_empty_tuples(store: Store) -> None:
    session = await new_session(store)
    written = await store.add_message(session.id, say("plain"))
    for message in (written, *(await store.messages(session.id))):
        assert isinstance(message, Message)
        assert message.recipient_ids == ()
        assert message.tool_calls == ()
        assert message.attachments == ()
        assert message.data == ()
        assert message.assets == ()
        assert message.metadata == {}
        assert message.embedding is None
        assert message.embedding_model is None
        assert message.narration is None
        assert message.author_id is None
        assert message.in_reply_to is None
        assert message.tool_call_id is None
        assert message.branch is None
        assert message.synthetic is False
        assert message.type == MESSAGE


async def test_message_parts_round_trip(store: Store) -> None:
    session = await new_session(store)
    first = await store.add_message(session.id, say("first", author=ALICE))
    attachment = Attachment(
        id="att-1",
        filename="report é.pdf",
        mime_type="application/pdf",
        size_bytes=12345,
        content_hash="sha256:abc",
        storage_uri="s3://bucket/report.pdf",
        created_at=datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=MINUS_7),
    )
    data = DataAttachment(
        id="data-1", type="chart", title="Sales", json={"series": [1, 2.5, None], "ok": True}
    )
    asset = Asset(
        asset_id="asset-1",
        name="image.png",
        mime_type="image/png",
        size_bytes=0,
        content_hash=None,
        storage_uri="file:///tmp/image.png",
        created_at=datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    )
    written = await store.add_message(
        session.id,
        say(
            "with everything ✓",
            Role.ASSISTANT,
            author=BOB,
            recipients=[CAROL, "alice", BOB],
            in_reply_to=first.id,
            attachments=[attachment],
            data=[data, DataAttachment(id="data-2", type="empty")],
            assets=[asset],
            tool_calls=[
                ToolCall("call-1", "search", {"query": "x", "limit": 3, "deep": [{"a": 1}]}),
                ToolCall("call-2", "noop", {}),
            ],
            branch="orchestrator.research",
            metadata={"trace": "t-1", "n": 1.5, "list": [1, "two"]},
        ),
    )
    (stored,) = [m for m in await store.messages(session.id) if m.id == written.id]
    assert stored == written
    assert stored.role is Role.ASSISTANT
    assert stored.content == "with everything ✓"
    assert stored.author_id == "bob"
    assert stored.recipient_ids == ("carol", "alice", "bob")
    assert stored.in_reply_to == first.id
    assert stored.attachments == (attachment,)
    assert stored.data == (data, DataAttachment(id="data-2", type="empty"))
    assert stored.assets == (asset,)
    assert stored.tool_calls == (
        ToolCall("call-1", "search", {"query": "x", "limit": 3, "deep": [{"a": 1}]}),
        ToolCall("call-2", "noop", {}),
    )
    assert stored.branch == "orchestrator.research"
    assert stored.metadata == {"trace": "t-1", "n": 1.5, "list": [1, "two"]}


async def test_attachment_without_time_takes_the_message_time(store: Store) -> None:
    session = await new_session(store)
    when = datetime(2023, 5, 6, 7, 8, 9, 10, tzinfo=UTC)
    written = await store.add_message(
        session.id,
        say(
            "x",
            created_at=when,
            attachments=[Attachment("a", "f.txt")],
            assets=[Asset("b", "g.txt")],
        ),
    )
    (stored,) = await store.messages(session.id)
    assert stored == written
    assert stored.attachments[0].created_at == when
    assert stored.assets[0].created_at == when


async def test_tool_message_round_trips(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("result", "tool", tool_call_id="call-1"))
    (stored,) = await store.messages(session.id)
    assert stored.role is Role.TOOL
    assert stored.tool_call_id == "call-1"


async def test_event_payload_and_metadata_round_trip(store: Store) -> None:
    session = await new_session(store)
    payload = {"tool": "search", "result": [1, 2, {"x": "ü"}], "none": None, "f": 0.25}
    written = await store.append_event(
        session.id,
        event("TOOL.RESULT", payload, metadata={"k": "v"}, branch="a.b", synthetic=True),
    )
    (stored,) = await store.read(session.id)
    assert stored == written
    assert not isinstance(stored, Message)
    assert stored.type == "TOOL.RESULT"
    assert stored.payload == payload
    assert stored.metadata == {"k": "v"}
    assert stored.branch == "a.b"
    assert stored.synthetic is True


@pytest.mark.parametrize("payload", [None, 0, "text", [1, [2]], {"a": {"b": []}}, True])
async def test_any_json_payload_round_trips(store: Store, payload: object) -> None:
    session = await new_session(store)
    await store.append_event(session.id, event("APP.X", payload))
    (stored,) = await store.read(session.id)
    assert stored.payload == payload
    assert type(stored.payload) is type(payload)


async def test_tuples_in_json_read_back_as_lists(store: Store) -> None:
    session = await new_session(store)
    written = await store.append_event(session.id, event("APP.X", {"t": (1, 2)}))
    (stored,) = await store.read(session.id)
    assert stored.payload == {"t": [1, 2]}
    assert written.payload == stored.payload


async def test_embedding_round_trips_as_float32_with_its_model(store: Store) -> None:
    session = await new_session(store)
    vector = [0.1, -2.5, 1 / 3, 1e-8, 3.4e38, 0.0]
    written = await store.add_message(
        session.id, say("x", embedding=vector, embedding_model="hash-6")
    )
    as_float32 = tuple(array("f", vector).tolist())
    (stored,) = await store.messages(session.id)
    assert stored.embedding == as_float32
    assert written.embedding == as_float32
    assert stored.embedding_model == "hash-6"


async def test_role_accepted_as_plain_strings(store: Store) -> None:
    session = await new_session(store)
    for role in ("user", "assistant", "system", "tool"):
        message = await store.add_message(session.id, say(role, role))
        assert message.role is Role(role)
    stored = await store.messages(session.id)
    assert [m.role for m in stored] == list(Role)
    assert [m.role for m in stored] == ["user", "assistant", "system", "tool"]
    users = await store.read(session.id, EventFilter(roles=["user", "tool"]))
    assert [e.content for e in users if isinstance(e, Message)] == ["user", "tool"]


async def test_session_round_trips_every_field(store: Store) -> None:
    created = await store.create_session(
        ALICE,
        session_id="s-1",
        title="Title ✓",
        kind="support-ticket",
        held_with=BOB,
        metadata={"tenant": "acme", "n": [1, 2]},
        expires_at=datetime(2100, 1, 1, 0, 0, 0, 1, tzinfo=MINUS_7),
    )
    assert created.id == "s-1"
    assert created.owner_id == "alice"
    assert created.title == "Title ✓"
    assert created.kind == "support-ticket"
    assert created.part_of is None
    assert created.held_with == "bob"
    assert created.metadata == {"tenant": "acme", "n": [1, 2]}
    assert created.expires_at == datetime(2100, 1, 1, 0, 0, 0, 1, tzinfo=MINUS_7)
    assert created.version == 0
    assert isinstance(created.stamp, str)
    assert created.stamp
    assert created.last_activity_at == created.created_at
    assert await store.get_session("s-1") == created


async def test_session_defaults(store: Store) -> None:
    created = await store.create_session(None)
    assert created.owner_id is None
    assert created.title is None
    assert created.kind == "chat"
    assert created.held_with is None
    assert created.expires_at is None
    assert created.metadata == {}
    assert await store.get_session(created.id) == created
