"""Setup the contract tests share (and tests of one backend may use): users, sessions,
writes, snapshots, page walks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

import convostore.prepare
from convostore import (
    Event,
    EventWrite,
    Message,
    MessageWrite,
    PageRequest,
    Role,
    Session,
    SessionFilter,
    SessionOrder,
    SessionSummary,
    Store,
    ToolCall,
    User,
)
from convostore.model import UserRef

__all__ = [
    "AGENT",
    "ALICE",
    "BOB",
    "CAROL",
    "MINUS_7",
    "PLUS_0545",
    "T0",
    "Snapshot",
    "append_all",
    "contents",
    "event",
    "flatten",
    "freeze_store_clock",
    "ids",
    "is_utc",
    "new_session",
    "say",
    "snapshot",
    "sort_key",
    "tool_turns",
    "walk_sessions",
    "walk_summaries",
]

ALICE = User("alice", "Alice", username="alice", email="alice@example.org")
BOB = User("bob", "Bob")
CAROL = User("carol", "Carol")
AGENT = User("agent-1", "Helper agent", kind="agent", metadata={"model": "m-1"})

# A fixed instant in the middle of a microsecond-precise second.
T0 = datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
MINUS_7 = timezone(timedelta(hours=-7))
PLUS_0545 = timezone(timedelta(hours=5, minutes=45))


async def new_session(store: Store, owner: UserRef | None = ALICE, **options: Any) -> Session:
    """A session owned by ``owner`` (Alice by default)."""
    return await store.create_session(owner, **options)


def say(
    content: str,
    role: Role | str = Role.USER,
    author: UserRef | None = None,
    **options: Any,
) -> MessageWrite:
    """A message write; the role defaults to user."""
    return MessageWrite(role=role, content=content, author=author, **options)


def event(event_type: str = "APP.EVENT", payload: Any = None, **options: Any) -> EventWrite:
    return EventWrite(type=event_type, payload=payload, **options)


async def append_all(
    store: Store, session_id: str, writes: Sequence[MessageWrite | EventWrite]
) -> list[Event]:
    """Append the writes one by one, in order."""
    return [await store.append_event(session_id, write) for write in writes]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a write to one session could change, to show that nothing was."""

    session: Session | None
    version: int
    events: list[Event]


async def snapshot(store: Store, session_id: str) -> Snapshot:
    return Snapshot(
        await store.get_session(session_id),
        await store.version(session_id),
        await store.read(session_id),
    )


async def walk_sessions(
    store: Store,
    owner_id: str,
    order: SessionOrder,
    size: int,
    filter: SessionFilter | None = None,
) -> list[list[Session]]:
    """Every page of a listing, following cursors until ``next_cursor`` is None."""
    pages: list[list[Session]] = []
    cursor: str | None = None
    while True:
        page = await store.list_sessions(owner_id, PageRequest(size, cursor, order), filter)
        pages.append(page.items)
        if page.next_cursor is None:
            return pages
        assert len(page.items) == size, "a page before the last one must be full"
        cursor = page.next_cursor
        assert len(pages) <= 1000, "the listing never ends"


async def walk_summaries(
    store: Store,
    owner_id: str,
    order: SessionOrder,
    size: int,
    filter: SessionFilter | None = None,
) -> list[SessionSummary]:
    items: list[SessionSummary] = []
    cursor: str | None = None
    while True:
        page = await store.list_summaries(owner_id, PageRequest(size, cursor, order), filter)
        items.extend(page.items)
        if page.next_cursor is None:
            return items
        cursor = page.next_cursor
        assert len(items) <= 100_000, "the listing never ends"


def flatten(pages: Sequence[Sequence[Session]]) -> list[Session]:
    return [session for page in pages for session in page]


def sort_key(order: SessionOrder, session: Session) -> tuple[Any, ...]:
    """The listing's sort key; listings are descending on it."""
    if order is SessionOrder.CREATED:
        return (session.id,)
    return (session.last_activity_at, session.id)


def freeze_store_clock(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    """Make the writer's clock read ``when``: the time `Store` stamps new sessions and
    appends with (a writer whose clock lags, or many writes in one instant)."""
    monkeypatch.setattr(convostore.prepare, "utc_now", lambda: when)


def ids(events: Sequence[Event] | Sequence[Session]) -> list[str]:
    return [e.id for e in events]


def contents(events: Sequence[Event]) -> list[str]:
    """Each message's content, or the type of a non-message event."""
    return [e.content if isinstance(e, Message) else e.type for e in events]


def is_utc(value: datetime | None) -> bool:
    return (
        value is not None
        and value.tzinfo is not None
        and value.utcoffset() == timedelta(0)
        and value.tzname() == "UTC"
    )


async def tool_turns(store: Store, session_id: str) -> list[Event]:
    """Two turns, each with a tool call and its result:

    1 user q1, 2 assistant (calls t1), 3 tool (t1 result), 4 assistant a1,
    5 user q2, 6 assistant (calls t2), 7 tool (t2 result), 8 assistant a2.
    """
    return await append_all(
        store,
        session_id,
        [
            say("q1", author=ALICE),
            say("", Role.ASSISTANT, tool_calls=[ToolCall("t1", "search", {"q": "x"})]),
            say("r1", Role.TOOL, tool_call_id="t1"),
            say("a1", Role.ASSISTANT),
            say("q2", author=ALICE),
            say("", Role.ASSISTANT, tool_calls=[ToolCall("t2", "search", {"q": "y"})]),
            say("r2", Role.TOOL, tool_call_id="t2"),
            say("a2", Role.ASSISTANT),
        ],
    )
