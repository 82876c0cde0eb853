"""The in-memory backend's primitives: the reference every other backend is held to.

Everything lives in this process and is gone when it ends. Each primitive runs under
one lock without awaiting, so it is atomic for every task and thread using the store.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Self

from convostore._json import indexable
from convostore._text import text_tokens
from convostore._vectors import as_matrix, top_k
from convostore.backends import decisions, interface, spi
from convostore.backends.memory.indexes import SessionIndexes, SessionRecord, listed
from convostore.backends.memory.view import LogView
from convostore.errors import InvalidArgumentError
from convostore.filters import EventFilter
from convostore.model import COMPACTION

__all__ = ["MemoryBackend"]


class MemoryBackend(interface.Backend):
    """`memory://`: a database held in this process's memory, one per store."""

    capabilities = interface.Capabilities(persistent=False)

    def __init__(self) -> None:
        self._indexed_keys: frozenset[str] = frozenset()
        self._vector_spec: spi.VectorIndexSpec | None = None
        self._lock = threading.RLock()
        self._users: dict[str, spi.User] = {}
        self._sessions: dict[str, SessionRecord] = {}
        self._event_sessions: dict[str, str] = {}
        self._indexes = SessionIndexes()

    @classmethod
    async def open(cls, url: str, **options: Any) -> Self:
        """A new, empty database; ``memory://`` takes no options."""
        if options:
            raise InvalidArgumentError(f"unknown memory store options: {sorted(options)}")
        return cls()

    @classmethod
    async def pending_migrations(cls, url: str, **options: Any) -> list[str]:
        """None: a memory database is new at every connect and has no schema."""
        if options:
            raise InvalidArgumentError(f"unknown memory store options: {sorted(options)}")
        return []

    async def close(self) -> None:
        return None

    async def stats(self) -> interface.DatabaseStats:
        with self._lock:
            events = [event for record in self._sessions.values() for event in record.log]
            messages = [event for event in events if isinstance(event, spi.Message)]
            return interface.DatabaseStats(
                users=len(self._users),
                sessions=len(self._sessions),
                events=len(events),
                messages=len(messages),
                vectors=sum(1 for m in messages if m.embedding is not None),
                size_bytes=None,
            )

    # ---------------------------------------------------------------- users

    async def put_user(self, user: spi.User) -> None:
        with self._lock:
            self._users[user.id] = user

    async def get_user(self, user_id: str) -> spi.User | None:
        with self._lock:
            return self._users.get(user_id)

    def _check_users(self, users: tuple[spi.User, ...], required: tuple[str, ...]) -> None:
        unconfirmed = decisions.unconfirmed_users(users, required)
        missing = [user_id for user_id in unconfirmed if user_id not in self._users]
        if missing:
            raise decisions.unknown_users(missing)

    def _insert_users(self, users: tuple[spi.User, ...]) -> None:
        for user in users:
            self._users.setdefault(user.id, user)

    # ---------------------------------------------------------------- sessions

    async def insert_session(self, new: spi.NewSession, *, if_absent: bool) -> spi.Session | None:
        with self._lock:
            return self._insert(new, if_absent=if_absent)

    def _insert(self, new: spi.NewSession, *, if_absent: bool) -> spi.Session | None:
        session = new.session
        if session.id in self._sessions:
            decisions.refuse_existing(session, if_absent)
            return None
        self._check_users(new.users_to_insert, new.required_user_ids)
        if session.part_of is not None:
            parent = self._sessions.get(session.part_of)
            found = None if parent is None else (parent.session.owner_id, parent.session.part_of)
            decisions.check_parent(session, found)
        self._insert_users(new.users_to_insert)
        self._sessions[session.id] = SessionRecord(session)
        self._indexes.add(session)
        return session

    async def find_or_insert_part(self, new: spi.NewSession) -> spi.Session:
        with self._lock:
            part_of, held_with = new.session.part_of, new.session.held_with
            assert part_of is not None
            assert held_with is not None
            parent = self._sessions.get(part_of)
            new = decisions.owned_by_parent(
                new, None if parent is None else (parent.session.owner_id, parent.session.part_of)
            )
            found = self._find(part_of, held_with)
            if found is not None:
                return found
            inserted = self._insert(new, if_absent=False)
            assert inserted is not None
            return inserted

    async def get_session(self, session_id: str) -> spi.Session | None:
        with self._lock:
            record = self._sessions.get(session_id)
            return None if record is None else record.session

    async def update_session(self, changes: spi.SessionChanges) -> spi.Session:
        with self._lock:
            record = self._record(changes.session_id)
            if record.session.stamp != changes.expected_stamp:
                raise decisions.stale_or_missing(changes.session_id, True)
            record.session = replace(
                record.session,
                title=changes.title,
                metadata=changes.metadata,
                expires_at=changes.expires_at,
                stamp=changes.new_stamp,
            )
            return record.session

    async def set_title(self, session_id: str, title: str | None, stamp: str) -> spi.Session:
        with self._lock:
            record = self._record(session_id)
            record.session = replace(record.session, title=title, stamp=stamp)
            return record.session

    async def delete_session(self, session_id: str) -> bool:
        with self._lock:
            if session_id not in self._sessions:
                return False
            self._delete(session_id)
            return True

    def _delete(self, session_id: str) -> None:
        record = self._sessions.pop(session_id)
        for event in record.log:
            self._event_sessions.pop(event.id, None)
        for part_id in self._indexes.remove(record.session):
            self._delete(part_id)

    async def list_sessions(self, page: interface.SessionPage) -> list[spi.Session]:
        with self._lock:
            return [r.session for r in self._owner_records(page)]

    async def list_summaries(self, page: interface.SessionPage) -> list[spi.SessionSummary]:
        with self._lock:
            return [self._summary(r) for r in self._owner_records(page)]

    def _owner_records(self, page: interface.SessionPage) -> list[SessionRecord]:
        """Newest first from the cursor on, walking the owner's index: a page costs its
        own rows (and the rows the filter passes over), wherever it starts."""
        records: list[SessionRecord] = []
        for session_id in self._indexes.newest_first(page.owner_id, page.order, page.after):
            record = self._sessions[session_id]
            if listed(record.session, page.owner_id, page.filter):
                records.append(record)
                if len(records) == page.limit:
                    break
        return records

    async def count_sessions(self, owner_id: str, filter: spi.SessionFilter) -> int:
        with self._lock:
            return self._indexes.count(owner_id, filter)

    async def find_part(self, part_of: str, held_with: str) -> spi.Session | None:
        with self._lock:
            return self._find(part_of, held_with)

    def _find(self, part_of: str, held_with: str) -> spi.Session | None:
        # Parts are kept in id order, so the first match is the earliest.
        for part_id in self._indexes.parts(part_of):
            part = self._sessions[part_id].session
            if part.held_with == held_with:
                return part
        return None

    async def list_parts(self, part_of: str) -> list[spi.SessionSummary]:
        with self._lock:
            return [self._summary(self._sessions[i]) for i in self._indexes.parts(part_of)]

    def _summary(self, record: SessionRecord) -> spi.SessionSummary:
        owner_id = record.session.owner_id
        return spi.SessionSummary(
            session=record.session,
            owner=None if owner_id is None else self._users.get(owner_id),
            message_count=record.message_count,
            started_by=None if record.started_by is None else self._users.get(record.started_by),
        )

    async def participants(self, session_id: str) -> list[spi.User]:
        with self._lock:
            record = self._sessions.get(session_id)
            if record is None:
                return []
            return [self._users[i] for i in record.participants if i in self._users]

    async def add_indexed_keys(self, keys: frozenset[str]) -> frozenset[str]:
        # Lookups read the sessions' metadata itself: nothing to backfill.
        with self._lock:
            self._indexed_keys |= keys
            return self._indexed_keys

    async def indexed_keys(self) -> frozenset[str]:
        with self._lock:
            return self._indexed_keys

    async def remove_indexed_key(self, key: str) -> bool:
        with self._lock:
            indexed = key in self._indexed_keys
            self._indexed_keys -= {key}
            return indexed

    async def find_sessions_by_metadata(self, name: str, value: str) -> list[spi.Session]:
        with self._lock:
            if name not in self._indexed_keys:
                return []
            found = [
                r.session
                for r in self._sessions.values()
                if name in r.session.metadata and indexable(r.session.metadata[name]) == value
            ]
            return sorted(found, key=lambda s: s.id)

    async def delete_expired(self, before: datetime) -> int:
        with self._lock:
            expired = [
                r.session.id
                for r in self._sessions.values()
                if r.session.expires_at is not None and r.session.expires_at < before
            ]
            deleted = 0
            for session_id in expired:
                # A part may already be gone with its expired parent.
                if session_id in self._sessions:
                    self._delete(session_id)
                    deleted += 1
            return deleted

    # ---------------------------------------------------------------- the log

    async def append(self, append: spi.PreparedAppend) -> spi.AppendOutcome:
        with self._lock:
            record = self._record(append.session_id)
            self._check_users(append.users_to_insert, append.required_user_ids)
            session = record.session
            if append.expected_version is not None and session.version != append.expected_version:
                return spi.AppendOutcome(applied=False)
            stored = [
                self._stored_event(owner, prepared.event.id)
                for prepared in append.events
                if (owner := self._event_sessions.get(prepared.event.id)) is not None
            ]
            if stored:
                return decisions.replay_or_conflict(append, stored)
            self._insert_users(append.users_to_insert)
            events: list[spi.Event] = []
            for offset, prepared in enumerate(append.events, start=1):
                event = replace(prepared.event, seq=len(record.log) + offset)
                events.append(event)
                if isinstance(event, spi.Message) and event.author_id is not None:
                    record.participants.setdefault(event.author_id, None)
            for event in events:
                record.positions[event.id] = len(record.log)
                if event.type == COMPACTION:
                    record.boundaries.append(len(record.log))
                record.log.append(event)
                self._event_sessions[event.id] = append.session_id
            record.message_count += append.new_message_count
            if record.started_by is None:
                record.started_by = append.started_by
            last_activity = session.last_activity_at
            if append.activity_at is not None and append.activity_at > last_activity:
                last_activity = append.activity_at
            record.session = replace(
                session,
                version=session.version + 1,
                last_activity_at=last_activity,
                stamp=append.new_stamp,
            )
            self._indexes.moved(session, record.session)
            return spi.AppendOutcome(applied=True, events=events)

    async def version(self, session_id: str) -> int:
        with self._lock:
            record = self._sessions.get(session_id)
            return 0 if record is None else record.session.version

    async def read(self, session_id: str, event_filter: EventFilter) -> list[spi.Event]:
        with self._lock:
            record = self._sessions.get(session_id)
            if record is None:
                return []
            view = LogView.of(record) if event_filter.active_view else LogView(record.log)
            return view.answer(event_filter)

    async def set_narration(
        self, session_id: str, message_id: str, text: str | None, stamp: str
    ) -> bool:
        with self._lock:
            record = self._sessions.get(session_id)
            if record is None:
                return False
            index = record.positions.get(message_id)
            if index is None:
                return False
            event = record.log[index]
            if not isinstance(event, spi.Message):
                return False
            record.log[index] = replace(event, narration=text, stamp=stamp)
            return True

    def _record(self, session_id: str) -> SessionRecord:
        record = self._sessions.get(session_id)
        if record is None:
            raise decisions.missing_session(session_id)
        return record

    def _stored_event(self, session_id: str, event_id: str) -> spi.Event:
        record = self._sessions[session_id]
        return record.log[record.positions[event_id]]

    # ---------------------------------------------------------------- vectors and text

    async def vector_index_spec(self) -> spi.VectorIndexSpec | None:
        return self._vector_spec

    async def declare_vector_index(self, spec: spi.VectorIndexSpec, *, replace: bool) -> None:
        with self._lock:
            if replace or self._vector_spec is None:
                self._vector_spec = spec

    def _messages(self) -> list[spi.Message]:
        return [
            event
            for record in self._sessions.values()
            for event in record.log
            if isinstance(event, spi.Message)
        ]

    def _pending(self, model: str, roles: Sequence[spi.Role]) -> list[spi.Message]:
        return sorted(
            (
                m
                for m in self._messages()
                if m.role in roles and m.content.strip() and m.embedding_model != model
            ),
            key=lambda m: m.id,
        )

    async def pending_embeddings(
        self, model: str, roles: Sequence[spi.Role], after: str | None, limit: int
    ) -> list[spi.PendingEmbedding]:
        with self._lock:
            pending = [m for m in self._pending(model, roles) if after is None or m.id > after]
            return [
                spi.PendingEmbedding(m.id, m.session_id, m.role, m.content) for m in pending[:limit]
            ]

    async def count_pending_embeddings(self, model: str, roles: Sequence[spi.Role]) -> int:
        with self._lock:
            return len(self._pending(model, roles))

    async def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]], stamp: str
    ) -> None:
        with self._lock:
            for message_id, vector in vectors:
                session_id = self._event_sessions.get(message_id)
                if session_id is None:
                    continue
                record = self._sessions[session_id]
                index = record.positions[message_id]
                event = record.log[index]
                if isinstance(event, spi.Message):
                    record.log[index] = replace(
                        event, embedding=vector, embedding_model=model, stamp=stamp
                    )

    def _searchable(self, scope: interface.SearchScope) -> list[spi.Message]:
        return [
            event
            for record in self._sessions.values()
            if (scope.owner_id is None or record.session.owner_id == scope.owner_id)
            and (scope.session_id is None or record.session.id == scope.session_id)
            for event in record.log
            if isinstance(event, spi.Message) and (scope.roles is None or event.role in scope.roles)
        ]

    async def vector_search(self, query: interface.VectorQuery) -> list[spi.SearchHit]:
        width = len(query.vector)
        with self._lock:
            candidates = [
                m
                for m in self._searchable(query.scope)
                if m.embedding is not None
                and len(m.embedding) == width
                and (query.model is None or m.embedding_model == query.model)
            ]
        matrix = as_matrix([m.embedding or () for m in candidates], width)
        ranked = top_k(query.vector, matrix, query.metric, query.k)
        return [spi.SearchHit(candidates[row], score) for row, score in ranked]

    async def text_search(self, query: interface.TextQuery) -> list[spi.SearchHit]:
        with self._lock:
            candidates = self._searchable(query.scope)
        hits: list[spi.SearchHit] = []
        for message in candidates:
            tokens = text_tokens(message.content)
            if not tokens or not all(term in tokens for term in query.terms):
                continue
            # Term frequency damped by length: shorter, denser matches rank higher.
            frequency = sum(tokens.count(term) for term in query.terms)
            hits.append(spi.SearchHit(message, frequency / math.sqrt(len(tokens))))
        hits.sort(key=lambda hit: (-hit.score, hit.message.id))
        return hits[: query.k]
