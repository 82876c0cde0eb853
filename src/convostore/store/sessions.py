"""Sessions: create, read, update and delete them, list them by keyset, their parts and
participants, lookups by indexed metadata, and expiry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from convostore import _json
from convostore._time import require_aware, to_micros, utc_now
from convostore.backends.interface import SessionPage
from convostore.cursors import Keyset, encode_cursor
from convostore.errors import InvalidArgumentError, NotIndexedError
from convostore.model import (
    Page,
    PageRequest,
    Session,
    SessionFilter,
    SessionOrder,
    SessionSummary,
    User,
    UserRef,
)
from convostore.prepare import (
    INDEXABLE_KEY,
    Listing,
    check_id,
    check_session_filter,
    check_title,
    new_stamp,
    prepare_changes,
    prepare_listing,
    prepare_session,
    user_id_of,
)
from convostore.store.base import StoreBase

__all__ = ["SessionOperations", "check_indexed_keys"]


class SessionOperations(StoreBase):
    """The store's session operations (see `convostore.store.Store`)."""

    async def create_session(
        self,
        owner: UserRef | None,
        *,
        session_id: str | None = None,
        title: str | None = None,
        kind: str = "chat",
        part_of: str | None = None,
        held_with: UserRef | None = None,
        metadata: Mapping[str, Any] | None = None,
        expires_at: datetime | None = None,
    ) -> Session:
        """Create a session. ``owner`` and ``held_with`` are `User` values (inserted if
        absent) or ids of stored users (`UnknownUserError` otherwise).

        An existing id raises `SessionExistsError` and leaves that session untouched.
        ``part_of`` must name an existing top-level session (`SessionNotFoundError`
        otherwise) with the same owner (`InvalidArgumentError` otherwise).
        """
        created = await self._insert_session(
            False, owner, session_id, title, kind, part_of, held_with, metadata, expires_at
        )
        assert created is not None
        return created

    async def create_session_if_absent(
        self,
        owner: UserRef | None,
        *,
        session_id: str,
        title: str | None = None,
        kind: str = "chat",
        part_of: str | None = None,
        held_with: UserRef | None = None,
        metadata: Mapping[str, Any] | None = None,
        expires_at: datetime | None = None,
    ) -> bool:
        """Create the session unless one with this id exists. Atomic: of many
        concurrent calls for one id exactly one returns True."""
        inserted = await self._insert_session(
            True, owner, session_id, title, kind, part_of, held_with, metadata, expires_at
        )
        return inserted is not None

    async def _insert_session(
        self, if_absent: bool, owner: UserRef | None, *fields: Any
    ) -> Session | None:
        """`create_session`'s checks and insert; ``fields`` are its arguments after
        ``owner``, in `prepare_session`'s order."""
        self._check_open()
        new = prepare_session(self.indexed_metadata, owner, *fields)
        return await self.backend.insert_session(new, if_absent=if_absent)

    async def get_session(self, session_id: str) -> Session | None:
        """The session, or None. Expired sessions are returned until deleted."""
        self._check_open()
        return await self.backend.get_session(check_id(session_id, "session_id"))

    async def update_session(self, session: Session) -> Session:
        """Write ``title``, ``metadata`` and ``expires_at`` of a session read from the
        store, only if its ``stamp`` still matches the stored one; otherwise
        `StaleObjectError` and nothing is written. Returns the session as stored."""
        self._check_open()
        changes = prepare_changes(self.indexed_metadata, session)
        return await self.backend.update_session(changes)

    async def set_title(self, session_id: str, title: str | None) -> Session:
        """Write the title alone. Never conflicts; changes the stamp.
        An unknown session raises `SessionNotFoundError`."""
        self._check_open()
        return await self.backend.set_title(
            check_id(session_id, "session_id"), check_title(title), new_stamp()
        )

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session, the sessions that are part of it, and all their events.
        Users are kept. False when there was no such session."""
        self._check_open()
        return await self.backend.delete_session(check_id(session_id, "session_id"))

    async def list_sessions(
        self,
        owner_id: UserRef,
        page: PageRequest | None = None,
        filter: SessionFilter | None = None,
    ) -> Page[Session]:
        """One page of the owner's (a `User` or an id) sessions, newest first, by keyset
        (page n costs what page 1 costs). Top-level sessions only unless
        ``filter.include_parts``. A page that names no order follows its cursor's."""
        self._check_open()
        listing = prepare_listing(owner_id, page, filter)
        rows = await self.backend.list_sessions(_session_page(listing))
        return _page(rows, listing, lambda s: s)

    async def list_summaries(
        self,
        owner_id: UserRef,
        page: PageRequest | None = None,
        filter: SessionFilter | None = None,
    ) -> Page[SessionSummary]:
        """`list_sessions`, each session with its owner, message count and first author,
        all computed by the backend's query without loading message bodies."""
        self._check_open()
        listing = prepare_listing(owner_id, page, filter)
        rows = await self.backend.list_summaries(_session_page(listing))
        return _page(rows, listing, lambda s: s.session)

    async def count_sessions(self, owner_id: UserRef, filter: SessionFilter | None = None) -> int:
        """How many sessions `list_sessions` would list over all its pages (the owner a
        `User` or an id)."""
        self._check_open()
        return await self.backend.count_sessions(
            user_id_of(owner_id, "owner_id"), check_session_filter(filter)
        )

    async def find_part(self, part_of: str, held_with: UserRef) -> Session | None:
        """The earliest session that is part of ``part_of`` and held with that user."""
        self._check_open()
        return await self.backend.find_part(
            check_id(part_of, "part_of"), user_id_of(held_with, "held_with")
        )

    async def find_or_create_part(
        self,
        part_of: str,
        held_with: UserRef,
        *,
        title: str | None = None,
        kind: str = "chat",
    ) -> Session:
        """`find_part`, or a new part owned by the parent's owner. Under a race every
        caller settles on the same, earliest, session. An unknown parent raises
        `SessionNotFoundError`, a parent that is itself a part `InvalidArgumentError`."""
        self._check_open()
        # The owner is the parent's, which the backend reads in the same transaction.
        new = prepare_session(
            self.indexed_metadata, None, None, title, kind, part_of, held_with, None, None
        )
        return await self.backend.find_or_insert_part(new)

    async def list_parts(self, part_of: str) -> list[SessionSummary]:
        """The sessions that are part of ``part_of``, oldest first, with their summaries."""
        self._check_open()
        return await self.backend.list_parts(check_id(part_of, "part_of"))

    async def participants(self, session_id: str) -> list[User]:
        """Everyone who wrote a message in the session, once each, in order of their
        first message. [] for an unknown session."""
        self._check_open()
        return await self.backend.participants(check_id(session_id, "session_id"))

    async def find_sessions_by_metadata(self, name: str, value: Any) -> list[Session]:
        """Sessions whose metadata ``name`` equals ``value``, compared as strings in full
        (a non-string as its compact JSON), oldest first. Only keys the database indexes
        can be searched (whichever store added them); others raise `NotIndexedError`."""
        self._check_open()
        if name not in self.indexed_metadata:
            await self._read_indexed_keys()
            self._require_indexed(name)
        wanted = _json.check_text(_json.index_value(value), "metadata value")
        found = await self.backend.find_sessions_by_metadata(name, wanted)
        if not found:
            # Nothing found may mean another store dropped the key: say so if it did.
            await self._read_indexed_keys()
            self._require_indexed(name)
        return found

    async def drop_metadata_index(self, name: str) -> bool:
        """Stop indexing the session metadata key ``name`` in the database, for every
        store on it (the keys belong to the database: connecting only adds keys). False
        when it was not indexed. Searching by ``name`` then raises `NotIndexedError`,
        here and in every other store."""
        self._check_open()
        key = check_indexed_keys([name])
        removed = await self.backend.remove_indexed_key(next(iter(key)))
        await self._read_indexed_keys()
        return removed

    async def _read_indexed_keys(self) -> None:
        """Learn the keys the database indexes now (other stores add and drop them)."""
        self.indexed_metadata = await self.backend.indexed_keys()

    def _require_indexed(self, name: str) -> None:
        if name not in self.indexed_metadata:
            raise NotIndexedError(
                f"metadata key {name!r} is not indexed; pass it in connect(..., "
                "indexed_metadata=[...]) to search by it"
            )

    async def delete_expired(self, before: datetime | None = None) -> int:
        """Delete every session with ``expires_at < before`` (default: now), with its
        parts and events; atomically per session, so a session whose expiry was
        extended concurrently survives. Returns how many expired sessions were deleted
        (their parts are not counted)."""
        self._check_open()
        when = utc_now() if before is None else require_aware(before, "before")
        return await self.backend.delete_expired(when)


def check_indexed_keys(keys: Iterable[str]) -> frozenset[str]:
    """Metadata key names to index: each 1-64 of ``A-Z a-z 0-9 _ . : -``."""
    if isinstance(keys, str):
        raise InvalidArgumentError("indexed_metadata takes a list of key names, not a string")
    checked = tuple(dict.fromkeys(keys))
    for key in checked:
        if not isinstance(key, str) or not INDEXABLE_KEY.fullmatch(key):
            raise InvalidArgumentError(f"invalid indexed metadata key {key!r}")
    return frozenset(checked)


def _session_page(listing: Listing) -> SessionPage:
    return SessionPage(
        listing.owner_id, listing.order, listing.after, listing.size + 1, listing.filter
    )


def _page(rows: list[Any], listing: Listing, session_of: Any) -> Page[Any]:
    if len(rows) <= listing.size:
        return Page(items=rows, next_cursor=None)
    items = rows[: listing.size]
    last: Session = session_of(items[-1])
    keyset = Keyset(
        order=listing.order,
        session_id=last.id,
        last_activity_us=(
            to_micros(last.last_activity_at)
            if listing.order is SessionOrder.LAST_ACTIVITY
            else None
        ),
    )
    return Page(items=items, next_cursor=encode_cursor(keyset))
