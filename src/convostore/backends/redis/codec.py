"""How the Redis backend's values are stored and read back: a session as hash fields
(`functions.SESSION_FIELDS`), an event as one JSON array of its fixed columns plus
fields for what can change (narration, stamp, vector, model), a user as the JSON array
of its columns. Times are integer microseconds; a vector is little-endian float32."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from convostore import _json
from convostore._text import text_tokens
from convostore._time import from_micros, to_micros
from convostore.backends import spi
from convostore.backends.sql.rows import RowReader, user_values
from convostore.backends.sql.values import MICROS_READER, event_values, vector_blob
from convostore.model import Event, Message, Role, Session, User

__all__ = [
    "ROLE_LETTERS",
    "event_arguments",
    "read_event",
    "read_session",
    "read_user",
    "role_letters",
    "session_document",
    "text",
    "user_document",
]

ROLE_LETTERS: Final = {Role.USER: "u", Role.ASSISTANT: "a", Role.SYSTEM: "s", Role.TOOL: "t"}
ROLES_BY_LETTER: Final = {letter: role for role, letter in ROLE_LETTERS.items()}
_ALL_LETTERS: Final = "uast"
MAX_INDEXED_WORDS: Final = 65_536
"""The distinct words of one message the text index holds: its first ones (a message of
more is still stored and read whole; each word indexed is one sorted-set entry)."""
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
READER: Final = RowReader(time_of=from_micros, vector_of=MICROS_READER.vector_of)


def text(value: Any) -> str | None:
    """A reply's bytes as text (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def role_letters(roles: Sequence[Role] | None) -> str:
    return _ALL_LETTERS if roles is None else "".join(ROLE_LETTERS[role] for role in roles)


def user_document(user: User) -> str:
    return _encode(list(user_values(user)))


def read_user(document: bytes | None) -> User | None:
    if document is None:
        return None
    return READER.user(json.loads(document))


def session_document(new: spi.NewSession) -> dict[str, Any]:
    """The session's fields for ``insert_session`` (times as decimal text: Lua's numbers
    would round them)."""
    return {
        **dict(zip(_SESSION_FIELDS, spi.session_values(new, _micros_text), strict=True)),
        "stamp": new.session.stamp,
        "cand": _encode([list(pair) for pair in new.indexed_metadata]),
    }


# The names of `spi.SESSION_COLUMNS` among a session's fields (`functions.SESSION_FIELDS`).
_SESSION_FIELDS: Final = (
    "id", "owner", "title", "kind", "part_of", "held_with", "created", "activity", "expires",
    "meta",
)  # fmt: skip


def _micros_text(time: datetime) -> str:
    return str(to_micros(time))


def read_session(values: Sequence[Any]) -> Session:
    """A session from its `functions.SESSION_FIELDS` values."""
    (
        session_id, owner, title, kind, part_of, held_with, created, activity, expires,
        metadata, version, stamp, *_,
    ) = values  # fmt: skip
    return Session(
        id=session_id.decode(),
        owner_id=text(owner),
        title=text(title),
        kind=kind.decode(),
        part_of=text(part_of),
        held_with=text(held_with),
        created_at=from_micros(int(created)),
        last_activity_at=from_micros(int(activity)),
        expires_at=None if expires is None else from_micros(int(expires)),
        metadata=_json.loads(metadata.decode()),
        version=int(version),
        stamp=stamp.decode(),
    )


def event_arguments(prepared: spi.PreparedEvent) -> tuple[str, str, bytes]:
    """What ``append`` takes for one event: its small JSON description (see
    `functions`), its fixed columns as JSON, its vector ('' none)."""
    event = prepared.event
    columns = event_values(prepared, 0)
    fixed = _encode(list(columns[2:19]))
    if not isinstance(event, Message):
        return _encode([event.id, event.type, "", "", "", "", [], "0", ""]), fixed, b""
    tokens = text_tokens(event.content)
    counts = Counter(tokens)
    norm = math.sqrt(len(tokens)) if tokens else 1.0
    indexed = list(itertools.islice(counts.items(), MAX_INDEXED_WORDS))
    scores = [[token, repr(count / norm)] for token, count in indexed]
    description = [
        event.id,
        event.type,
        ROLE_LETTERS[event.role],
        event.author_id or "",
        event.embedding_model or "",
        " ".join(token for token, _ in indexed),
        scores,
        "1" if event.content.strip() else "0",
        event.stamp,
    ]
    return _encode(description), fixed, vector_blob(event.embedding) or b""


def read_event(session_id: str, stored: Sequence[Any]) -> Event:
    """An event from ``[seq, fixed columns, narration, stamp, vector, model]``."""
    seq, fixed, narration, stamp, vector, model = stored
    columns = json.loads(fixed)
    row = (
        session_id, int(seq), *columns, text(narration), vector, text(model), text(stamp),
    )  # fmt: skip
    return READER.event(row)


def micros(value: Any) -> str:
    return str(to_micros(value))
