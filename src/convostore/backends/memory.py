"""The in-memory backend: the reference every other backend is held to.

Everything lives in this process and is gone when it ends. Each primitive runs under
one lock without awaiting, so it is atomic for every task and thread using the store.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Self

from convostore._json import index_value
from convostore._time import to_micros
from convostore._vectors import as_matrix, top_k
from convostore.backends.interface import (
    Backend,
    Capabilities,
    SearchScope,
    SessionPage,
    TextQuery,
    VectorQuery,
)
from convostore.cursors import Keyset
from convostore.embedding import PendingEmbedding, VectorIndexSpec, text_tokens
from convostore.errors import (
    EventIdConflictError,
    InvalidArgumentError,
    SessionExistsError,
    SessionNotFoundError,
    StaleObjectError,
    UnknownUserError,
)
from convostore.filters import (
    EventFilter,
    compaction_parts,
    is_turn_start,
)
from convostore.model import (
    COMPACTION,
    Event,
    Message,
    Role,
    SearchHit,
    Session,
    SessionFilter,
    SessionOrder,
    SessionSummary,
    User,
)
from convostore.prepare import (
    AppendOutcome,
    NewSession,
    PreparedAppend,
    SessionChanges,
    new_stamp,
    owned_by_parent,
)

__all__ = ["MemoryBackend"]

# An owner's sessions by last activity: (last_activity_at in microseconds, id).
_ActivityKey = tuple[int, str]


@dataclass(slots=True)
class _SessionRecord:
    session: Session
    # seq n is log[n - 1]: the log is dense from 1 and never loses an event.
    log: list[Event] = field(default_factory=list)
    # Event id -> its index in the log, for replays and narration.
    positions: dict[str, int] = field(default_factory=dict)
    # The indexes of the log's COMPACTION boundaries, oldest first.
    boundaries: list[int] = field(default_factory=list)
    message_count: int = 0
    started_by: str | None = None
    # Authors in order of their first message; a dict keeps insertion order.
    participants: dict[str, None] = field(default_factory=dict)


class MemoryBackend(Backend):
    """`memory://`: a database held in this process's memory, one per store."""

    capabilities = Capabilities(persistent=False)

    def __init__(self) -> None:
        self._indexed_keys: frozenset[str] = frozenset()
        self._vector_spec: VectorIndexSpec | None = None
        self._lock = threading.RLock()
        self._users: dict[str, User] = {}
        self._sessions: dict[str, _SessionRecord] = {}
        self._event_sessions: dict[str, str] = {}
        # Indexes that make listings, pages and counts cost what they return: each
        # owner's session ids (ascending, UUIDv7 = creation order), the same by last
        # activity, how many of each (kind, is a part), and each session's parts.
        self._created: dict[str | None, list[str]] = {}
        self._active: dict[str | None, list[_ActivityKey]] = {}
        self._counts: dict[str | None, Counter[tuple[str, bool]]] = {}
        self._parts: dict[str, list[str]] = {}

    @classmethod
    async def open(cls, url: str, **options: Any) -> Self:
        """A new, empty database; ``memory://`` takes no options."""
        if options:
            raise InvalidArgumentError(f"unknown memory store options: {sorted(options)}")
        return cls()

    async def close(self) -> None:
        return None

    # ---------------------------------------------------------------- users

    async def put_user(self, user: User) -> None:
        with self._lock:
            self._users[user.id] = user

    async def get_user(self, user_id: str) -> User | None:
        with self._lock:
            return self._users.get(user_id)

    def _check_users(self, users: tuple[User, ...], required: tuple[str, ...]) -> None:
        given = {user.id for user in users}
        missing = [i for i in required if i not in self._users and i not in given]
        if missing:
            raise UnknownUserError(f"unknown user id(s): {', '.join(map(repr, missing))}")

    def _insert_users(self, users: tuple[User, ...]) -> None:
        for user in users:
            self._users.setdefault(user.id, user)

    # ---------------------------------------------------------------- sessions

    async def insert_session(self, new: NewSession, *, if_absent: bool) -> Session | None:
        with self._lock:
            return self._insert(new, if_absent=if_absent)

    def _insert(self, new: NewSession, *, if_absent: bool) -> Session | None:
        session = new.session
        if session.id in self._sessions:
            if if_absent:
                return None
            raise SessionExistsError(f"session {session.id!r} already exists")
        self._check_users(new.users_to_insert, new.required_user_ids)
        if session.part_of is not None:
            parent = self._sessions.get(session.part_of)
            if parent is None:
                raise SessionNotFoundError(f"part_of names no session: {session.part_of!r}")
            if parent.session.part_of is not None:
                raise InvalidArgumentError("part_of must name a top-level session")
            if parent.session.owner_id != session.owner_id:
                raise InvalidArgumentError("part_of must name a session with the same owner")
        self._insert_users(new.users_to_insert)
        self._sessions[session.id] = _SessionRecord(session)
        owner = session.owner_id
        bisect.insort(self._created.setdefault(owner, []), session.id)
        bisect.insort(self._active.setdefault(owner, []), _activity_key(session))
        self._counts.setdefault(owner, Counter())[_count_key(session)] += 1
        if session.part_of is not None:
            bisect.insort(self._parts.setdefault(session.part_of, []), session.id)
        return session

    async def find_or_insert_part(self, new: NewSession) -> Session:
        with self._lock:
            part_of, held_with = new.session.part_of, new.session.held_with
            assert part_of is not None
            assert held_with is not None
            parent = self._sessions.get(part_of)
            new = owned_by_parent(
                new, None if parent is None else (parent.session.owner_id, parent.session.part_of)
            )
            found = self._find(part_of, held_with)
            if found is not None:
                return found
            inserted = self._insert(new, if_absent=False)
            assert inserted is not None
            return inserted

    async def get_session(self, session_id: str) -> Session | None:
        with self._lock:
            record = self._sessions.get(session_id)
            return None if record is None else record.session

    async def update_session(self, changes: SessionChanges) -> Session:
        with self._lock:
            record = self._record(changes.session_id)
            if record.session.stamp != changes.expected_stamp:
                raise StaleObjectError(
                    f"session {changes.session_id!r} was written since it was read"
                )
            record.session = replace(
                record.session,
                title=changes.title,
                metadata=changes.metadata,
                expires_at=changes.expires_at,
                stamp=changes.new_stamp,
            )
            return record.session

    async def set_title(self, session_id: str, title: str | None, stamp: str) -> Session:
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
        for part_id in self._parts.pop(session_id, []):
            self._delete(part_id)
        record = self._sessions.pop(session_id)
        for event in record.log:
            self._event_sessions.pop(event.id, None)
        session = record.session
        owner = session.owner_id
        _remove(self._created[owner], session.id)
        _remove(self._active[owner], _activity_key(session))
        self._counts[owner][_count_key(session)] -= 1
        if session.part_of is not None and session.part_of in self._parts:
            _remove(self._parts[session.part_of], session.id)

    async def list_sessions(self, page: SessionPage) -> list[Session]:
        with self._lock:
            return [r.session for r in self._owner_records(page)]

    async def list_summaries(self, page: SessionPage) -> list[SessionSummary]:
        with self._lock:
            return [self._summary(r) for r in self._owner_records(page)]

    def _owner_records(self, page: SessionPage) -> list[_SessionRecord]:
        """Newest first from the cursor on, walking the owner's index: a page costs its
        own rows (and the rows the filter passes over), wherever it starts."""
        records: list[_SessionRecord] = []
        for session_id in self._newest_first(page.owner_id, page.order, page.after):
            record = self._sessions[session_id]
            if _listed(record.session, page.owner_id, page.filter):
                records.append(record)
                if len(records) == page.limit:
                    break
        return records

    def _newest_first(
        self, owner_id: str, order: SessionOrder, after: Keyset | None
    ) -> Iterator[str]:
        if order is SessionOrder.LAST_ACTIVITY:
            by_activity = self._active.get(owner_id, [])
            end = len(by_activity)
            if after is not None:
                end = bisect.bisect_left(
                    by_activity, (after.last_activity_us or 0, after.session_id)
                )
            return (by_activity[i][1] for i in range(end - 1, -1, -1))
        created = self._created.get(owner_id, [])
        end = len(created) if after is None else bisect.bisect_left(created, after.session_id)
        return (created[i] for i in range(end - 1, -1, -1))

    async def count_sessions(self, owner_id: str, filter: SessionFilter) -> int:
        with self._lock:
            return sum(
                count
                for (kind, is_part), count in self._counts.get(owner_id, Counter()).items()
                if (filter.include_parts or not is_part)
                and (filter.kind is None or kind == filter.kind)
            )

    async def find_part(self, part_of: str, held_with: str) -> Session | None:
        with self._lock:
            return self._find(part_of, held_with)

    def _find(self, part_of: str, held_with: str) -> Session | None:
        # Parts are kept in id order, so the first match is the earliest.
        for part_id in self._parts.get(part_of, ()):
            part = self._sessions[part_id].session
            if part.held_with == held_with:
                return part
        return None

    async def list_parts(self, part_of: str) -> list[SessionSummary]:
        with self._lock:
            return [self._summary(self._sessions[i]) for i in self._parts.get(part_of, ())]

    def _summary(self, record: _SessionRecord) -> SessionSummary:
        owner_id = record.session.owner_id
        return SessionSummary(
            session=record.session,
            owner=None if owner_id is None else self._users.get(owner_id),
            message_count=record.message_count,
            started_by=None if record.started_by is None else self._users.get(record.started_by),
        )

    async def participants(self, session_id: str) -> list[User]:
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

    async def remove_indexed_key(self, key: str) -> bool:
        with self._lock:
            indexed = key in self._indexed_keys
            self._indexed_keys -= {key}
            return indexed

    async def find_sessions_by_metadata(self, name: str, value: str) -> list[Session]:
        with self._lock:
            if name not in self._indexed_keys:
                return []
            found = [
                r.session
                for r in self._sessions.values()
                if name in r.session.metadata and index_value(r.session.metadata[name]) == value
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

    async def append(self, append: PreparedAppend) -> AppendOutcome:
        with self._lock:
            record = self._record(append.session_id)
            self._check_users(append.users_to_insert, append.required_user_ids)
            session = record.session
            if append.expected_version is not None and session.version != append.expected_version:
                return AppendOutcome(applied=False)
            for prepared in append.events:
                owner = self._event_sessions.get(prepared.event.id)
                if owner is None:
                    continue
                if owner == append.session_id and append.expected_version is None:
                    stored = record.log[record.positions[prepared.event.id]]
                    return AppendOutcome(applied=False, events=[stored])
                raise EventIdConflictError(
                    f"event id {prepared.event.id!r} is already used"
                    + ("" if owner == append.session_id else " by another session")
                )
            self._insert_users(append.users_to_insert)
            events: list[Event] = []
            for offset, prepared in enumerate(append.events, start=1):
                event = replace(prepared.event, seq=len(record.log) + offset)
                events.append(event)
                if isinstance(event, Message) and event.author_id is not None:
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
            if last_activity != session.last_activity_at:
                by_activity = self._active[session.owner_id]
                _remove(by_activity, _activity_key(session))
                bisect.insort(by_activity, _activity_key(record.session))
            return AppendOutcome(applied=True, events=events)

    async def version(self, session_id: str) -> int:
        with self._lock:
            record = self._sessions.get(session_id)
            return 0 if record is None else record.session.version

    async def read(self, session_id: str, event_filter: EventFilter) -> list[Event]:
        with self._lock:
            record = self._sessions.get(session_id)
            if record is None:
                return []
            view = _View.of(record) if event_filter.active_view else _View(record.log)
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
            if not isinstance(event, Message):
                return False
            record.log[index] = replace(event, narration=text, stamp=stamp)
            return True

    def _record(self, session_id: str) -> _SessionRecord:
        record = self._sessions.get(session_id)
        if record is None:
            raise SessionNotFoundError(f"no session {session_id!r}")
        return record

    # ---------------------------------------------------------------- vectors and text

    async def vector_index_spec(self) -> VectorIndexSpec | None:
        return self._vector_spec

    async def declare_vector_index(self, spec: VectorIndexSpec, *, replace: bool) -> None:
        with self._lock:
            if replace or self._vector_spec is None:
                self._vector_spec = spec

    def _messages(self) -> list[Message]:
        return [
            event
            for record in self._sessions.values()
            for event in record.log
            if isinstance(event, Message)
        ]

    def _pending(self, model: str, roles: Sequence[Role]) -> list[Message]:
        return sorted(
            (
                m
                for m in self._messages()
                if m.role in roles and m.content.strip() and m.embedding_model != model
            ),
            key=lambda m: m.id,
        )

    async def pending_embeddings(
        self, model: str, roles: Sequence[Role], after: str | None, limit: int
    ) -> list[PendingEmbedding]:
        with self._lock:
            pending = [m for m in self._pending(model, roles) if after is None or m.id > after]
            return [
                PendingEmbedding(m.id, m.session_id, m.role, m.content) for m in pending[:limit]
            ]

    async def count_pending_embeddings(self, model: str, roles: Sequence[Role]) -> int:
        with self._lock:
            return len(self._pending(model, roles))

    async def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]]
    ) -> None:
        with self._lock:
            for message_id, vector in vectors:
                session_id = self._event_sessions.get(message_id)
                if session_id is None:
                    continue
                record = self._sessions[session_id]
                index = record.positions[message_id]
                event = record.log[index]
                if isinstance(event, Message):
                    record.log[index] = replace(
                        event, embedding=vector, embedding_model=model, stamp=new_stamp()
                    )

    def _searchable(self, scope: SearchScope) -> list[Message]:
        return [
            event
            for record in self._sessions.values()
            if (scope.owner_id is None or record.session.owner_id == scope.owner_id)
            and (scope.session_id is None or record.session.id == scope.session_id)
            for event in record.log
            if isinstance(event, Message) and (scope.roles is None or event.role in scope.roles)
        ]

    async def vector_search(self, query: VectorQuery) -> list[SearchHit]:
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
        return [SearchHit(candidates[row], score) for row, score in ranked]

    async def text_search(self, query: TextQuery) -> list[SearchHit]:
        with self._lock:
            candidates = self._searchable(query.scope)
        hits: list[SearchHit] = []
        for message in candidates:
            tokens = text_tokens(message.content)
            if not tokens or not all(term in tokens for term in query.terms):
                continue
            # Term frequency damped by length: shorter, denser matches rank higher.
            frequency = sum(tokens.count(term) for term in query.terms)
            hits.append(SearchHit(message, frequency / math.sqrt(len(tokens))))
        hits.sort(key=lambda hit: (-hit.score, hit.message.id))
        return hits[: query.k]


def _listed(session: Session, owner_id: str, filter: SessionFilter) -> bool:
    return (
        session.owner_id == owner_id
        and (filter.include_parts or session.part_of is None)
        and (filter.kind is None or session.kind == filter.kind)
    )


def _activity_key(session: Session) -> _ActivityKey:
    return (to_micros(session.last_activity_at), session.id)


def _count_key(session: Session) -> tuple[str, bool]:
    return (session.kind, session.part_of is not None)


def _remove(ordered: list[Any], item: Any) -> None:
    """Remove ``item`` from the sorted list ``ordered``, found by bisection."""
    index = bisect.bisect_left(ordered, item)
    if index < len(ordered) and ordered[index] == item:
        del ordered[index]


@dataclass(frozen=True, slots=True)
class _View:
    """A log or its active view, read without copying it: ``head`` (the newest boundary's
    summaries, then the events it keeps) then ``log[tail:]`` less ``skip`` (the
    summaries, already in the head).

    A window (``last``, or ``after_seq`` with ``limit``) walks it from the end or from
    the cursor's position and stops when the answer is complete, so it costs the events
    it returns and those the filter passes over, not the length of the log.
    """

    log: Sequence[Event]
    head: Sequence[Event] = ()
    tail: int = 0
    skip: frozenset[str] = frozenset()

    @classmethod
    def of(cls, record: _SessionRecord) -> _View:
        """The active view of a session's log (the whole log when it has no boundary)."""
        if not record.boundaries:
            return cls(record.log)
        at = record.boundaries[-1]
        kept_ids, summaries = compaction_parts(record.log[at], record.log[at + 1 :])
        kept = sorted(
            record.positions[i] for i in set(kept_ids) if record.positions.get(i, at) < at
        )
        return cls(
            record.log,
            head=[*summaries, *(record.log[i] for i in kept)],
            tail=at + 1,
            skip=frozenset(event.id for event in summaries),
        )

    def forward(self, after_seq: int | None) -> Iterator[Event]:
        for event in self.head:
            if after_seq is None or event.seq > after_seq:
                yield event
        # seq n sits at log[n - 1], so the events after a seq start at that index.
        start = self.tail if after_seq is None else max(self.tail, min(after_seq, len(self.log)))
        for index in range(start, len(self.log)):
            event = self.log[index]
            if event.id not in self.skip:
                yield event

    def backward(self) -> Iterator[Event]:
        for index in range(len(self.log) - 1, self.tail - 1, -1):
            event = self.log[index]
            if event.id not in self.skip:
                yield event
        yield from reversed(self.head)

    def answer(self, event_filter: EventFilter) -> list[Event]:
        """What `convostore.filters.apply_filter` answers over this view."""
        if event_filter.last is None:
            matches = (e for e in self.forward(event_filter.after_seq) if event_filter.matches(e))
            if event_filter.limit is None:
                return list(matches)
            return [event for _, event in zip(range(event_filter.limit), matches, strict=False)]
        last = event_filter.last
        newest: list[Event] = []
        if last == 0:
            return newest
        # Past the newest ``last`` matches, walk on to the turn start the window lands
        # in; where none precedes, the window is not extended.
        extend = event_filter.can_match_turn_start
        at_turn_start = False
        for event in self.backward():
            if not event_filter.matches(event):
                continue
            newest.append(event)
            if len(newest) >= last and (not extend or is_turn_start(event)):
                at_turn_start = True
                break
        if not at_turn_start:
            del newest[last:]
        newest.reverse()
        return newest
