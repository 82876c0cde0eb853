"""Immutable values: users, sessions, the events of a session's log, and pages.

Values read from a store are frozen dataclasses. Writes are described by
`MessageWrite` and `EventWrite`; the store fills in what it owns (``seq``, the
version, stamps, and times the write leaves out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, Literal, TypeVar

__all__ = [
    "COMPACTION",
    "MESSAGE",
    "Appended",
    "Asset",
    "Attachment",
    "DataAttachment",
    "Event",
    "EventWrite",
    "Message",
    "MessageWrite",
    "Page",
    "PageRequest",
    "ReembedReport",
    "Role",
    "SearchHit",
    "Session",
    "SessionFilter",
    "SessionOrder",
    "SessionSummary",
    "ToolCall",
    "User",
    "UserRef",
]

MESSAGE = "MESSAGE"
"""The event type of every message."""
COMPACTION = "COMPACTION"
"""The event type of a compaction boundary; its payload names the kept event ids."""

T = TypeVar("T")


class Role(StrEnum):
    """Who speaks in a message. Plain strings are accepted wherever a role is expected."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class User:
    """A person or an agent. Stored once; sessions and messages refer to users by id."""

    id: str
    display_name: str
    username: str | None = None
    email: str | None = None
    kind: Literal["human", "agent"] = "human"
    metadata: Mapping[str, Any] = field(default_factory=dict)


UserRef = User | str
"""A `User` (inserted if absent, never overwritten) or the id of a stored user."""


@dataclass(frozen=True, slots=True)
class Session:
    """A chat session: its owner, title, kind, place in a thread, expiry and log version.

    ``owner_id``, ``kind``, ``part_of``, ``held_with`` and ``created_at`` never change.
    ``version`` is the version of the session's log; ``stamp`` is an opaque token that
    changes on every write to the session and guards `Store.update_session`.
    """

    id: str
    owner_id: str | None
    title: str | None
    kind: str
    part_of: str | None
    held_with: str | None
    created_at: datetime
    last_activity_at: datetime
    expires_at: datetime | None
    metadata: Mapping[str, Any]
    version: int
    stamp: str

    def is_expired(self, at: datetime) -> bool:
        """True iff the session expires strictly before ``at``."""
        return self.expires_at is not None and self.expires_at < at


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool the assistant asks to run; ``arguments`` is any JSON value."""

    id: str
    name: str
    arguments: Any = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file's metadata (the store keeps no bytes). ``created_at`` defaults to the
    message's time."""

    id: str
    filename: str
    mime_type: str = "application/octet-stream"
    size_bytes: int | None = None
    content_hash: str | None = None
    storage_uri: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class DataAttachment:
    """Structured data carried by a message; ``type`` and ``json`` are opaque to the store."""

    id: str
    type: str
    title: str | None = None
    json: Any = None


@dataclass(frozen=True, slots=True)
class Asset:
    """Durable metadata of an asset a message produced or refers to."""

    asset_id: str
    name: str
    mime_type: str = "application/octet-stream"
    size_bytes: int | None = None
    content_hash: str | None = None
    storage_uri: str | None = None
    created_at: datetime | None = None


def _repr_hiding_embedding(value: Any) -> str:
    """The dataclass repr, with a vector shown by its width: hundreds of floats would
    drown every other field in a log line or a traceback."""
    shown: list[str] = []
    for item in fields(value):
        field_value = getattr(value, item.name)
        if item.name == "embedding" and field_value is not None:
            shown.append(f"embedding=<{len(field_value)} floats>")
        elif item.repr:
            shown.append(f"{item.name}={field_value!r}")
    return f"{type(value).__qualname__}({', '.join(shown)})"


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a session's log, at position ``seq`` (assigned by the store)."""

    id: str
    session_id: str
    seq: int
    type: str
    created_at: datetime
    branch: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    payload: Any = None
    synthetic: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Message(Event):
    """An event of type MESSAGE: who wrote what, to whom, with what attached."""

    type: str = MESSAGE
    role: Role
    content: str
    author_id: str | None = None
    recipient_ids: tuple[str, ...] = ()
    in_reply_to: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    attachments: tuple[Attachment, ...] = ()
    data: tuple[DataAttachment, ...] = ()
    assets: tuple[Asset, ...] = ()
    narration: str | None = None
    embedding: tuple[float, ...] | None = None
    embedding_model: str | None = None
    stamp: str = ""

    def __repr__(self) -> str:
        return _repr_hiding_embedding(self)


@dataclass(frozen=True, slots=True)
class MessageWrite:
    """A message to append. ``author`` and ``recipients`` are `User` values (inserted
    if absent, never overwritten) or ids of stored users. ``synthetic`` marks a message
    the system made (a compaction summary): it starts no turn and moves no activity."""

    role: Role | str
    content: str
    author: UserRef | None = None
    recipients: Sequence[UserRef] = ()
    in_reply_to: str | None = None
    attachments: Sequence[Attachment] = ()
    data: Sequence[DataAttachment] = ()
    assets: Sequence[Asset] = ()
    tool_calls: Sequence[ToolCall] = ()
    tool_call_id: str | None = None
    branch: str | None = None
    metadata: Mapping[str, Any] | None = None
    id: str | None = None
    created_at: datetime | None = None
    embedding: Sequence[float] | None = None
    embedding_model: str | None = None
    synthetic: bool = False

    def __repr__(self) -> str:
        return _repr_hiding_embedding(self)


@dataclass(frozen=True, slots=True)
class EventWrite:
    """An event of the app's own type (``[A-Z][A-Z0-9_.]{0,63}``) or a COMPACTION boundary."""

    type: str
    payload: Any = None
    id: str | None = None
    branch: str | None = None
    metadata: Mapping[str, Any] | None = None
    synthetic: bool = False
    created_at: datetime | None = None


class SessionOrder(StrEnum):
    """How `Store.list_sessions` orders a user's sessions, newest first."""

    CREATED = "created"
    LAST_ACTIVITY = "last_activity"


@dataclass(frozen=True, slots=True)
class PageRequest:
    """One page of a listing: ``size`` in 1..100, the cursor of the previous page, and
    the order. A request that names no order follows its cursor's order (newest created
    first without a cursor); naming the other order than the cursor's is refused."""

    size: int = 20
    cursor: str | None = None
    order: SessionOrder | None = None


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """Which of a user's sessions a listing or count includes."""

    kind: str | None = None
    include_parts: bool = False


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """A page of results; ``next_cursor`` is None on the last page."""

    items: list[T]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """A session with its owner, its count of non-synthetic messages, and the author of
    its earliest message that has one."""

    session: Session
    owner: User | None
    message_count: int
    started_by: User | None


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A message found by `Store.search`, with its score: higher is better (cosine
    similarity, negative Euclidean distance, a text rank, or a fused rank)."""

    message: Message
    score: float


@dataclass(frozen=True, slots=True)
class Appended:
    """What `Store.append` did: ``event`` is the stored event; ``applied`` is True when
    this call wrote it, False when an earlier call had (a retried append, a replay)."""

    event: Event
    applied: bool


@dataclass(frozen=True, slots=True)
class ReembedReport:
    """What `Store.reembed` did: how many messages it embedded, and whether it
    recreated the vector index (a new model or width)."""

    messages: int
    index_recreated: bool
