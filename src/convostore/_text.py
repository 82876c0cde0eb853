"""How text search splits text, on every backend: no I/O, no upper module."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["text_tokens"]

_WORD = re.compile(r"[^\W_]+")
_ASCII_WORD = re.compile(r"[a-z0-9]+")


def text_tokens(text: str) -> list[str]:
    """Lowercase words without diacritics: how text search splits text everywhere."""
    if text.isascii():
        # The same words, faster: ASCII has no diacritics, its case folding is lower(),
        # and its word characters other than "_" are letters and digits.
        return _ASCII_WORD.findall(text.lower())
    folded = unicodedata.normalize("NFKD", text.casefold())
    stripped = "".join(c for c in folded if not unicodedata.combining(c))
    return _WORD.findall(stripped)
