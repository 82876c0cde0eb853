"""Values to query parameters, and rows back to values, for every graph store.

Parameters hold only what every Cypher server takes: strings, integers, floats,
booleans, null, lists and maps of them. Times are integers of microseconds since the
epoch; JSON is text; a vector is a list of floats (the dialect turns it into a stored
vector).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from convostore import _json
from convostore._text import text_tokens
from convostore._time import from_micros, to_micros
from convostore.backends import spi
from convostore.backends.cypher.queries import SCHEMA_LABEL_KEY
from convostore.backends.sql.rows import RowReader
from convostore.errors import InvalidArgumentError
from convostore.filters import is_turn_start
from convostore.model import COMPACTION, Asset, Attachment, Message, User

__all__ = [
    "READER",
    "append_parameters",
    "metadata_entries",
    "metadata_entry",
    "session_parameters",
    "unconfirmed_users",
    "update_parameters",
    "user_parameters",
    "users_parameter",
]


def _vector(value: Any) -> tuple[float, ...] | None:
    return None if value is None else tuple(float(v) for v in value)


READER: Final = RowReader(time_of=from_micros, vector_of=_vector)


def user_parameters(user: User) -> dict[str, Any]:
    return {
        "id": user.id,
        "display_name": user.display_name,
        "username": user.username,
        "email": user.email,
        "kind": user.kind,
        "metadata": _json.dumps(dict(user.metadata), "user.metadata"),
    }


def users_parameter(users: Sequence[User]) -> list[dict[str, Any]]:
    return [user_parameters(user) for user in users]


def unconfirmed_users(users: tuple[User, ...], required: tuple[str, ...]) -> list[str]:
    """The required ids not given as a `User` in the same call: those must be stored."""
    given = {user.id for user in users}
    return [user_id for user_id in required if user_id not in given]


def metadata_entry(name: str, value: str) -> str:
    """A session's entry in the metadata index: the key and a digest of its value. A
    digest, since a range index holds strings of a few kilobytes at most; a lookup
    compares the values themselves afterwards."""
    return f"{name}={hashlib.sha256(value.encode()).hexdigest()}"


def metadata_entries(pairs: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    """A write's candidate entries, each with its key's name: the write keeps those of
    the keys the graph indexes when it runs."""
    return [{"name": name, "entry": metadata_entry(name, value)} for name, value in pairs]


def session_parameters(new: spi.NewSession, *, owner_from_parent: bool) -> dict[str, Any]:
    return {
        **dict(zip(spi.SESSION_COLUMNS, spi.session_values(new, to_micros), strict=True)),
        "owner_from_parent": owner_from_parent,
        "stamp": new.session.stamp,
        "entries": metadata_entries(new.indexed_metadata),
        "schema_key": SCHEMA_LABEL_KEY,
        "required_users": unconfirmed_users(new.users_to_insert, new.required_user_ids),
        "users": users_parameter(new.users_to_insert),
    }


def update_parameters(changes: spi.SessionChanges) -> dict[str, Any]:
    return {
        "id": changes.session_id,
        "expected_stamp": changes.expected_stamp,
        "title": changes.title,
        "metadata": changes.metadata_json,
        "expires_at": None if changes.expires_at is None else to_micros(changes.expires_at),
        "new_stamp": changes.new_stamp,
        "entries": metadata_entries(changes.indexed_metadata),
        "schema_key": SCHEMA_LABEL_KEY,
    }


def _finite(vector: tuple[float, ...]) -> list[float]:
    if not all(math.isfinite(value) for value in vector):
        raise InvalidArgumentError("an embedding must hold finite numbers only")
    return list(vector)


def _event(prepared: spi.PreparedEvent, offset: int, turn_offset: int | None) -> dict[str, Any]:
    event = prepared.event
    kept = None
    if event.type == COMPACTION and isinstance(event.payload, dict):
        kept = [str(i) for i in event.payload.get("kept_event_ids", ())]
    values: dict[str, Any] = {
        "id": event.id,
        "offset": offset,
        "turn_offset": turn_offset,
        "type": event.type,
        "created_at": to_micros(event.created_at),
        "branch": event.branch,
        "metadata": prepared.metadata_json,
        "payload": prepared.payload_json,
        "synthetic": event.synthetic,
        "kept_event_ids": kept,
        "recipients": [],
        "attachment_nodes": [],
        "data_nodes": [],
        "asset_nodes": [],
    }
    if not isinstance(event, Message):
        return values
    parts = prepared.message_json
    assert parts is not None
    tokens = text_tokens(event.content)
    counts = Counter(tokens)
    folded = event.content.lower()
    embedding = None if event.embedding is None else _finite(event.embedding)
    values.update(
        zip(spi.MESSAGE_COLUMNS, spi.message_values(event, parts), strict=True),
        # ASCII text is folded by the database as Python folds it; other text is kept
        # folded where folding changes it (Python maps "İ" and a final "Σ" its own way).
        content_folded=None if folded == event.content or event.content.isascii() else folded,
        recipients=list(event.recipient_ids),
        embedding=embedding,
        embedding_model=event.embedding_model if embedding is not None else None,
        embedding_width=None if embedding is None else len(embedding),
        stamp=event.stamp,
        # Each word once, with how often it occurs: the index is as large as the
        # vocabulary, not the text, and a score still counts every occurrence.
        search_text=" ".join(counts),
        search_counts=list(counts.values()),
        search_length=len(tokens),
        blank=not event.content.strip(),
        attachment_nodes=[
            {"position": position, "id": a.id, "filename": a.filename, **_file(a)}
            for position, a in enumerate(event.attachments)
        ],
        data_nodes=[
            {
                "position": position,
                "id": d.id,
                "type": d.type,
                "title": d.title,
                "json": _json_text(d.json),
            }
            for position, d in enumerate(event.data)
        ],
        asset_nodes=[
            {"position": position, "asset_id": a.asset_id, "name": a.name, **_file(a)}
            for position, a in enumerate(event.assets)
        ],
    )
    return values


def _file(item: Attachment | Asset) -> dict[str, Any]:
    """What an attachment's node and an asset's both hold of their file."""
    return {
        "mime_type": item.mime_type,
        "size_bytes": item.size_bytes,
        "content_hash": item.content_hash,
        "storage_uri": item.storage_uri,
        "created_at": None if item.created_at is None else to_micros(item.created_at),
    }


def _json_text(value: Any) -> str:
    return _json.dumps(value, "data json")


def append_parameters(prepared: spi.PreparedAppend) -> dict[str, Any]:
    """The parameters of `CypherQueries.append` for one append (or batch)."""
    events: list[dict[str, Any]] = []
    turn: int | None = None
    authors: list[str] = []
    for offset, item in enumerate(prepared.events, start=1):
        if is_turn_start(item.event):
            turn = offset
        events.append(_event(item, offset, turn))
        author = getattr(item.event, "author_id", None)
        if author is not None and author not in authors:
            authors.append(author)
    return {
        "session_id": prepared.session_id,
        "required_users": unconfirmed_users(prepared.users_to_insert, prepared.required_user_ids),
        "event_ids": [item.event.id for item in prepared.events],
        "expected_version": prepared.expected_version,
        "count": len(prepared.events),
        "stamp": prepared.new_stamp,
        "activity_at": None if prepared.activity_at is None else to_micros(prepared.activity_at),
        "message_count": prepared.new_message_count,
        "started_by": prepared.started_by,
        "authors": authors,
        "last_turn_offset": turn,
        "users": users_parameter(prepared.users_to_insert),
        "events": events,
    }
