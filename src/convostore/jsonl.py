"""Export a store's sessions as JSON lines, and import them back, streamed.

A line is one record: ``{"record": "user", ...}``, ``{"record": "session", ...}`` or
``{"record": "event", ...}`` with the fields of `convostore.records`. Users come before
the sessions and events that name them, a session before its events, a session before
its parts, so a file imports in one pass. Memory stays flat however large the store:
events are read and written a page at a time.

Importing is idempotent: a session already stored is kept as it is, and an event whose
id its log already holds is skipped, so a file imported twice (or an interrupted import
run again) leaves one copy of everything. Imported sessions get new stamps and creation
times; events keep their ids, times, order and vectors.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from convostore.errors import ConflictError, InvalidArgumentError
from convostore.filters import EventFilter
from convostore.model import (
    EventWrite,
    Message,
    MessageWrite,
    PageRequest,
    Session,
)
from convostore.records import (
    event_to_json,
    session_to_json,
    time_from_json,
    user_from_json,
    user_to_json,
    write_from_json,
)
from convostore.store import Store

__all__ = ["ImportCounts", "export_lines", "export_records", "import_lines", "import_records"]

PAGE = 1000
BATCH = 500

Record = dict[str, Any]


async def export_records(
    store: Store, owner_ids: Sequence[str], *, vectors: bool = True
) -> AsyncIterator[Record]:
    """Every session of each owner (parts after their parent), with its events and
    the users they name, as records."""
    seen_users: set[str] = set()
    for owner_id in owner_ids:
        cursor: str | None = None
        while True:
            page = await store.list_sessions(owner_id, PageRequest(size=100, cursor=cursor))
            for session in reversed(page.items):
                async for record in _session_records(store, session, seen_users, vectors):
                    yield record
                for part in await store.list_parts(session.id):
                    async for record in _session_records(store, part.session, seen_users, vectors):
                        yield record
            if page.next_cursor is None:
                break
            cursor = page.next_cursor


async def _session_records(
    store: Store, session: Session, seen_users: set[str], vectors: bool
) -> AsyncIterator[Record]:
    for user_id in (session.owner_id, session.held_with):
        async for record in _user_records(store, [user_id], seen_users):
            yield record
    yield {"record": "session", **session_to_json(session)}
    after = 0
    while True:
        events = await store.read(session.id, EventFilter(after_seq=after, limit=PAGE))
        if not events:
            return
        named: list[str | None] = []
        for event in events:
            if isinstance(event, Message):
                named.append(event.author_id)
                named.extend(event.recipient_ids)
        async for record in _user_records(store, named, seen_users):
            yield record
        for event in events:
            yield {"record": "event", **event_to_json(event, vectors=vectors)}
        after = events[-1].seq


async def _user_records(
    store: Store, user_ids: Iterable[str | None], seen: set[str]
) -> AsyncIterator[Record]:
    for user_id in user_ids:
        if user_id is None or user_id in seen:
            continue
        seen.add(user_id)
        user = await store.get_user(user_id)
        if user is not None:
            yield {"record": "user", **user_to_json(user)}


async def export_lines(
    store: Store, owner_ids: Sequence[str], *, vectors: bool = True
) -> AsyncIterator[str]:
    """`export_records` as JSON lines, each ending in a newline."""
    async for record in export_records(store, owner_ids, vectors=vectors):
        yield json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


@dataclass(slots=True)
class ImportCounts:
    """What an import wrote, and what it found already stored."""

    users: int = 0
    sessions: int = 0
    sessions_kept: int = 0
    events: int = 0
    events_kept: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "users": self.users,
            "sessions": self.sessions,
            "sessions_kept": self.sessions_kept,
            "events": self.events,
            "events_kept": self.events_kept,
        }


@dataclass(slots=True)
class _SessionImport:
    session_id: str
    existing_ids: set[str] | None
    pending: list[MessageWrite | EventWrite] = field(default_factory=list)


class _Importer:
    def __init__(self, store: Store, on_record: Callable[[int], None] | None) -> None:
        self.store = store
        self.counts = ImportCounts()
        self.current: _SessionImport | None = None
        self.on_record = on_record

    async def add(self, record: Any, line: int) -> None:
        if not isinstance(record, dict):
            raise InvalidArgumentError(f"line {line}: a record must be a JSON object")
        kind = record.get("record")
        try:
            if kind == "user":
                await self._user(record)
            elif kind == "session":
                await self._session(record)
            elif kind == "event":
                await self._event(record)
            else:
                raise InvalidArgumentError("record must be 'user', 'session' or 'event'")
        except InvalidArgumentError as error:
            raise InvalidArgumentError(f"line {line}: {error}") from error
        if self.on_record is not None:
            self.on_record(1)

    async def _user(self, record: Record) -> None:
        user = user_from_json(record)
        if await self.store.get_user(user.id) is None:
            await self.store.put_user(user)
            self.counts.users += 1

    async def _session(self, record: Record) -> None:
        await self.flush()
        session_id = record.get("id")
        if not isinstance(session_id, str):
            raise InvalidArgumentError("session.id must be a string")
        metadata = record.get("metadata")
        created = await self.store.create_session_if_absent(
            record.get("owner_id"),
            session_id=session_id,
            title=record.get("title"),
            kind=record.get("kind", "chat"),
            part_of=record.get("part_of"),
            held_with=record.get("held_with"),
            metadata=metadata if isinstance(metadata, dict) else None,
            expires_at=time_from_json(record.get("expires_at"), "expires_at"),
        )
        existing: set[str] | None = None
        if created:
            self.counts.sessions += 1
        else:
            self.counts.sessions_kept += 1
            existing = await self._stored_ids(session_id)
        self.current = _SessionImport(session_id, existing)

    async def _stored_ids(self, session_id: str) -> set[str]:
        ids: set[str] = set()
        after = 0
        while True:
            events = await self.store.read(session_id, EventFilter(after_seq=after, limit=PAGE))
            if not events:
                return ids
            ids.update(event.id for event in events)
            after = events[-1].seq

    async def _event(self, record: Record) -> None:
        current = self.current
        if current is None or record.get("session_id") != current.session_id:
            raise InvalidArgumentError("an event must follow its session's record")
        write = write_from_json(record)
        if current.existing_ids is not None and write.id in current.existing_ids:
            self.counts.events_kept += 1
            return
        current.pending.append(write)
        if len(current.pending) >= BATCH:
            await self.flush()

    async def flush(self) -> None:
        current = self.current
        if current is None or not current.pending:
            return
        writes, current.pending = current.pending, []
        version = await self.store.version(current.session_id)
        try:
            if await self.store.append_events(current.session_id, writes, version):
                self.counts.events += len(writes)
                return
        except ConflictError:
            pass
        # Another writer moved the log, or some ids are stored already: one at a time,
        # each an idempotent append.
        for write in writes:
            before = await self.store.version(current.session_id)
            await self.store.append_event(current.session_id, write)
            if await self.store.version(current.session_id) != before:
                self.counts.events += 1
            else:
                self.counts.events_kept += 1


async def import_records(
    store: Store,
    records: Iterable[Any],
    on_record: Callable[[int], None] | None = None,
) -> ImportCounts:
    """Import records as `export_records` gives them (see the module's docstring)."""
    importer = _Importer(store, on_record)
    for line, record in enumerate(records, start=1):
        await importer.add(record, line)
    await importer.flush()
    return importer.counts


async def import_lines(
    store: Store,
    lines: Iterable[str],
    on_record: Callable[[int], None] | None = None,
) -> ImportCounts:
    """Import JSON lines (blank lines are skipped); a malformed line raises
    `InvalidArgumentError` naming it, after the lines before it were imported."""
    importer = _Importer(store, on_record)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InvalidArgumentError(f"line {number}: not JSON ({error.msg})") from error
        await importer.add(record, number)
    await importer.flush()
    return importer.counts
