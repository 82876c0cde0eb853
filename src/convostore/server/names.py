"""Each owner's names apart: the ids a key chooses live in its owner's namespace.

The store has one space of user ids, session ids and event ids; owners on one server
must not meet in it. So an owner's key never names a store id directly: ``bot``,
written through Ada's keys, is the store's user ``ada~bot``, and a session or event id
Ada chooses, ``plan-1``, is the store's ``ada~plan-1``. What the store generates
(UUIDv7) is unique already and stays as it is, and a canonical UUID a key gives is
taken as such an id. The owner's own id names the owner's user record. Every id read
back is shown in the owner's namespace again.

Hence, for an owner's key: a user record written through another owner's keys is never
read, linked or changed (the same name is another record); and an id another owner
chose answers as any free id does, so it tells nothing of theirs. An admin key sees the
store's own ids, whoever wrote them.

``~`` is refused in owner ids (`convostore.keys.KeyRing.create`), so the first ``~``
ends the owner's part and no two names meet.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from convostore.keys import NAMESPACE_SEPARATOR, ApiKey
from convostore.model import COMPACTION, User
from convostore.records import user_to_json

__all__ = ["Names"]

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True, slots=True)
class Names:
    """How one key's ids map to the store's. ``owner`` None: the store's own (admin)."""

    owner: str | None

    @classmethod
    def of(cls, key: ApiKey) -> Names:
        return cls(None if key.admin else key.owner_id)

    @property
    def _prefix(self) -> str:
        return f"{self.owner}{NAMESPACE_SEPARATOR}"

    def user_in(self, user_id: str) -> str:
        if self.owner is None or user_id == self.owner:
            return user_id
        return self._prefix + user_id

    def user_out(self, user_id: str) -> str:
        if self.owner is None or user_id == self.owner:
            return user_id
        return user_id.removeprefix(self._prefix)

    def mine(self, user_id: str) -> bool:
        """Whether the store's user ``user_id`` is one this key may read."""
        return self.owner is None or user_id == self.owner or user_id.startswith(self._prefix)

    def id_in(self, value: str) -> str:
        """A session or event id the key chose, as the store holds it."""
        if self.owner is None or _UUID.fullmatch(value):
            return value
        return self._prefix + value

    def id_out(self, value: str) -> str:
        if self.owner is None:
            return value
        return value.removeprefix(self._prefix)

    def text_out(self, text: str) -> str:
        """A message of the store's, with this key's ids in its names."""
        if self.owner is None:
            return text
        return text.replace(self._prefix, "")

    def ids_out(self, values: Iterable[str]) -> list[str]:
        return [self.id_out(v) for v in values]

    def user(self, user: User) -> dict[str, Any]:
        """A user record as this key reads it: one outside its namespace (written by the
        store's own API, never through a key) shows its id alone."""
        record = user_to_json(user)
        if not self.mine(user.id):
            record.update(display_name=user.id, username=None, email=None, metadata={})
        record["id"] = self.user_out(user.id)
        return record

    def session(self, record: dict[str, Any]) -> dict[str, Any]:
        """A session record (`records.session_to_json`) in this key's names."""
        if self.owner is None:
            return record
        record["id"] = self.id_out(record["id"])
        if record.get("part_of") is not None:
            record["part_of"] = self.id_out(record["part_of"])
        if record.get("held_with") is not None:
            record["held_with"] = self.user_out(record["held_with"])
        return record

    def event(self, record: dict[str, Any]) -> dict[str, Any]:
        """An event record (`records.event_to_json`) in this key's names."""
        if self.owner is None:
            return record
        record["id"] = self.id_out(record["id"])
        record["session_id"] = self.id_out(record["session_id"])
        if record.get("author_id") is not None:
            record["author_id"] = self.user_out(record["author_id"])
        if record.get("recipient_ids") is not None:
            record["recipient_ids"] = [self.user_out(r) for r in record["recipient_ids"]]
        if record.get("in_reply_to") is not None:
            record["in_reply_to"] = self.id_out(record["in_reply_to"])
        payload = record.get("payload")
        if record.get("type") == COMPACTION and isinstance(payload, dict):
            kept = payload.get("kept_event_ids")
            if isinstance(kept, list):
                payload = {**payload, "kept_event_ids": [self.id_out(str(k)) for k in kept]}
                record["payload"] = payload
        return record

    def user_ref_in(self, value: Any) -> Any:
        """An author, recipient or ``held_with`` as a request gives it (an id or a user
        object), in the store's names."""
        if isinstance(value, str):
            return self.user_in(value)
        if isinstance(value, dict) and isinstance(value.get("id"), str):
            return {**value, "id": self.user_in(value["id"])}
        return value

    def write_in(self, record: dict[str, Any]) -> dict[str, Any]:
        """An event write (the JSON of `records.write_from_json`) in the store's names."""
        if self.owner is None:
            return record
        if isinstance(record.get("id"), str):
            record["id"] = self.id_in(record["id"])
        if isinstance(record.get("in_reply_to"), str):
            record["in_reply_to"] = self.id_in(record["in_reply_to"])
        if record.get("author") is not None:
            record["author"] = self.user_ref_in(record["author"])
        if isinstance(record.get("recipients"), list):
            record["recipients"] = [self.user_ref_in(r) for r in record["recipients"]]
        return record
