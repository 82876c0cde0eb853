"""Values to statement parameters beyond what `convostore.backends.sql.values` gives.

MySQL stores every field as SQLite does (times as integer microseconds, JSON as text,
vectors as little-endian float32 blobs), so `convostore.backends.sql.values` reads and
writes both; this module adds the columns only MySQL has: the folded content the text
filter searches, the words of the FULLTEXT index, and ``is_part``.
"""

from __future__ import annotations

from typing import Any, Final

from convostore.backends.mysql.schema import TOKEN_PREFIX
from convostore.backends.sql.values import MICROS_READER, event_values, session_values
from convostore.embedding import text_tokens
from convostore.model import Message
from convostore.prepare import NewSession, PreparedEvent

__all__ = [
    "MAX_TOKEN_CHARACTERS",
    "event_from_row",
    "event_row",
    "fulltext_query",
    "new_session_row",
    "session_from_row",
]

event_from_row = MICROS_READER.event
session_from_row = MICROS_READER.session

# InnoDB's default innodb_ft_max_token_size: a longer word is not indexed, so it is
# left out here, and a query for it finds nothing (as on PostgreSQL).
MAX_TOKEN_CHARACTERS: Final = 84


def _indexed(word: str) -> str | None:
    token = TOKEN_PREFIX + word
    return token if len(token) <= MAX_TOKEN_CHARACTERS else None


def search_tokens(content: str) -> str | None:
    """The words of a message as the FULLTEXT index reads them: `text_tokens`, each
    with `TOKEN_PREFIX`, separated by spaces. None for a message with no words."""
    tokens = [token for word in text_tokens(content) if (token := _indexed(word)) is not None]
    return " ".join(tokens) if tokens else None


def fulltext_query(terms: tuple[str, ...]) -> str | None:
    """The boolean-mode query that needs every term. Terms are `text_tokens` words
    (letters and digits only), so no query operator can come from what a user typed.
    None when a term is too long to be indexed (nothing can match it)."""
    tokens = [_indexed(term) for term in terms]
    if any(token is None for token in tokens):
        return None
    return " ".join(f"+{token}" for token in tokens if token is not None)


def event_row(prepared: PreparedEvent, seq: int) -> tuple[Any, ...]:
    """An event's parameters in ``EVENT_INSERT_FIELDS`` order."""
    event = prepared.event
    if isinstance(event, Message):
        extra: tuple[Any, ...] = (event.content.lower(), search_tokens(event.content))
    else:
        extra = (None, None)
    return event_values(prepared, seq) + extra


def new_session_row(new: NewSession) -> tuple[Any, ...]:
    """A new session's parameters in ``SESSION_INSERT_FIELDS`` order."""
    return (*session_values(new), 1 if new.session.part_of is not None else 0)
