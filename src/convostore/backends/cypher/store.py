"""`CypherBackend`: the `Backend` primitives over Cypher queries, for every graph backend.

A backend gives a `CypherDialect` and one method, `_run`, that runs a query with its
parameters and returns its rows (translating its driver's errors); everything else is
here. Each primitive is one query (one transaction where the dialect's transactions
are ``one-query``), except on the rare path that finds out why a write was refused.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Final

from convostore._json import index_value
from convostore._time import to_micros
from convostore.backends import decisions
from convostore.backends.cypher import queries as q
from convostore.backends.cypher.dialect import CypherDialect
from convostore.backends.cypher.values import (
    READER,
    append_parameters,
    metadata_entry,
    session_parameters,
    update_parameters,
    user_parameters,
)
from convostore.backends.interface import (
    Backend,
    DatabaseStats,
    SessionPage,
    TextQuery,
    VectorQuery,
)
from convostore.backends.spi import (
    AppendOutcome,
    Metric,
    NewSession,
    PendingEmbedding,
    PreparedAppend,
    SessionChanges,
    VectorIndexSpec,
)
from convostore.errors import (
    StoreError,
)
from convostore.filters import (
    EventFilter,
    apply_filter,
    branch_lineage,
    compaction_parts,
    compose_view,
)
from convostore.model import (
    Event,
    Message,
    Role,
    SearchHit,
    Session,
    SessionFilter,
    SessionSummary,
    User,
)

__all__ = ["CypherBackend"]

Rows = list[list[Any]]
# An append that wrote nothing although nothing was wrong when it was looked into (a
# session, user or event that appeared or went in between) is tried again this often.
_APPEND_ATTEMPTS: Final = 3
# Integers are signed 64-bit; a window bound beyond 2**62 bounds nothing (and leaves
# room for a sum of two).
_MAX_INTEGER: Final = 2**62
# FalkorDB's LIMIT takes 32 bits: a window of more events than that is the whole log.
_MAX_LIMIT: Final = 2**31 - 1
# How many more nodes each further ask of the vector index fetches, when its scope
# kept fewer than k of those it gave.
_FETCH_GROWTH: Final = 4


class CypherBackend(Backend):
    """A graph database spoken to in Cypher (see `queries` for the model)."""

    def __init__(self, dialect: CypherDialect) -> None:
        self.dialect = dialect
        self.queries = _queries(dialect)
        # The vector index the database holds (None: none), as `_declare_vector_index`
        # last saw it.
        self.native_index: VectorIndexSpec | None = None

    async def _vector_index_ready(self) -> bool:
        """Whether `native_index` answers queries now; until it does (it is being
        built), a vector search scans exactly."""
        return True

    @abc.abstractmethod
    async def _run(self, query: str, parameters: dict[str, Any], *, write: bool) -> Rows:
        """The rows of ``query`` run with ``parameters``; the driver's errors become
        convostore's (`BackendUnavailableError` when the server cannot be reached)."""

    # ---------------------------------------------------------------- users

    async def put_user(self, user: User) -> None:
        await self._run(q.PUT_USER, user_parameters(user), write=True)

    async def get_user(self, user_id: str) -> User | None:
        rows = await self._run(q.GET_USER, {"id": user_id}, write=False)
        return READER.user(rows[0]) if rows else None

    async def stats(self) -> DatabaseStats:
        """Counts from the graph; its size is not reported (None)."""
        rows = await self._run(q.DATABASE_STATS, {}, write=False)
        users, sessions, events, messages, vectors = (int(value or 0) for value in rows[0])
        return DatabaseStats(users, sessions, events, messages, vectors, None)

    # ---------------------------------------------------------------- sessions

    async def insert_session(self, new: NewSession, *, if_absent: bool) -> Session | None:
        parameters = session_parameters(new, owner_from_parent=False)
        rows = await self._run(self.queries.insert_session, parameters, write=True)
        ok, existed, missing, parent_found, parent_part_of, parent_owner, _ = rows[0][:7]
        if ok:
            return new.session
        _refuse_session(new, existed, missing, parent_found, parent_part_of, parent_owner)
        decisions.refuse_existing(new.session, if_absent)
        return None

    async def find_or_insert_part(self, new: NewSession) -> Session:
        # Writes to a graph run one at a time, so no other part can appear between the
        # look and the insert: every caller settles on the earliest part.
        parameters = session_parameters(new, owner_from_parent=True)
        rows = await self._run(self.queries.find_or_insert_part, parameters, write=True)
        row = rows[0]
        ok, existed, missing, parent_found, parent_part_of, parent_owner, owner = row[:7]
        if row[7] is not None:
            return READER.session(row[7:])
        new = decisions.owned_by_parent(new, (owner, parent_part_of) if parent_found else None)
        if ok:
            return new.session
        _refuse_session(new, existed, missing, parent_found, parent_part_of, parent_owner)
        decisions.refuse_existing(new.session, False)
        raise AssertionError("unreachable")  # pragma: no cover

    async def get_session(self, session_id: str) -> Session | None:
        rows = await self._run(q.GET_SESSION, {"id": session_id}, write=False)
        return READER.session(rows[0]) if rows else None

    async def update_session(self, changes: SessionChanges) -> Session:
        rows = await self._run(self.queries.update_session, update_parameters(changes), write=True)
        if rows:
            return READER.session(rows[0])
        exists = await self._run(q.SESSION_EXISTS, {"id": changes.session_id}, write=False)
        raise decisions.stale_or_missing(changes.session_id, bool(exists[0][0]))

    async def set_title(self, session_id: str, title: str | None, stamp: str) -> Session:
        parameters = {"id": session_id, "title": title, "stamp": stamp}
        rows = await self._run(q.SET_TITLE, parameters, write=True)
        if not rows:
            raise decisions.missing_session(session_id)
        return READER.session(rows[0])

    async def delete_session(self, session_id: str) -> bool:
        rows = await self._run(q.DELETE_SESSION, {"id": session_id}, write=True)
        return bool(rows)

    async def list_sessions(self, page: SessionPage) -> list[Session]:
        query, parameters = _listing(False, page)
        return [READER.session(row) for row in await self._run(query, parameters, write=False)]

    async def list_summaries(self, page: SessionPage) -> list[SessionSummary]:
        query, parameters = _listing(True, page)
        return [READER.summary(row) for row in await self._run(query, parameters, write=False)]

    async def count_sessions(self, owner_id: str, filter: SessionFilter) -> int:
        query = q.count(filter.include_parts, filter.kind is not None)
        rows = await self._run(query, {"owner_id": owner_id, "kind": filter.kind}, write=False)
        return int(rows[0][0])

    async def find_part(self, part_of: str, held_with: str) -> Session | None:
        parameters = {"part_of": part_of, "held_with": held_with}
        rows = await self._run(q.FIND_PART, parameters, write=False)
        return READER.session(rows[0]) if rows else None

    async def list_parts(self, part_of: str) -> list[SessionSummary]:
        rows = await self._run(q.LIST_PARTS, {"part_of": part_of}, write=False)
        return [READER.summary(row) for row in rows]

    async def participants(self, session_id: str) -> list[User]:
        rows = await self._run(q.PARTICIPANTS, {"id": session_id}, write=False)
        return [user for row in rows if (user := READER.user(row)) is not None]

    async def find_sessions_by_metadata(self, name: str, value: str) -> list[Session]:
        entry = metadata_entry(name, value)
        rows = await self._run(q.SESSIONS_BY_METADATA, {"entry": entry}, write=False)
        # The index holds digests: the values themselves are compared here.
        sessions = [READER.session(row) for row in rows]
        return [
            s for s in sessions if name in s.metadata and index_value(s.metadata[name]) == value
        ]

    async def delete_expired(self, before: datetime) -> int:
        rows = await self._run(
            self.queries.delete_expired, {"before": to_micros(before)}, write=True
        )
        return int(rows[0][0]) if rows else 0

    # ---------------------------------------------------------------- the log

    async def append(self, append: PreparedAppend) -> AppendOutcome:
        parameters = append_parameters(append)
        for _ in range(_APPEND_ATTEMPTS):
            rows = await self._run(self.queries.append, parameters, write=True)
            if rows:
                first_seq = int(rows[0][0]) - len(append.events) + 1
                return AppendOutcome(
                    applied=True,
                    events=[
                        replace(p.event, seq=first_seq + i) for i, p in enumerate(append.events)
                    ],
                )
            refused = await self._refusal(append, parameters["required_users"])
            if refused is not None:
                return refused
        raise StoreError(f"the append to session {append.session_id!r} kept racing; try again")

    async def _refusal(self, append: PreparedAppend, required: list[str]) -> AppendOutcome | None:
        """Why an append wrote nothing, in the order `Backend.append` gives; None when
        nothing is wrong any more (it raced another write)."""
        parameters = {"session_id": append.session_id, "required_users": required}
        version, missing = (await self._run(q.APPEND_REFUSAL, parameters, write=False))[0]
        if version is None:
            raise decisions.missing_session(append.session_id)
        if missing:
            raise decisions.unknown_users(missing)
        if append.expected_version is not None and version != append.expected_version:
            return AppendOutcome(applied=False)
        ids = [p.event.id for p in append.events]
        rows = await self._run(q.EVENTS_WITH_IDS, {"ids": ids}, write=False)
        if not rows:
            return None
        return decisions.replay_or_conflict(append, list(map(READER.event, rows)))

    async def version(self, session_id: str) -> int:
        rows = await self._run(q.SESSION_VERSION, {"id": session_id}, write=False)
        return int(rows[0][0]) if rows else 0

    async def read(self, session_id: str, event_filter: EventFilter) -> list[Event]:
        if event_filter.last == 0 or event_filter.limit == 0:
            return []
        if event_filter.active_view:
            rows = await self._run(q.ACTIVE_VIEW_PARTS, {"session_id": session_id}, write=False)
            if rows:
                return _active_view(rows, event_filter)
        query, parameters = _read_query(session_id, event_filter)
        return [READER.event(row) for row in await self._run(query, parameters, write=False)]

    async def set_narration(
        self, session_id: str, message_id: str, text: str | None, stamp: str
    ) -> bool:
        parameters = {
            "session_id": session_id,
            "message_id": message_id,
            "text": text,
            "stamp": stamp,
        }
        rows = await self._run(q.SET_NARRATION, parameters, write=True)
        return bool(rows) and int(rows[0][0]) > 0

    # ---------------------------------------------------------------- embeddings

    async def pending_embeddings(
        self, model: str, roles: Sequence[Role], after: str | None, limit: int
    ) -> list[PendingEmbedding]:
        parameters = {
            "model": model,
            "roles": [role.value for role in roles],
            "after": after or "",
            "limit": limit,
        }
        rows = await self._run(q.PENDING_PAGE, parameters, write=False)
        return [PendingEmbedding(row[0], row[1], Role(row[2]), row[3]) for row in rows]

    async def count_pending_embeddings(self, model: str, roles: Sequence[Role]) -> int:
        parameters = {"model": model, "roles": [role.value for role in roles]}
        rows = await self._run(q.COUNT_PENDING, parameters, write=False)
        return int(rows[0][0])

    async def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]], stamp: str
    ) -> None:
        items = [
            {"id": message_id, "vector": list(vector), "stamp": stamp}
            for message_id, vector in vectors
        ]
        await self._run(self.queries.set_embeddings, {"model": model, "items": items}, write=True)

    async def vector_search(self, query_: VectorQuery) -> list[SearchHit]:
        vector, metric, model, k = query_.vector, query_.metric, query_.model, query_.k
        owner_id, session_id, roles = (
            query_.scope.owner_id,
            query_.scope.session_id,
            query_.scope.roles,
        )
        index = self.native_index
        indexed = (
            index is not None
            and model == index.model
            and len(vector) == index.dimensions
            and metric == index.metric
            and await self._vector_index_ready()
        )
        scope = (owner_id is not None, session_id is not None, roles is not None)
        query = self.queries.vector_search(indexed, metric, model is not None, scope)
        parameters: dict[str, Any] = {
            "vector": list(vector),
            "width": len(vector),
            "model": model,
            "owner_id": owner_id,
            "session_id": session_id,
            "roles": None if roles is None else [role.value for role in roles],
            "k": k,
            "fetch": k if not any(scope) else max(k * _FETCH_GROWTH, 40),
        }
        while True:
            rows = await self._run(query, parameters, write=False)
            hits = self._vector_hits(rows, metric)
            fetched = int(rows[0][0]) if rows else 0
            if not indexed or len(hits) >= k:
                break
            if fetched < parameters["fetch"]:
                # The index gave fewer nodes than asked and fewer than k in scope: it
                # holds no more, or it is still being built, or it skips nodes whose
                # vectors were replaced (FalkorDB after a re-embedding). Only the exact
                # scan of the scope can tell: a search never misses for the index.
                scan = self.queries.vector_search(False, metric, model is not None, scope)
                hits = self._vector_hits(await self._run(scan, parameters, write=False), metric)
                break
            parameters["fetch"] *= _FETCH_GROWTH
        hits.sort(key=lambda hit: -hit.score)
        return hits[:k]

    def _vector_hits(self, rows: Rows, metric: Metric) -> list[SearchHit]:
        return [
            SearchHit(message, self.dialect.score(metric, float(row[1])))
            for row in rows
            if row[2] is not None and isinstance(message := READER.event(row, 2), Message)
        ]

    async def text_search(self, query: TextQuery) -> list[SearchHit]:
        terms, k = query.terms, query.k
        owner_id, session_id, roles = (
            query.scope.owner_id,
            query.scope.session_id,
            query.scope.roles,
        )
        scope = (owner_id is not None, session_id is not None, roles is not None)
        parameters = {
            "query": self.dialect.fulltext_terms(terms),
            "terms": list(terms),
            "owner_id": owner_id,
            "session_id": session_id,
            "roles": None if roles is None else [role.value for role in roles],
            "k": k,
        }
        rows = await self._run(self.queries.text_search(scope), parameters, write=False)
        return [
            SearchHit(message, float(row[0]))
            for row in rows
            if isinstance(message := READER.event(row, 1), Message)
        ]


# ---------------------------------------------------------------------------- helpers

_QUERIES: dict[str, q.CypherQueries] = {}


def _queries(dialect: CypherDialect) -> q.CypherQueries:
    """One set of queries per dialect for the process (its composed queries are cached)."""
    if dialect.name not in _QUERIES:
        _QUERIES[dialect.name] = q.CypherQueries(dialect)
    return _QUERIES[dialect.name]


def _refuse_session(
    new: NewSession,
    existed: bool,
    missing: list[str],
    parent_found: bool,
    parent_part_of: str | None,
    parent_owner: str | None,
) -> None:
    """Raise what refused an insert, in the order the contract gives the checks; return
    when only the id was taken."""
    if existed:
        return
    if missing:
        raise decisions.unknown_users(missing)
    decisions.check_parent(new.session, (parent_owner, parent_part_of) if parent_found else None)


def _listing(summaries: bool, page: SessionPage) -> tuple[str, dict[str, Any]]:
    after, filter = page.after, page.filter
    query = q.listing(
        summaries, page.order, filter.include_parts, filter.kind is not None, after is not None
    )
    parameters = {
        "owner_id": page.owner_id,
        "kind": filter.kind,
        "after_id": None if after is None else after.session_id,
        "after_at": None if after is None else after.last_activity_us,
        "limit": page.limit,
    }
    return query, parameters


def _bounded(value: int | None) -> int | None:
    return None if value is None else min(value, _MAX_INTEGER)


def _conditions(event_filter: EventFilter) -> tuple[bool, ...]:
    return tuple(
        event_filter.exclude_synthetic
        if name == "exclude_synthetic"
        else getattr(event_filter, name) is not None
        for name, _ in q.EVENT_CONDITIONS
    )


def _read_query(session_id: str, f: EventFilter) -> tuple[str, dict[str, Any]]:
    conditions = _conditions(f)
    used = {name for (name, _), on in zip(q.EVENT_CONDITIONS, conditions, strict=True) if on}
    parameters: dict[str, Any] = {
        "session_id": session_id,
        "types": None if f.types is None else list(f.types),
        "roles": None if f.roles is None else [str(role) for role in f.roles],
        "lineage": None if f.branch is None else list(branch_lineage(f.branch)),
        "since": None if f.since is None else to_micros(f.since),
        "until": None if f.until is None else to_micros(f.until),
        "text": None if f.text is None else f.text.lower(),
        "after_seq": _bounded(f.after_seq),
        "limit": None if f.limit is None else min(f.limit, _MAX_LIMIT),
        "last": None if f.last is None else min(f.last, _MAX_LIMIT),
    }
    if f.last is None:
        # The seq values of a log have no gaps: a page of the unfiltered log is a range.
        bounded = used <= {"after_seq"} and f.limit is not None
        if bounded:
            parameters["upto"] = min((f.after_seq or 0) + f.limit, _MAX_INTEGER)  # type: ignore[operator]
        return q.forward(conditions, bounded, f.limit is not None), parameters
    transparent = used <= q.TURN_TRANSPARENT and f.can_match_turn_start
    return q.last(conditions, not used, transparent), parameters


def _active_view(rows: Rows, event_filter: EventFilter) -> list[Event]:
    """The view is composed and filtered here, as `filters.active_view` has it, from
    the newest boundary, the events after it and the events it keeps."""
    boundary_seq = int(rows[0][0])
    events = [READER.event(row, 1) for row in rows]
    kept = [event for event in events if event.seq < boundary_seq]
    boundary = next(event for event in events if event.seq == boundary_seq)
    after = [event for event in events if event.seq > boundary_seq]
    _, summaries = compaction_parts(boundary, after)
    return apply_filter(compose_view(kept, summaries, after), event_filter)
