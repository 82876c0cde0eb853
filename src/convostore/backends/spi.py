"""The types the store and the backends exchange: what a primitive of
`convostore.backends.interface.Backend` takes and answers. A backend imports these from
here, never from the store above it (`convostore.prepare`, `convostore.embedding`,
`convostore.store`), so a new backend stands on this module, the interface, the values
of `convostore.model` and the errors of `convostore.errors`. The values a primitive
takes or answers (`Session`, `Event`, `Message`, `User`, `SearchHit`, ...) are named
here too, so a backend's primitives name every type they exchange as ``spi.X``.

Everything here is a value: no I/O, no checking (the store checked what it hands down).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, Protocol

from convostore._codec import MessageParts
from convostore.cursors import Keyset
from convostore.errors import InvalidArgumentError
from convostore.model import (
    Event,
    Message,
    Role,
    SearchHit,
    Session,
    SessionFilter,
    SessionOrder,
    SessionSummary,
    User,
)

__all__ = [
    "MESSAGE_COLUMNS",
    "SESSION_COLUMNS",
    "AppendOutcome",
    "Event",
    "Listing",
    "Message",
    "Metric",
    "NewSession",
    "PendingEmbedding",
    "PreparedAppend",
    "PreparedEvent",
    "Role",
    "SearchHit",
    "SearchScope",
    "Session",
    "SessionChanges",
    "SessionFilter",
    "SessionOrder",
    "SessionSummary",
    "TextQuery",
    "User",
    "VectorIndexSpec",
    "VectorQuery",
    "message_values",
    "session_values",
]

Metric = Literal["cosine", "euclidean"]
"""How vectors are compared: cosine similarity or Euclidean distance."""


class _Declares(Protocol):
    """What a vector index is declared from: an embedder's name and width (and, if it
    has one, its ``metric``)."""

    @property
    def name(self) -> str: ...
    @property
    def dimensions(self) -> int: ...


# ---------------------------------------------------------------------------- sessions


@dataclass(frozen=True, slots=True)
class NewSession:
    """A validated session to insert, with the users it needs."""

    session: Session
    metadata_json: str
    indexed_metadata: tuple[tuple[str, str], ...]
    users_to_insert: tuple[User, ...]
    required_user_ids: tuple[str, ...]


SESSION_COLUMNS: Final = (
    "id", "owner_id", "title", "kind", "part_of", "held_with",
    "created_at", "last_activity_at", "expires_at", "metadata",
)  # fmt: skip
"""The columns every backend stores of a new session (`session_values`), by the names of
the SQL schema (`convostore.backends.sql.tables`); a backend adds its own, and renames
those its storage names otherwise."""


def _as_given(time: datetime) -> datetime:
    return time


def session_values(new: NewSession, time: Callable[[datetime], Any] = _as_given) -> tuple[Any, ...]:
    """The values of `SESSION_COLUMNS` for ``new``, its times as ``time`` encodes them
    (as datetimes by default)."""
    session = new.session
    expires_at = session.expires_at
    return (
        session.id,
        session.owner_id,
        session.title,
        session.kind,
        session.part_of,
        session.held_with,
        time(session.created_at),
        time(session.last_activity_at),
        None if expires_at is None else time(expires_at),
        new.metadata_json,
    )


@dataclass(frozen=True, slots=True)
class SessionChanges:
    """What `Store.update_session` writes, guarded by ``expected_stamp``."""

    session_id: str
    expected_stamp: str
    title: str | None
    metadata: Mapping[str, Any]
    metadata_json: str
    indexed_metadata: tuple[tuple[str, str], ...]
    expires_at: datetime | None
    new_stamp: str


@dataclass(frozen=True, slots=True)
class Listing:
    """One page of a listing to read: ``size`` items after ``after`` in ``order``."""

    owner_id: str
    size: int
    order: SessionOrder
    after: Keyset | None
    filter: SessionFilter


# ---------------------------------------------------------------------------- the log


@dataclass(frozen=True, slots=True)
class PreparedEvent:
    """An event ready to store. ``event.seq`` is 0 until the backend assigns it.

    ``metadata_json`` and ``payload_json`` are the JSON of the event's metadata and
    payload; for a message, ``message_json`` holds the JSON of its list-valued parts.
    ``stamp`` is the row's stamp, from the store: the message's own, or a new one for
    another event (a backend that tells rows apart by their stamps keeps it).
    """

    event: Event
    metadata_json: str
    payload_json: str | None
    message_json: MessageParts | None
    stamp: str


MESSAGE_COLUMNS: Final = (
    "role", "content", "author_id", "recipient_ids", "in_reply_to",
    "tool_calls", "tool_call_id", "attachments", "data", "assets",
)  # fmt: skip
"""The columns every backend stores of a message beyond those of its event
(`message_values`), named and ordered as in the SQL schema; a backend adds its own
(the vector, the stamp, its text index)."""


def message_values(message: Message, parts: MessageParts) -> tuple[Any, ...]:
    """The values of `MESSAGE_COLUMNS` for ``message``, its list-valued ``parts`` as
    their JSON (`PreparedEvent.message_json`)."""
    return (
        message.role.value,
        message.content,
        message.author_id,
        parts.recipient_ids,
        message.in_reply_to,
        parts.tool_calls,
        message.tool_call_id,
        parts.attachments,
        parts.data,
        parts.assets,
    )


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    """One append: a single idempotent event (``expected_version`` None) or a batch.

    ``activity_at`` is set when the append holds a non-synthetic message: the session's
    ``last_activity_at`` becomes max(stored, activity_at). ``started_by`` is the author of
    the first authored message in the append, for the session's summary.
    """

    session_id: str
    events: tuple[PreparedEvent, ...]
    expected_version: int | None
    users_to_insert: tuple[User, ...]
    required_user_ids: tuple[str, ...]
    activity_at: datetime | None
    new_message_count: int
    started_by: str | None
    new_stamp: str

    @property
    def embedded_message_ids(self) -> list[str]:
        """The ids of the append's messages that carry a vector."""
        return [
            item.event.id
            for item in self.events
            if isinstance(item.event, Message) and item.event.embedding is not None
        ]


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """``applied`` False: a batch whose expected version was not current (``events`` is
    empty), or an idempotent replay (``events`` holds the stored event)."""

    applied: bool
    events: list[Event] = field(default_factory=list)


# ---------------------------------------------------------------------------- vectors


@dataclass(frozen=True, slots=True)
class VectorIndexSpec:
    """The vector index a store keeps, declared from its embedder."""

    dimensions: int
    metric: Metric
    model: str

    @classmethod
    def of(cls, embedder: _Declares) -> VectorIndexSpec:
        declared = getattr(embedder, "metric", "cosine")
        if declared not in ("cosine", "euclidean"):
            raise InvalidArgumentError(f"unknown vector metric {declared!r}")
        metric: Metric = "cosine" if declared == "cosine" else "euclidean"
        dimensions = embedder.dimensions
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
            raise InvalidArgumentError("an embedder's dimensions must be a positive integer")
        if not isinstance(embedder.name, str) or not embedder.name.strip():
            raise InvalidArgumentError("an embedder's name must be a non-blank string")
        return cls(dimensions, metric, embedder.name)


@dataclass(frozen=True, slots=True)
class PendingEmbedding:
    """A message that has no vector of the current model."""

    message_id: str
    session_id: str
    role: Role
    content: str


# ---------------------------------------------------------------------------- the queries


@dataclass(frozen=True, slots=True)
class SearchScope:
    """Where a search looks: that owner's sessions, that session, those roles (None:
    no restriction)."""

    owner_id: str | None = None
    session_id: str | None = None
    roles: tuple[Role, ...] | None = None


@dataclass(frozen=True, slots=True)
class VectorQuery:
    """The ``k`` messages nearest ``vector`` by ``metric`` among those with a vector of
    ``model`` (any model when None) in ``scope``."""

    vector: tuple[float, ...]
    metric: Metric
    model: str | None
    k: int
    scope: SearchScope


@dataclass(frozen=True, slots=True)
class TextQuery:
    """Up to ``k`` messages in ``scope`` holding every one of ``terms`` (text tokens)."""

    terms: tuple[str, ...]
    k: int
    scope: SearchScope
