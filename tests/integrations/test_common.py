"""What the adapters share, on every backend: repeated events stay whole, and a
version-checked write that other writers keep beating ends in a clear error."""

from __future__ import annotations

from typing import Any

import pytest

from convostore import (
    Attachment,
    DataAttachment,
    EventWrite,
    Message,
    MessageWrite,
    Role,
    Store,
    ToolCall,
    User,
)
from convostore.errors import ConflictError
from convostore.integrations._common import ATTEMPTS, append_all, copy_write


async def test_copy_write_keeps_a_message_whole(store: Store) -> None:
    await store.create_session(None, session_id="from")
    await store.create_session(None, session_id="to")
    ada, bob = User("ada", "Ada"), User("bob", "Bob")
    first = await store.add_message("from", MessageWrite(Role.USER, "hello", author=ada))
    original = await store.add_message(
        "from",
        MessageWrite(
            Role.ASSISTANT,
            "see attached",
            author=bob,
            recipients=[ada],
            in_reply_to=first.id,
            attachments=[Attachment("a1", "plan.pdf", "application/pdf", 12)],
            data=[DataAttachment("d1", "table", "Prices", {"rows": [1, 2]})],
            tool_calls=[ToolCall("c1", "lookup", {"q": "tea"})],
            branch="orchestrator.research",
            metadata={"k": "v"},
        ),
    )
    copied = await store.append_event("to", copy_write(original))
    assert isinstance(copied, Message)
    assert copied.id != original.id
    kept = (
        "role",
        "content",
        "author_id",
        "recipient_ids",
        "in_reply_to",
        "tool_calls",
        "branch",
        "metadata",
        "created_at",
    )
    assert {f: getattr(copied, f) for f in kept} == {f: getattr(original, f) for f in kept}
    assert [(a.id, a.filename, a.size_bytes) for a in copied.attachments] == [
        ("a1", "plan.pdf", 12)
    ]
    assert [(d.id, d.json) for d in copied.data] == [("d1", {"rows": [1, 2]})]


async def test_copy_write_keeps_an_events_branch(store: Store) -> None:
    await store.create_session(None, session_id="s")
    event = await store.append_event("s", EventWrite("APP.STEP", {"n": 1}, branch="a.b"))
    copied = await store.append_event("s", copy_write(event))
    assert (copied.type, copied.payload, copied.branch) == ("APP.STEP", {"n": 1}, "a.b")


async def test_a_batch_other_writers_keep_beating_gives_up(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.create_session(None, session_id="s")
    calls: list[int] = []

    async def always_beaten(*args: Any, **kwargs: Any) -> bool:
        calls.append(1)
        return False

    monkeypatch.setattr(store, "append_events", always_beaten)
    writes = [MessageWrite(Role.USER, "one"), MessageWrite(Role.USER, "two")]
    with pytest.raises(ConflictError, match=f"gave up after {ATTEMPTS} attempts"):
        await append_all(store, "s", writes)
    assert len(calls) == ATTEMPTS
    assert await store.read("s") == []
