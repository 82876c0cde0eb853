"""The rules of an event's fields, written once for the writes that store them and the
filters that name them: roles, event types, branches."""

from __future__ import annotations

import re
from typing import Any, Final

from convostore.errors import InvalidArgumentError
from convostore.model import Role

__all__ = ["is_event_type", "parse_role", "validate_branch", "validate_event_type"]

_EVENT_TYPE: Final = re.compile(r"[A-Z][A-Z0-9_.]{0,63}")


def is_event_type(value: Any) -> bool:
    """Whether ``value`` is an event type: ``[A-Z][A-Z0-9_.]{0,63}``."""
    return isinstance(value, str) and _EVENT_TYPE.fullmatch(value) is not None


def parse_role(value: Role | str) -> Role:
    try:
        return Role(value)
    except ValueError:
        raise InvalidArgumentError(
            f"invalid role {value!r}; expected one of {', '.join(r.value for r in Role)}"
        ) from None


def validate_event_type(value: str) -> str:
    if not is_event_type(value):
        raise InvalidArgumentError(
            f"invalid event type {value!r}: it must match [A-Z][A-Z0-9_.]{{0,63}}"
        )
    return value


def validate_branch(branch: str) -> str:
    if not isinstance(branch, str) or not branch or any(not s for s in branch.split(".")):
        raise InvalidArgumentError(
            f"invalid branch {branch!r}: a dot path of non-empty names, such as 'a.b'"
        )
    return branch
