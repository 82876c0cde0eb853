"""The messages a conversation accepts: one value per role."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from convostore.errors import InvalidArgumentError
from convostore.model import Asset, Attachment, DataAttachment, Role, ToolCall

__all__ = [
    "ROLES",
    "AssistantMessage",
    "ConversationMessage",
    "SystemMessage",
    "ToolMessage",
    "UserMessage",
]


def _tuple_of(owner: object, name: str, kind: type) -> None:
    """Freeze a sequence field of a frozen dataclass as a tuple of ``kind``."""
    value = getattr(owner, name)
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{name} must be a sequence of {kind.__name__}")
    items = tuple(value)
    if not all(isinstance(item, kind) for item in items):
        raise InvalidArgumentError(f"{name} must hold {kind.__name__} values")
    object.__setattr__(owner, name, items)


def _check_content(content: object) -> None:
    if not isinstance(content, str):
        raise InvalidArgumentError(f"content must be a string, not {type(content).__name__}")


@dataclass(frozen=True, slots=True)
class UserMessage:
    """What the user says, with files and structured data."""

    content: str
    attachments: Sequence[Attachment] = ()
    data: Sequence[DataAttachment] = ()

    def __post_init__(self) -> None:
        _check_content(self.content)
        _tuple_of(self, "attachments", Attachment)
        _tuple_of(self, "data", DataAttachment)


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """What the agent says, with the tools it calls and the assets it produced."""

    content: str
    tool_calls: Sequence[ToolCall] = ()
    assets: Sequence[Asset] = ()

    def __post_init__(self) -> None:
        _check_content(self.content)
        _tuple_of(self, "tool_calls", ToolCall)
        _tuple_of(self, "assets", Asset)


@dataclass(frozen=True, slots=True)
class SystemMessage:
    """An instruction from the system; it has no author."""

    content: str

    def __post_init__(self) -> None:
        _check_content(self.content)


@dataclass(frozen=True, slots=True)
class ToolMessage:
    """The result of the tool call ``tool_call_id``; it has no author."""

    content: str
    tool_call_id: str

    def __post_init__(self) -> None:
        _check_content(self.content)
        if not isinstance(self.tool_call_id, str) or not self.tool_call_id.strip():
            raise InvalidArgumentError("tool_call_id must be a non-blank string")


ConversationMessage: TypeAlias = UserMessage | AssistantMessage | SystemMessage | ToolMessage
"""A message a conversation accepts."""

ROLES: dict[type, Role] = {
    UserMessage: Role.USER,
    AssistantMessage: Role.ASSISTANT,
    SystemMessage: Role.SYSTEM,
    ToolMessage: Role.TOOL,
}
