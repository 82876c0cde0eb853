"""Users, sessions and events as plain JSON objects: the HTTP API's bodies and the
lines of a JSONL export.

Times are ISO 8601 in UTC with microseconds. Reading a record checks its shape and
raises `InvalidArgumentError` naming the field at fault; the store checks the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from convostore._time import require_aware
from convostore.errors import InvalidArgumentError
from convostore.model import (
    MESSAGE,
    Asset,
    Attachment,
    DataAttachment,
    Event,
    EventWrite,
    Message,
    MessageWrite,
    Session,
    ToolCall,
    User,
    UserRef,
)

__all__ = [
    "event_to_json",
    "session_to_json",
    "time_from_json",
    "time_to_json",
    "user_from_json",
    "user_to_json",
    "write_from_json",
]

Record = dict[str, Any]


def time_to_json(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat(timespec="microseconds")


def time_from_json(value: Any, name: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return require_aware(value, name)
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be an ISO 8601 time with a time zone")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidArgumentError(f"{name} is not an ISO 8601 time: {value!r}") from None
    return require_aware(parsed, name)


def user_to_json(user: User) -> Record:
    return {
        "id": user.id,
        "display_name": user.display_name,
        "username": user.username,
        "email": user.email,
        "kind": user.kind,
        "metadata": dict(user.metadata),
    }


def user_from_json(record: Mapping[str, Any]) -> User:
    _require_mapping(record, "user")
    kind = record.get("kind", "human")
    if kind not in ("human", "agent"):
        raise InvalidArgumentError("a user's kind is 'human' or 'agent'")
    return User(
        id=_text(record, "id", "user"),
        display_name=_text(record, "display_name", "user"),
        username=_optional_text(record, "username", "user"),
        email=_optional_text(record, "email", "user"),
        kind=kind,
        metadata=_mapping(record.get("metadata"), "user.metadata"),
    )


def session_to_json(session: Session) -> Record:
    return {
        "id": session.id,
        "owner_id": session.owner_id,
        "title": session.title,
        "kind": session.kind,
        "part_of": session.part_of,
        "held_with": session.held_with,
        "created_at": time_to_json(session.created_at),
        "last_activity_at": time_to_json(session.last_activity_at),
        "expires_at": time_to_json(session.expires_at),
        "metadata": dict(session.metadata),
        "version": session.version,
        "stamp": session.stamp,
    }


def event_to_json(event: Event, *, vectors: bool = True) -> Record:
    record: Record = {
        "id": event.id,
        "session_id": event.session_id,
        "seq": event.seq,
        "type": event.type,
        "created_at": time_to_json(event.created_at),
        "branch": event.branch,
        "metadata": dict(event.metadata),
        "payload": event.payload,
        "synthetic": event.synthetic,
    }
    if not isinstance(event, Message):
        return record
    record.update(
        role=event.role.value,
        content=event.content,
        author_id=event.author_id,
        recipient_ids=list(event.recipient_ids),
        in_reply_to=event.in_reply_to,
        tool_calls=[
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in event.tool_calls
        ],
        tool_call_id=event.tool_call_id,
        attachments=[_file_to_json(a, "id") for a in event.attachments],
        data=[{"id": d.id, "type": d.type, "title": d.title, "json": d.json} for d in event.data],
        assets=[_file_to_json(a, "asset_id") for a in event.assets],
        narration=event.narration,
        embedding=list(event.embedding) if vectors and event.embedding is not None else None,
        embedding_model=event.embedding_model if vectors else None,
        stamp=event.stamp,
    )
    return record


def _file_to_json(value: Attachment | Asset, id_field: str) -> Record:
    record: Record = {
        id_field: value.id if isinstance(value, Attachment) else value.asset_id,
        "mime_type": value.mime_type,
        "size_bytes": value.size_bytes,
        "content_hash": value.content_hash,
        "storage_uri": value.storage_uri,
        "created_at": time_to_json(value.created_at),
    }
    if isinstance(value, Attachment):
        record["filename"] = value.filename
    else:
        record["name"] = value.name
    return record


def write_from_json(record: Mapping[str, Any]) -> MessageWrite | EventWrite:
    """A message write when ``type`` is MESSAGE (the default when ``role`` is given),
    else an event write. ``author``/``recipients`` take user ids or user objects;
    ``author_id``/``recipient_ids`` (as events read back) are accepted too, so an
    exported event is also a write."""
    _require_mapping(record, "event")
    event_type = record.get("type")
    if event_type is None:
        event_type = MESSAGE if "role" in record else None
    if not isinstance(event_type, str):
        raise InvalidArgumentError("an event needs a type (or a role, for a message)")
    created_at = time_from_json(record.get("created_at"), "created_at")
    event_id = _optional_text(record, "id", "event")
    branch = _optional_text(record, "branch", "event")
    metadata = record.get("metadata")
    if metadata is not None:
        metadata = _mapping(metadata, "metadata")
    synthetic = record.get("synthetic", False)
    if not isinstance(synthetic, bool):
        raise InvalidArgumentError("synthetic must be true or false")
    if event_type != MESSAGE:
        return EventWrite(
            event_type,
            record.get("payload"),
            id=event_id,
            branch=branch,
            metadata=metadata,
            synthetic=synthetic,
            created_at=created_at,
        )
    embedding = record.get("embedding")
    if embedding is not None and not isinstance(embedding, list):
        raise InvalidArgumentError("embedding must be a list of numbers")
    return MessageWrite(
        role=_text(record, "role", "message"),
        content=_string(record.get("content"), "content"),
        author=_user_ref(record.get("author", record.get("author_id")), "author"),
        recipients=[
            _required_ref(r, "recipients")
            for r in _list(record.get("recipients", record.get("recipient_ids")), "recipients")
        ],
        in_reply_to=_optional_text(record, "in_reply_to", "message"),
        attachments=[_attachment(a) for a in _list(record.get("attachments"), "attachments")],
        data=[_data(d) for d in _list(record.get("data"), "data")],
        assets=[_asset(a) for a in _list(record.get("assets"), "assets")],
        tool_calls=[_tool_call(c) for c in _list(record.get("tool_calls"), "tool_calls")],
        tool_call_id=_optional_text(record, "tool_call_id", "message"),
        branch=branch,
        metadata=metadata,
        id=event_id,
        created_at=created_at,
        embedding=embedding,
        embedding_model=_optional_text(record, "embedding_model", "message"),
        synthetic=synthetic,
    )


def _user_ref(value: Any, name: str) -> UserRef | None:
    if value is None:
        return None
    return _required_ref(value, name)


def _required_ref(value: Any, name: str) -> UserRef:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return user_from_json(value)
    raise InvalidArgumentError(f"{name} takes user ids or user objects")


def _tool_call(value: Any) -> ToolCall:
    _require_mapping(value, "tool call")
    return ToolCall(
        _text(value, "id", "tool call"), _text(value, "name", "tool call"), value.get("arguments")
    )


def _attachment(value: Any) -> Attachment:
    _require_mapping(value, "attachment")
    return Attachment(
        id=_text(value, "id", "attachment"),
        filename=_text(value, "filename", "attachment"),
        **_file_fields(value, "attachment"),
    )


def _asset(value: Any) -> Asset:
    _require_mapping(value, "asset")
    return Asset(
        asset_id=_text(value, "asset_id", "asset"),
        name=_text(value, "name", "asset"),
        **_file_fields(value, "asset"),
    )


def _file_fields(value: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """What an attachment and an asset both say of their file: its type, size, hash,
    where it is stored and when it was made."""
    return {
        "mime_type": value.get("mime_type") or "application/octet-stream",
        "size_bytes": _optional_int(value.get("size_bytes"), "size_bytes"),
        "content_hash": _optional_text(value, "content_hash", kind),
        "storage_uri": _optional_text(value, "storage_uri", kind),
        "created_at": time_from_json(value.get("created_at"), f"{kind}.created_at"),
    }


def _data(value: Any) -> DataAttachment:
    _require_mapping(value, "data")
    return DataAttachment(
        id=_text(value, "id", "data"),
        type=_text(value, "type", "data"),
        title=_optional_text(value, "title", "data"),
        json=value.get("json"),
    )


def _require_mapping(value: Any, name: str) -> None:
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{name} must be a JSON object")


def _mapping(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{name} must be a JSON object")
    return dict(value)


def _list(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidArgumentError(f"{name} must be a list")
    return value


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string")
    return value


def _text(record: Mapping[str, Any], key: str, owner: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{owner}.{key} must be a non-empty string")
    return value


def _optional_text(record: Mapping[str, Any], key: str, owner: str) -> str | None:
    value = record.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidArgumentError(f"{owner}.{key} must be a string or null")
    return value


def _optional_int(value: Any, name: str) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise InvalidArgumentError(f"{name} must be an integer or null")
    return value
