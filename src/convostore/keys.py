"""API keys, kept in the store's own database as events of a reserved session.

A key is ``cs_<key id>_<secret>``; only the SHA-256 of the whole key is stored, so a
key is shown once, when created. Creating a key appends a ``CONVOSTORE.KEY_CREATED``
event, revoking one a ``CONVOSTORE.KEY_REVOKED`` event, to the session
``convostore.keys`` owned by the system user ``convostore.system``. Every backend
holds them with no table of its own, and a key revoked by one process is refused by
every other at its next request (each request reads the session's version, one round
trip, and the new events when it moved).

A key belongs to one owner; an admin key (which may also name an owner) sees every
owner's sessions.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, replace
from datetime import datetime

from convostore._time import utc_now
from convostore.errors import InvalidArgumentError
from convostore.filters import EventFilter
from convostore.model import EventWrite, User
from convostore.records import time_from_json, time_to_json
from convostore.store import Store

__all__ = [
    "KEYS_SESSION_ID",
    "NAMESPACE_SEPARATOR",
    "SYSTEM_USER",
    "ApiKey",
    "KeyRing",
    "is_reserved_session",
]

SYSTEM_USER = User("convostore.system", "convostore", kind="agent")
KEYS_SESSION_ID = "convostore.keys"
KEY_CREATED = "CONVOSTORE.KEY_CREATED"
KEY_REVOKED = "CONVOSTORE.KEY_REVOKED"
# Ends an owner's part of the ids its keys choose (`convostore.server.names`).
NAMESPACE_SEPARATOR = "~"
_KEY = re.compile(r"cs_([0-9a-f]{16})_[A-Za-z0-9_-]{43}")


def is_reserved_session(session_id: str) -> bool:
    """Sessions convostore keeps for itself, never served to a key."""
    return session_id == KEYS_SESSION_ID


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key's record (never the key itself)."""

    id: str
    owner_id: str | None
    admin: bool
    label: str | None
    created_at: datetime
    revoked_at: datetime | None = None

    def can_see(self, owner_id: str | None) -> bool:
        """Whether this key may see a session owned by ``owner_id``."""
        return self.admin or (owner_id is not None and owner_id == self.owner_id)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("ascii")).hexdigest()


class KeyRing:
    """Create, list, revoke and check the API keys of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._keys: dict[str, ApiKey] = {}
        self._digests: dict[str, str] = {}
        self._seen_seq = 0
        self._seen_version = -1
        self._lock = asyncio.Lock()

    async def create(
        self, owner_id: str | None, *, admin: bool = False, label: str | None = None
    ) -> tuple[str, ApiKey]:
        """A new key and its record; the key itself is returned only here. The owner
        is stored as a user (named by its id) if it is not one yet."""
        if owner_id is None and not admin:
            raise InvalidArgumentError("a key needs an owner (or must be an admin key)")
        if owner_id is not None and (not isinstance(owner_id, str) or not owner_id.strip()):
            raise InvalidArgumentError("a key's owner must be a non-blank user id")
        if owner_id is not None and NAMESPACE_SEPARATOR in owner_id:
            raise InvalidArgumentError(f"a key's owner may not contain {NAMESPACE_SEPARATOR!r}")
        if owner_id == SYSTEM_USER.id:
            raise InvalidArgumentError(f"{SYSTEM_USER.id!r} is reserved")
        if label is not None and not isinstance(label, str):
            raise InvalidArgumentError("a key's label must be a string")
        key_id = secrets.token_hex(8)
        key = f"cs_{key_id}_{secrets.token_urlsafe(32)}"
        record = ApiKey(key_id, owner_id, admin, label, utc_now())
        await self._ensure_session()
        if owner_id is not None and await self.store.get_user(owner_id) is None:
            await self.store.put_user(User(owner_id, owner_id))
        await self.store.append_event(
            KEYS_SESSION_ID,
            EventWrite(
                KEY_CREATED,
                {
                    "key_id": key_id,
                    "sha256": _digest(key),
                    "owner_id": owner_id,
                    "admin": admin,
                    "label": label,
                    "created_at": time_to_json(record.created_at),
                },
            ),
        )
        return key, record

    async def revoke(self, key_id: str) -> bool:
        """Revoke a key; False when no live key has that id."""
        await self.refresh()
        current = self._keys.get(key_id)
        if current is None or current.revoked_at is not None:
            return False
        await self.store.append_event(
            KEYS_SESSION_ID,
            EventWrite(KEY_REVOKED, {"key_id": key_id, "revoked_at": time_to_json(utc_now())}),
        )
        await self.refresh()
        return True

    async def list(self, *, include_revoked: bool = False) -> list[ApiKey]:
        """Every key's record, oldest first."""
        await self.refresh()
        keys = sorted(self._keys.values(), key=lambda k: k.created_at)
        return [k for k in keys if include_revoked or k.revoked_at is None]

    async def authenticate(self, key: str) -> ApiKey | None:
        """The live key's record, or None for a key that is malformed, unknown or revoked."""
        match = _KEY.fullmatch(key)
        if match is None:
            return None
        await self.refresh()
        record = self._keys.get(match.group(1))
        digest = self._digests.get(match.group(1))
        if record is None or digest is None or record.revoked_at is not None:
            return None
        return record if hmac.compare_digest(digest, _digest(key)) else None

    async def is_live(self, key_id: str) -> bool:
        """Whether the key of this id is still live (one round trip when no key changed)."""
        await self.refresh()
        record = self._keys.get(key_id)
        return record is not None and record.revoked_at is None

    async def refresh(self) -> None:
        """Read the key events appended since the last look (one round trip when none)."""
        async with self._lock:
            version = await self.store.version(KEYS_SESSION_ID)
            if version == self._seen_version:
                return
            events = await self.store.read(
                KEYS_SESSION_ID,
                EventFilter(types=(KEY_CREATED, KEY_REVOKED), after_seq=self._seen_seq),
            )
            for event in events:
                payload = event.payload if isinstance(event.payload, dict) else {}
                key_id = str(payload.get("key_id"))
                if event.type == KEY_CREATED:
                    self._keys[key_id] = ApiKey(
                        key_id,
                        payload.get("owner_id"),
                        bool(payload.get("admin")),
                        payload.get("label"),
                        time_from_json(payload.get("created_at"), "created_at") or event.created_at,
                    )
                    self._digests[key_id] = str(payload.get("sha256"))
                elif key_id in self._keys:
                    revoked = time_from_json(payload.get("revoked_at"), "revoked_at")
                    self._keys[key_id] = replace(
                        self._keys[key_id], revoked_at=revoked or event.created_at
                    )
                self._seen_seq = event.seq
            self._seen_version = version

    async def _ensure_session(self) -> None:
        await self.store.create_session_if_absent(
            SYSTEM_USER, session_id=KEYS_SESSION_ID, title="API keys", kind="convostore.keys"
        )
