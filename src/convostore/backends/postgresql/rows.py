"""Values to statement parameters and rows back to values, in the column orders of
`convostore.backends.postgresql.statements`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from convostore._text import text_tokens
from convostore.backends import spi
from convostore.backends.sql.rows import RowReader, user_values
from convostore.model import Message, User

__all__ = [
    "event_from_row",
    "events_json",
    "search_terms",
    "session_from_row",
    "summary_from_row",
    "tsquery",
    "user_from_row",
    "user_values",
    "users_json",
    "vector_text",
]

# tsvector limits: a lexeme of at most 2046 bytes, 256 positions each, and less than
# 1 MiB of lexemes and positions together (2 bytes a position, 2 more for their count).
MAX_LEXEME_BYTES: Final = 2046
MAX_POSITIONS: Final = 255
POSITION_BYTES: Final = 2
MAX_TSVECTOR_BYTES: Final = (1 << 20) - 1


def _utc(value: datetime) -> datetime:
    # Connections read times in UTC already; this only guards a server that overrides it.
    return value if value.tzinfo is UTC else value.astimezone(UTC)


def vector_text(vector: Sequence[float]) -> str:
    """A vector as PostgreSQL array text; ``repr`` of a single-precision value parses
    back to that same value, so nothing is lost on the way."""
    return "{" + ",".join(map(repr, vector)) + "}"


def _lexeme(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def search_terms(content: str) -> tuple[str | None, int | None]:
    """The tsvector text of a message's words (`text_tokens`, as every backend splits
    them), each with as many positions as it occurs (capped at PostgreSQL's 255), and
    how many words there are. None for a message with no words.

    A tsvector holds at most a mebibyte: each word's bytes, padding to an even size,
    and two bytes per position plus two. A message whose words need more is indexed by
    its words in order of first appearance until that is full; the words after them
    (only in a message of several hundred thousand distinct words) are not found by
    text search, though the message is stored whole. A word over 2,046 bytes is never
    indexed."""
    tokens = text_tokens(content)
    if not tokens:
        return None, None
    entries: list[str] = []
    total = 0
    for word, count in Counter(tokens).items():
        size = len(word.encode())
        # Beyond these limits PostgreSQL refuses the whole value: such a word (or, in a
        # message of over a mebibyte of distinct words, the rest) is left unindexed.
        if size > MAX_LEXEME_BYTES:
            continue
        positions = min(count, MAX_POSITIONS)
        # At most one byte of padding, whatever order the server sorts the words in.
        total += size + 1 + POSITION_BYTES * (positions + 1)
        if total > MAX_TSVECTOR_BYTES:
            break
        entries.append(f"{_lexeme(word)}:{','.join(map(str, range(1, positions + 1)))}")
    if not entries:
        return None, None
    return " ".join(entries), len(tokens)


def tsquery(terms: Sequence[str]) -> str | None:
    """The tsquery text that needs every term, each quoted as one lexeme, so nothing a
    user typed is read as query syntax. None when a term is longer than any indexed
    word can be (nothing can match it)."""
    if any(len(term.encode()) > MAX_LEXEME_BYTES for term in terms):
        return None
    return " & ".join(_lexeme(term) for term in terms)


def events_json(events: Sequence[spi.PreparedEvent]) -> str:
    """The JSON document `statements.APPEND` reads the events from, in order: one object
    per event, keyed by column (`statements.APPENDED_FIELDS`). JSON columns travel as
    their text, so they are stored exactly as encoded; a vector as array text."""
    rows: list[dict[str, Any]] = []
    for prepared in events:
        event = prepared.event
        row: dict[str, Any] = {
            "id": event.id,
            "type": event.type,
            "created_at": event.created_at.isoformat(),
            "branch": event.branch,
            "metadata": prepared.metadata_json,
            "payload": prepared.payload_json,
            "synthetic": event.synthetic,
        }
        parts = prepared.message_json
        if isinstance(event, Message) and parts is not None:
            terms, length = search_terms(event.content)
            row.update(
                zip(spi.MESSAGE_COLUMNS, spi.message_values(event, parts), strict=True),
                narration=event.narration,
                embedding=None if event.embedding is None else vector_text(event.embedding),
                embedding_model=event.embedding_model,
                stamp=event.stamp,
                search_terms=terms,
                search_length=length,
            )
        rows.append(row)
    return _encode(rows)


def users_json(users: Iterable[User]) -> str:
    """The JSON document of the users a statement inserts if absent."""
    return _encode(
        [dict(zip(_USER_KEYS, values, strict=True)) for values in map(user_values, users)]
    )


_USER_KEYS: Final = ("id", "display_name", "username", "email", "kind", "metadata")
# The document's strings are checked Unicode already; keys and values need no sorting.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _vector(value: Sequence[float] | None) -> tuple[float, ...] | None:
    return None if value is None else tuple(value)


READER = RowReader(time_of=_utc, vector_of=_vector)
user_from_row = READER.user
session_from_row = READER.session
summary_from_row = READER.summary
event_from_row = READER.event
