"""How SQL and graph backends write the list-valued parts of a message as JSON text,
and read them back. Times inside are integer microseconds since the epoch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from convostore import _json
from convostore._time import from_micros, to_micros
from convostore.model import Asset, Attachment, DataAttachment, Message, ToolCall

__all__ = [
    "MessageParts",
    "assets_from_json",
    "attachments_from_json",
    "data_from_json",
    "message_parts_json",
    "recipients_from_json",
    "tool_calls_from_json",
]


@dataclass(frozen=True, slots=True)
class MessageParts:
    """The JSON text of a message's list-valued parts."""

    recipient_ids: str
    tool_calls: str
    attachments: str
    data: str
    assets: str


_EMPTY = "[]"


def message_parts_json(message: Message) -> MessageParts:
    return MessageParts(
        recipient_ids=_json.dumps(list(message.recipient_ids), "recipients")
        if message.recipient_ids
        else _EMPTY,
        tool_calls=_json.dumps(
            [[c.id, c.name, c.arguments] for c in message.tool_calls], "tool_calls"
        )
        if message.tool_calls
        else _EMPTY,
        attachments=_json.dumps(
            [
                [
                    a.id,
                    a.filename,
                    a.mime_type,
                    a.size_bytes,
                    a.content_hash,
                    a.storage_uri,
                    None if a.created_at is None else to_micros(a.created_at),
                ]
                for a in message.attachments
            ],
            "attachments",
        )
        if message.attachments
        else _EMPTY,
        data=_json.dumps([[d.id, d.type, d.title, d.json] for d in message.data], "data")
        if message.data
        else _EMPTY,
        assets=_json.dumps(
            [
                [
                    a.asset_id,
                    a.name,
                    a.mime_type,
                    a.size_bytes,
                    a.content_hash,
                    a.storage_uri,
                    None if a.created_at is None else to_micros(a.created_at),
                ]
                for a in message.assets
            ],
            "assets",
        )
        if message.assets
        else _EMPTY,
    )


def _rows(text: str | None) -> list[Any]:
    if not text or text == _EMPTY:
        return []
    value = _json.loads(text)
    return value if isinstance(value, list) else []


def _time(value: Any) -> Any:
    return None if value is None else from_micros(int(value))


def recipients_from_json(text: str | None) -> tuple[str, ...]:
    return tuple(str(r) for r in _rows(text))


def tool_calls_from_json(text: str | None) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(r[0], r[1], r[2]) for r in _rows(text))


def attachments_from_json(text: str | None) -> tuple[Attachment, ...]:
    return tuple(Attachment(r[0], r[1], r[2], r[3], r[4], r[5], _time(r[6])) for r in _rows(text))


def data_from_json(text: str | None) -> tuple[DataAttachment, ...]:
    return tuple(DataAttachment(r[0], r[1], r[2], r[3]) for r in _rows(text))


def assets_from_json(text: str | None) -> tuple[Asset, ...]:
    return tuple(Asset(r[0], r[1], r[2], r[3], r[4], r[5], _time(r[6])) for r in _rows(text))
