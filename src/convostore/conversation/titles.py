"""Titles: the interim title a first user message gives, and what generates one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

from convostore.model import Message

__all__ = ["INTERIM_TITLE_LENGTH", "TitleGenerator", "interim_title"]

INTERIM_TITLE_LENGTH = 60
"""The longest interim title, "..." included."""

TitleGenerator: TypeAlias = Callable[[Message], "str | Awaitable[str]"]
"""Makes a title from a message, sync or async."""


def interim_title(content: str) -> str | None:
    """The title a first user message gives: its words, whitespace collapsed, cut at a
    word boundary to at most `INTERIM_TITLE_LENGTH` characters ending with "...".
    None for blank content."""
    text = " ".join(content.split())
    if not text:
        return None
    if len(text) <= INTERIM_TITLE_LENGTH:
        return text
    cut = text[: INTERIM_TITLE_LENGTH - 3]
    space = cut.rfind(" ")
    if space >= INTERIM_TITLE_LENGTH // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "..."
