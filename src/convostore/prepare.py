"""What the public methods hand to a backend's primitives: the arguments of the `Store`
API checked and normalised, with everything the store (not the database) assigns: ids,
stamps, times, JSON text. Nothing here does I/O; a wrong argument raises an error of
`convostore.errors` before anything reaches a backend.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

from convostore import _json
from convostore._codec import message_parts_json
from convostore._time import require_aware, utc_now

# The types handed to the backends live in `convostore.backends.spi`; named here too.
from convostore.backends.spi import AppendOutcome as AppendOutcome
from convostore.backends.spi import Listing as Listing
from convostore.backends.spi import NewSession as NewSession
from convostore.backends.spi import PreparedAppend as PreparedAppend
from convostore.backends.spi import PreparedEvent as PreparedEvent
from convostore.backends.spi import SessionChanges as SessionChanges
from convostore.cursors import decode_cursor
from convostore.errors import EventIdConflictError, InvalidArgumentError
from convostore.fields import parse_role, validate_branch, validate_event_type
from convostore.ids import new_id
from convostore.ids import new_stamp as new_stamp
from convostore.model import (
    COMPACTION,
    MESSAGE,
    Asset,
    Attachment,
    DataAttachment,
    Event,
    EventWrite,
    Message,
    MessageWrite,
    PageRequest,
    Role,
    Session,
    SessionFilter,
    SessionOrder,
    ToolCall,
    User,
    UserRef,
)

T = TypeVar("T")

MAX_PAGE_SIZE = 100
MAX_KIND_LENGTH = 255
"""The longest session kind, in characters, on every backend."""


def normalized_metadata(metadata: Mapping[str, Any] | None) -> tuple[dict[str, Any], str]:
    if metadata is None:
        return {}, "{}"
    if not isinstance(metadata, Mapping):
        raise InvalidArgumentError("metadata must be a mapping")
    value, text = _json.normalized(dict(metadata), "metadata")
    return value, text


INDEXABLE_KEY: Final = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""What a metadata key must look like to be indexed (`Store.find_sessions_by_metadata`)."""


def indexed_pairs(
    indexed_keys: frozenset[str], metadata: Mapping[str, Any]
) -> tuple[tuple[str, str], ...]:
    """The candidate (key, value) entries of the metadata index: one for every top-level
    key that could be indexed and whose value can be (as text every backend can hold).
    The write keeps those whose key the database indexes when it commits, since another
    store may have added or dropped keys since this one looked. A value this store knows
    to be indexed that cannot be is refused; another such value is left out (no lookup
    could name it)."""
    pairs: list[tuple[str, str]] = []
    for key in sorted(metadata):
        if not INDEXABLE_KEY.fullmatch(key):
            continue
        if key in indexed_keys:
            pairs.append(
                (key, _json.check_text(_json.index_value(metadata[key]), f"metadata {key!r}"))
            )
        elif (indexable := _json.indexable(metadata[key])) is not None:
            pairs.append((key, indexable))
    return tuple(pairs)


def prepare_session(
    indexed_keys: frozenset[str],
    owner: UserRef | None,
    session_id: str | None,
    title: str | None,
    kind: str,
    part_of: str | None,
    held_with: UserRef | None,
    metadata: Mapping[str, Any] | None,
    expires_at: datetime | None,
) -> NewSession:
    users: list[User] = []
    required: list[str] = []
    owner_id = None if owner is None else _collect_user(owner, "owner", users, required)
    held_with_id = (
        None if held_with is None else _collect_user(held_with, "held_with", users, required)
    )
    check_kind(kind)
    metadata_value, metadata_json = normalized_metadata(metadata)
    now = utc_now()
    session = Session(
        id=new_id() if session_id is None else check_id(session_id, "session_id"),
        owner_id=owner_id,
        title=check_title(title),
        kind=kind,
        part_of=None if part_of is None else check_id(part_of, "part_of"),
        held_with=held_with_id,
        created_at=now,
        last_activity_at=now,
        expires_at=optional_time(expires_at, "expires_at"),
        metadata=metadata_value,
        version=0,
        stamp=new_stamp(),
    )
    return NewSession(
        session=session,
        metadata_json=metadata_json,
        indexed_metadata=indexed_pairs(indexed_keys, metadata_value),
        users_to_insert=tuple(users),
        required_user_ids=tuple(dict.fromkeys(required)),
    )


def prepare_changes(indexed_keys: frozenset[str], session: Session) -> SessionChanges:
    """What `Store.update_session` writes for ``session``, guarded by its stamp."""
    if not isinstance(session, Session):
        raise InvalidArgumentError("update_session takes a Session read from the store")
    metadata, metadata_json = normalized_metadata(session.metadata)
    return SessionChanges(
        session_id=check_id(session.id, "session.id"),
        expected_stamp=session.stamp,
        title=check_title(session.title),
        metadata=metadata,
        metadata_json=metadata_json,
        indexed_metadata=indexed_pairs(indexed_keys, metadata),
        expires_at=optional_time(session.expires_at, "expires_at"),
        new_stamp=new_stamp(),
    )


def prepare_listing(
    owner: UserRef, page: PageRequest | None, filter: SessionFilter | None
) -> Listing:
    page = page or PageRequest()
    if not isinstance(page, PageRequest):
        raise InvalidArgumentError("page must be a PageRequest")
    if (
        not isinstance(page.size, int)
        or isinstance(page.size, bool)
        or not 1 <= page.size <= MAX_PAGE_SIZE
    ):
        raise InvalidArgumentError(
            f"page size must be between 1 and {MAX_PAGE_SIZE}, got {page.size!r}"
        )
    order: SessionOrder | None = None
    if page.order is not None:
        try:
            order = SessionOrder(page.order)
        except ValueError:
            raise InvalidArgumentError(f"unknown session order {page.order!r}") from None
    keyset = None if page.cursor is None else decode_cursor(page.cursor, order)
    if order is None:
        order = SessionOrder.CREATED if keyset is None else keyset.order
    return Listing(
        user_id_of(owner, "owner"), page.size, order, keyset, check_session_filter(filter)
    )


def prepare_append(
    session_id: str,
    writes: Sequence[MessageWrite | EventWrite],
    expected_version: int | None,
) -> PreparedAppend:
    session_id = check_id(session_id, "session_id")
    now = utc_now()
    users: list[User] = []
    required: list[str] = []
    events: list[PreparedEvent] = []
    activity_at: datetime | None = None
    message_count = 0
    started_by: str | None = None
    seen_ids: set[str] = set()
    for write in writes:
        if isinstance(write, MessageWrite):
            prepared = prepare_message(session_id, write, now, users, required)
            message = prepared.event
            assert isinstance(message, Message)
            if not message.synthetic:
                activity_at = now
                message_count += 1
            if started_by is None and message.author_id is not None:
                started_by = message.author_id
        elif isinstance(write, EventWrite):
            prepared = prepare_event(session_id, write, now)
        else:
            raise InvalidArgumentError(
                f"an append takes MessageWrite or EventWrite, not {type(write).__name__}"
            )
        if prepared.event.id in seen_ids:
            raise EventIdConflictError(f"event id {prepared.event.id!r} given twice")
        seen_ids.add(prepared.event.id)
        events.append(prepared)
    return PreparedAppend(
        session_id=session_id,
        events=tuple(events),
        expected_version=expected_version,
        users_to_insert=tuple(users),
        required_user_ids=tuple(dict.fromkeys(required)),
        activity_at=activity_at,
        new_message_count=message_count,
        started_by=started_by,
        new_stamp=new_stamp(),
    )


def prepare_message(
    session_id: str,
    write: MessageWrite,
    now: datetime,
    users: list[User],
    required: list[str],
) -> PreparedEvent:
    given_role = write.role
    role = given_role if type(given_role) is Role else parse_role(given_role)
    if not isinstance(write.content, str):
        raise InvalidArgumentError("message content must be a string")
    _json.check_text(write.content, "message content")
    author_id = (
        None if write.author is None else _collect_user(write.author, "author", users, required)
    )
    if isinstance(write.recipients, (str, User)):
        raise InvalidArgumentError("recipients must be a sequence of users or user ids")
    recipient_ids = _checked(
        write.recipients, "recipients", _collect_user, "recipient", users, required
    )
    created_at = optional_time(write.created_at, "created_at") or now
    metadata, metadata_json = normalized_metadata(write.metadata)
    tool_calls = _checked(write.tool_calls, "tool_calls", _check_tool_call)
    attachments = _checked(write.attachments, "attachments", _check_attachment, created_at)
    data = _checked(write.data, "data", _check_data)
    assets = _checked(write.assets, "assets", _check_asset, created_at)
    embedding = None if write.embedding is None else check_vector(write.embedding)
    if embedding is not None:
        model = write.embedding_model
        if not isinstance(model, str) or not model.strip():
            raise InvalidArgumentError("an embedding needs its embedding_model, a non-blank string")
        _json.check_text(model, "embedding_model")
    message = Message(
        id=_event_id(write.id),
        session_id=session_id,
        seq=0,
        created_at=created_at,
        branch=None if write.branch is None else validate_branch(write.branch),
        metadata=metadata,
        synthetic=bool(write.synthetic),
        role=role,
        content=write.content,
        author_id=author_id,
        recipient_ids=recipient_ids,
        in_reply_to=(
            None if write.in_reply_to is None else check_id(write.in_reply_to, "in_reply_to")
        ),
        tool_calls=tool_calls,
        tool_call_id=(
            None if write.tool_call_id is None else check_id(write.tool_call_id, "tool_call_id")
        ),
        attachments=attachments,
        data=data,
        assets=assets,
        embedding=embedding,
        embedding_model=write.embedding_model if embedding is not None else None,
        stamp=new_stamp(),
    )
    return PreparedEvent(
        event=message,
        metadata_json=metadata_json,
        payload_json=None,
        message_json=message_parts_json(message),
        stamp=message.stamp,
    )


def check_kind(kind: Any) -> str:
    """A session kind: non-blank text of at most `MAX_KIND_LENGTH` characters."""
    if not isinstance(kind, str) or not kind.strip() or len(kind) > MAX_KIND_LENGTH:
        raise InvalidArgumentError(
            f"kind must be a non-blank string of at most {MAX_KIND_LENGTH} characters"
        )
    return _json.check_text(kind, "kind")


def check_id(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 255:
        raise InvalidArgumentError(f"{name} must be a non-blank string of at most 255 characters")
    return _json.check_text(value, name)


def _checked(items: Any, name: str, check: Callable[..., T], *extra: Any) -> tuple[T, ...]:
    """A list-valued part of a message write, each item checked (``check(item,
    *extra)``): () for an empty one, without a pass over it; a string or a value that
    is not a sequence is refused."""
    if type(items) is not tuple:
        if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise InvalidArgumentError(f"{name} must be a sequence")
        items = tuple(items)
    return tuple(check(item, *extra) for item in items) if items else ()


def _event_id(value: str | None) -> str:
    return new_id() if value is None else check_id(value, "event id")


def check_title(title: Any) -> str | None:
    if title is not None and not isinstance(title, str):
        raise InvalidArgumentError("title must be a string or None")
    return None if title is None else _json.check_text(title, "title")


def optional_time(value: datetime | None, name: str) -> datetime | None:
    return None if value is None else require_aware(value, name)


def check_session_filter(filter: SessionFilter | None) -> SessionFilter:
    filter = filter or SessionFilter()
    if not isinstance(filter, SessionFilter):
        raise InvalidArgumentError("filter must be a SessionFilter")
    if filter.kind is not None and not isinstance(filter.kind, str):
        raise InvalidArgumentError("filter.kind must be a string or None")
    if filter.kind is not None:
        _json.check_text(filter.kind, "filter.kind")
    if not isinstance(filter.include_parts, bool):
        raise InvalidArgumentError("filter.include_parts must be a bool")
    return filter


def check_user(user: Any) -> User:
    if not isinstance(user, User):
        raise InvalidArgumentError(f"expected a User, not {type(user).__name__}")
    check_id(user.id, "user.id")
    if not isinstance(user.display_name, str):
        raise InvalidArgumentError("user.display_name must be a string")
    for field_name in ("display_name", "username", "email"):
        value = getattr(user, field_name)
        if value is not None:
            _json.check_text(str(value), f"user.{field_name}")
    if user.kind not in ("human", "agent"):
        raise InvalidArgumentError(f"user.kind must be 'human' or 'agent', not {user.kind!r}")
    metadata, _ = _json.normalized(dict(user.metadata), "user.metadata")
    checked: User = user
    if metadata != user.metadata:
        checked = User(user.id, user.display_name, user.username, user.email, user.kind, metadata)
    return checked


def user_id_of(ref: Any, name: str) -> str:
    if isinstance(ref, User):
        return check_id(ref.id, f"{name}.id")
    return check_id(ref, name)


def _collect_user(ref: Any, name: str, users: list[User], required: list[str]) -> str:
    """The id of a user reference; a `User` is queued for insert-if-absent, an id is
    queued for an existence check."""
    if isinstance(ref, User):
        user = check_user(ref)
        users.append(user)
        return user.id
    if isinstance(ref, str):
        required.append(check_id(ref, name))
        return ref
    raise InvalidArgumentError(f"{name} must be a User or a user id, not {type(ref).__name__}")


def _check_tool_call(call: Any) -> ToolCall:
    if not isinstance(call, ToolCall):
        raise InvalidArgumentError("tool_calls must hold ToolCall values")
    arguments, _ = _json.normalized(call.arguments, "tool call arguments")
    return ToolCall(check_id(call.id, "tool call id"), call.name, arguments)


def _check_attachment(attachment: Any, default_time: datetime) -> Attachment:
    if not isinstance(attachment, Attachment):
        raise InvalidArgumentError("attachments must hold Attachment values")
    return Attachment(
        id=check_id(attachment.id, "attachment id"),
        filename=attachment.filename,
        mime_type=attachment.mime_type,
        size_bytes=attachment.size_bytes,
        content_hash=attachment.content_hash,
        storage_uri=attachment.storage_uri,
        created_at=optional_time(attachment.created_at, "attachment created_at") or default_time,
    )


def _check_data(data: Any) -> DataAttachment:
    if not isinstance(data, DataAttachment):
        raise InvalidArgumentError("data must hold DataAttachment values")
    value, _ = _json.normalized(data.json, "data json")
    return DataAttachment(check_id(data.id, "data id"), data.type, data.title, value)


def _check_asset(asset: Any, default_time: datetime) -> Asset:
    if not isinstance(asset, Asset):
        raise InvalidArgumentError("assets must hold Asset values")
    return Asset(
        asset_id=check_id(asset.asset_id, "asset_id"),
        name=asset.name,
        mime_type=asset.mime_type,
        size_bytes=asset.size_bytes,
        content_hash=asset.content_hash,
        storage_uri=asset.storage_uri,
        created_at=optional_time(asset.created_at, "asset created_at") or default_time,
    )


def check_vector(vector: Sequence[float]) -> tuple[float, ...]:
    """The vector as every backend keeps it: single precision, every value finite (a
    value beyond single precision's range, such as 1e39, overflows to infinity and is
    refused as NaN and infinities are)."""
    if isinstance(vector, (str, bytes)):
        raise InvalidArgumentError("an embedding must be a sequence of floats, not text")
    try:
        values = array("f", vector)
    except (TypeError, ValueError, OverflowError) as error:
        raise InvalidArgumentError(f"an embedding must be a sequence of floats: {error}") from error
    if not values:
        raise InvalidArgumentError("an embedding must not be empty")
    checked = tuple(values.tolist())
    if not all(map(math.isfinite, checked)):
        raise InvalidArgumentError(
            "an embedding must hold finite single-precision values: NaN, infinities and "
            "values beyond ±3.4e38 are refused"
        )
    return checked


def check_index_width(append: PreparedAppend, model: str | None, width: int | None) -> None:
    """Refuse a message whose vector is tagged with the vector index's model but is not
    of the index's width: the index could never rank it."""
    if model is None or width is None:
        return
    for item in append.events:
        event = item.event
        if (
            isinstance(event, Message)
            and event.embedding is not None
            and event.embedding_model == model
            and len(event.embedding) != width
        ):
            raise InvalidArgumentError(
                f"message {event.id!r} has a vector of width {len(event.embedding)} tagged "
                f"with the vector index's model {model!r}, whose vectors have width {width}"
            )


def prepare_event(session_id: str, write: EventWrite, now: datetime) -> PreparedEvent:
    event_type = validate_event_type(write.type)
    if event_type == MESSAGE:
        raise InvalidArgumentError("append messages with MessageWrite, not EventWrite")
    payload, payload_json = _json.normalized(write.payload, "payload")
    if event_type == COMPACTION:
        _check_compaction_payload(payload)
    metadata: dict[str, Any] = {}
    metadata_json = "{}"
    if write.metadata is not None:
        if not isinstance(write.metadata, Mapping):
            raise InvalidArgumentError("metadata must be a mapping")
        metadata, metadata_json = _json.normalized(dict(write.metadata), "metadata")
    event = Event(
        id=_event_id(write.id),
        session_id=session_id,
        seq=0,
        type=event_type,
        created_at=optional_time(write.created_at, "created_at") or now,
        branch=None if write.branch is None else validate_branch(write.branch),
        metadata=metadata,
        payload=payload,
        synthetic=bool(write.synthetic),
    )
    return PreparedEvent(
        event=event,
        metadata_json=metadata_json,
        payload_json=payload_json,
        message_json=None,
        stamp=new_stamp(),
    )


def _check_compaction_payload(payload: Any) -> None:
    kept = payload.get("kept_event_ids") if isinstance(payload, dict) else None
    if not isinstance(kept, list) or not all(isinstance(i, str) for i in kept):
        raise InvalidArgumentError(
            'a COMPACTION payload must be {"kept_event_ids": [event ids...]}'
        )
    summaries = payload.get("summary_event_ids")
    if summaries is not None and (
        not isinstance(summaries, list) or not all(isinstance(i, str) for i in summaries)
    ):
        raise InvalidArgumentError("summary_event_ids must be a list of event ids")
