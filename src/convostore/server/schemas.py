"""The shapes of the HTTP API's bodies, for validation and the OpenAPI document.

Responses are built by `convostore.records` and described here; requests are
validated here, then read by `convostore.records` into the store's values.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

JsonObject = dict[str, Any]
INT64_MAX = 2**63 - 1


def _in_utc_range(value: datetime) -> datetime:
    # A time near year 1 or 9999 may not exist in UTC: refused here, not by a 500 later.
    if value.tzinfo is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            raise ValueError("the time is out of range once converted to UTC") from None
    return value


Time = Annotated[datetime, AfterValidator(_in_utc_range)]
"""A datetime that exists in UTC (naive ones are refused by the store)."""
Count64 = Annotated[int, Field(ge=0, le=INT64_MAX)]
"""A count or a position: what a 64-bit column holds."""
Finite = Annotated[float, Field(allow_inf_nan=False)]


class Problem(BaseModel):
    """An error, as RFC 9457 problem details."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    errors: list[JsonObject] | None = None


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserIn(_In):
    id: str = Field(min_length=1, max_length=255)
    display_name: str = Field(min_length=1)
    username: str | None = None
    email: str | None = None
    kind: Literal["human", "agent"] = "human"
    metadata: JsonObject = Field(default_factory=dict)


class UserOut(BaseModel):
    id: str
    display_name: str
    username: str | None
    email: str | None
    kind: Literal["human", "agent"]
    metadata: JsonObject


class UserBody(_In):
    display_name: str = Field(min_length=1)
    username: str | None = None
    email: str | None = None
    kind: Literal["human", "agent"] = "human"
    metadata: JsonObject = Field(default_factory=dict)


UserRefIn = str | UserIn


class SessionCreate(_In):
    id: str | None = Field(default=None, min_length=1, max_length=255)
    owner_id: str | None = Field(
        default=None, description="admin keys only; other keys create for their owner"
    )
    title: str | None = None
    kind: str = Field(default="chat", min_length=1)
    part_of: str | None = None
    held_with: UserRefIn | None = None
    metadata: JsonObject | None = None
    expires_at: Time | None = None


class SessionPatch(_In):
    """The fields to change; the others keep their value. Needs ``If-Match``."""

    title: str | None = None
    metadata: JsonObject | None = None
    expires_at: Time | None = None


class TitleBody(_In):
    title: str | None


class SessionOut(BaseModel):
    id: str
    owner_id: str | None
    title: str | None
    kind: str
    part_of: str | None
    held_with: str | None
    created_at: datetime
    last_activity_at: datetime
    expires_at: datetime | None
    metadata: JsonObject
    version: int
    stamp: str


class SummaryOut(BaseModel):
    session: SessionOut
    owner: UserOut | None
    message_count: int
    started_by: UserOut | None


class SummaryPage(BaseModel):
    items: list[SummaryOut]
    next_cursor: str | None


class PartCreate(_In):
    held_with: UserRefIn
    title: str | None = None
    kind: str = Field(default="chat", min_length=1)


class Count(BaseModel):
    count: int


class Deleted(BaseModel):
    deleted: int


class ToolCallIn(_In):
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: Any = None


class AttachmentIn(_In):
    id: str = Field(min_length=1)
    filename: str = Field(min_length=1)
    mime_type: str = "application/octet-stream"
    size_bytes: Count64 | None = None
    content_hash: str | None = None
    storage_uri: str | None = None
    created_at: Time | None = None


class DataIn(_In):
    id: str = Field(min_length=1)
    type: str = Field(min_length=1)
    title: str | None = None
    json_: Any = Field(default=None, alias="json")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class AssetIn(_In):
    asset_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    mime_type: str = "application/octet-stream"
    size_bytes: Count64 | None = None
    content_hash: str | None = None
    storage_uri: str | None = None
    created_at: Time | None = None


class EventIn(_In):
    """A message (give ``role`` and ``content``; ``type`` MESSAGE or left out) or an
    event of the app's own ``type`` with a ``payload``. Idempotent by ``id``."""

    type: str | None = None
    id: str | None = Field(default=None, min_length=1, max_length=255)
    branch: str | None = None
    metadata: JsonObject | None = None
    synthetic: bool = False
    created_at: Time | None = None
    payload: Any = None
    role: Literal["user", "assistant", "system", "tool"] | None = None
    content: str | None = None
    author: UserRefIn | None = None
    recipients: list[UserRefIn] = Field(default_factory=list)
    in_reply_to: str | None = None
    tool_calls: list[ToolCallIn] = Field(default_factory=list)
    tool_call_id: str | None = None
    attachments: list[AttachmentIn] = Field(default_factory=list)
    data: list[DataIn] = Field(default_factory=list)
    assets: list[AssetIn] = Field(default_factory=list)
    embedding: list[Finite] | None = None
    embedding_model: str | None = None


class BatchIn(_In):
    expected_version: int = Field(ge=0, le=INT64_MAX)
    events: list[EventIn] = Field(max_length=1000)


DEFAULT_EVENTS_PAGE = 200
MAX_EVENTS_PAGE = 1000


class EventQuery(BaseModel):
    """The query of ``GET .../events``: `EventFilter`'s options, and ``vectors``."""

    active_view: bool = False
    types: list[str] | None = None
    roles: list[str] | None = None
    exclude_synthetic: bool = False
    branch: str | None = None
    since: Time | None = None
    until: Time | None = None
    text: str | None = None
    after_seq: int | None = Field(default=None, ge=0, le=INT64_MAX)
    limit: int | None = Field(default=None, ge=0, le=MAX_EVENTS_PAGE)
    last: int | None = Field(default=None, ge=0, le=MAX_EVENTS_PAGE)
    vectors: bool = False


class Version(BaseModel):
    version: int


class ToolCallOut(BaseModel):
    id: str
    name: str
    arguments: Any


class EventOut(BaseModel):
    """An event of the log; the message fields are null for other events."""

    id: str
    session_id: str
    seq: int
    type: str
    created_at: datetime
    branch: str | None
    metadata: JsonObject
    payload: Any = None
    synthetic: bool
    role: str | None = None
    content: str | None = None
    author_id: str | None = None
    recipient_ids: list[str] | None = None
    in_reply_to: str | None = None
    tool_calls: list[ToolCallOut] | None = None
    tool_call_id: str | None = None
    attachments: list[JsonObject] | None = None
    data: list[JsonObject] | None = None
    assets: list[JsonObject] | None = None
    narration: str | None = None
    embedding: list[Finite] | None = None
    embedding_model: str | None = None
    stamp: str | None = None


class EventList(BaseModel):
    items: list[EventOut]
    version: int
    next_after_seq: int | None = Field(
        default=None, description="a full page: pass it as after_seq for the next one"
    )


class NarrationBody(_In):
    narration: str | None


class SearchIn(_In):
    query: str | None = None
    vector: list[Finite] | None = None
    mode: Literal["vector", "text", "hybrid"] | None = None
    owner_id: str | None = Field(default=None, description="admin keys only")
    session_id: str | None = None
    k: int = Field(default=10, ge=1, le=1000)
    roles: list[Literal["user", "assistant", "system", "tool"]] | None = None


class HitOut(BaseModel):
    message: EventOut
    score: float


class HitList(BaseModel):
    items: list[HitOut]


class StrategyIn(_In):
    kind: Literal["sliding_window", "turn_window", "token_budget"]
    keep_last: int | None = Field(default=None, ge=0)
    keep_turns: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)


class TriggerIn(_In):
    turn_count: int | None = Field(default=None, ge=1)
    token_count: int | None = Field(default=None, ge=1)


class CompactIn(_In):
    strategy: StrategyIn
    trigger: TriggerIn | None = None
    summary: str | None = Field(
        default=None,
        description="the summary to write; left out, the server's summarizer writes one",
    )


class CompactOut(BaseModel):
    compacted: bool
    boundary_id: str | None = None
    summary_ids: list[str] = Field(default_factory=list)
    kept_event_ids: list[str] = Field(default_factory=list)
    compacted_event_ids: list[str] = Field(default_factory=list)
    version: int


class JobOut(BaseModel):
    id: str
    kind: str
    state: Literal["running", "done", "failed"]
    done: int
    total: int | None
    messages: int | None = None
    index_recreated: bool | None = None
    error: str | None = None


class KeyOut(BaseModel):
    id: str
    owner_id: str | None
    admin: bool
    label: str | None
