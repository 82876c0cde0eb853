"""`CypherBackend`: the `Backend` primitives over Cypher queries, for every graph backend.

A backend gives a `CypherDialect`, its migrations, and the few methods that speak to
its server: `_connect`, `_run` (a query with its parameters, its rows back, its
driver's errors translated), `_ddl` (a schema statement), `_inventory` (the indexes
the graph has) and `_await_indexes`; everything else is here, lifecycle and schema
included. Each primitive is one query (one transaction where the dialect's
transactions are ``one-query``), except on the rare path that finds out why a write was
refused.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, ClassVar, Final, Self, TypeVar

from convostore._json import index_value
from convostore._time import to_micros
from convostore.backends import decisions, interface, spi
from convostore.backends.cypher import queries as q
from convostore.backends.cypher import schema
from convostore.backends.cypher.dialect import CypherDialect
from convostore.backends.cypher.values import (
    READER,
    append_parameters,
    metadata_entry,
    session_parameters,
    update_parameters,
    user_parameters,
)
from convostore.errors import BackendUnavailableError, StoreError
from convostore.filters import (
    EventFilter,
    apply_filter,
    branch_lineage,
    compaction_parts,
    compose_view,
)

__all__ = ["CypherBackend"]

Rows = list[list[Any]]
Connection = TypeVar("Connection")
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
# A scope (an owner, a session) holding at most this many vectors is searched by its
# exact scan, as a SQL planner would choose: the index's nearest nodes overall, kept to
# the scope, are not always the scope's nearest (measured on Neo4j after a re-embedding:
# 3 to 4 of an owner's 10 hits ranked below the exact 10th).
_EXACT_SCOPE_LIMIT: Final = 10_000


class CypherBackend(interface.Backend):
    """A graph database spoken to in Cypher (see `queries` for the model): a server
    that keeps the graph on disk, with vector and full-text indexes, shared by every
    process that connects to it."""

    capabilities = interface.Capabilities(
        persistent=True, native_vector_index=True, full_text_index=True, cross_process=True
    )
    # The schema's versions, oldest first (see `schema`).
    migrations: ClassVar[Sequence[schema.Migration]]

    def __init__(self, dialect: CypherDialect, where: str) -> None:
        self.dialect = dialect
        self.queries = _queries(dialect)
        self._where = where
        # The vector index the database holds (None: none, or not built yet), and
        # whether it is known to be built: an index still being built is never asked.
        self.native_index: spi.VectorIndexSpec | None = None
        self._native_index_built = False

    # ---------------------------------------------------------------- the server's

    @classmethod
    @abc.abstractmethod
    def for_url(cls, url: str, options: Mapping[str, Any]) -> Self:
        """A backend, not yet connected, for the database ``url`` names."""

    @abc.abstractmethod
    async def _connect(self) -> None:
        """Open the connections (a failure is translated as `_run` translates)."""

    @abc.abstractmethod
    async def _run(self, query: str, parameters: dict[str, Any], *, write: bool) -> Rows:
        """The rows of ``query`` run with ``parameters``; the driver's errors become
        convostore's (`BackendUnavailableError` when the server cannot be reached)."""

    @abc.abstractmethod
    async def _ddl(self, statement: str) -> None:
        """Run one schema statement on its own; an index or constraint that another
        store created meanwhile is taken as done."""

    @abc.abstractmethod
    async def _inventory(self) -> schema.IndexInventory:
        """The indexes the graph has now."""

    async def _await_indexes(self) -> None:
        """Wait until every index is built, where a query of one being built would
        miss what it does not hold yet; by default nothing (a server whose index
        queries fail until then: `_vector_index_ready` keeps a search from them)."""

    def _opened(self, connection: Connection | None) -> Connection:
        """``connection`` (a driver, a pool, a graph) of an open store;
        `BackendUnavailableError` once it is closed."""
        if connection is None:
            raise BackendUnavailableError(f"{self._where}: the store is not open")
        return connection

    @staticmethod
    def _releasing(
        abort: Callable[[Connection], None], connection: Connection | None
    ) -> Callable[[], None] | None:
        """What `release_when_dropped` gives: ``abort`` of the open ``connection``."""
        return None if connection is None else functools.partial(abort, connection)

    async def _schema_reader(self) -> schema.Run:
        """How `pending_migrations` reads the schema without writing."""
        return self._read_query

    # ---------------------------------------------------------------- lifecycle

    @classmethod
    async def open(cls, url: str, **options: Any) -> Self:
        """Connect to the database ``url`` names and migrate its schema."""
        async with interface.closed_on_failure(cls.for_url(url, options)) as backend:
            await backend._connect()
            await backend._migrate()
        return backend

    @classmethod
    async def pending_migrations(cls, url: str, **options: Any) -> list[str]:
        async with interface.closing(cls.for_url(url, options)) as backend:
            await backend._connect()
            reader = await backend._schema_reader()
            return await schema.pending_migrations(reader, cls.migrations, backend._where)

    async def _migrate(self) -> None:
        inventory = await self._inventory()
        record, building = await schema.migrate(
            self._schema_query, self._ddl, inventory, self.migrations, self._where
        )
        if building:
            await self._await_indexes()
        spec = record.vector_index
        if spec is not None and inventory.vector_shape == schema.shape(spec):
            self.native_index = spec

    async def _read_query(self, query: str, parameters: dict[str, Any]) -> Rows:
        return await self._run(query, parameters, write=False)

    async def _schema_query(self, query: str, parameters: dict[str, Any]) -> Rows:
        """A query of the schema's (which may write): `schema.Run`."""
        return await self._run(query, parameters, write=True)

    # ---------------------------------------------------------------- the schema

    async def add_indexed_keys(self, keys: frozenset[str]) -> frozenset[str]:
        return await schema.add_indexed_keys(self._schema_query, keys)

    async def indexed_keys(self) -> frozenset[str]:
        return await schema.indexed_keys(self._read_query)

    async def remove_indexed_key(self, key: str) -> bool:
        return await schema.remove_indexed_key(self._schema_query, key)

    async def vector_index_spec(self) -> spi.VectorIndexSpec | None:
        return (await schema.read_record(self._read_query)).vector_index

    async def declare_vector_index(self, spec: spi.VectorIndexSpec, *, replace: bool) -> None:
        """Record ``spec`` (see `Backend.declare_vector_index`), then make the graph's
        vector index the recorded one's width and metric: dropped and built again when
        they changed. Stored vectors are never dropped."""
        await self._point_vector_index(spec, replace=replace, build=True)

    async def begin_reembed(self, spec: spi.VectorIndexSpec) -> bool:
        """Point the vector index at ``spec``; True when that dropped it. The new index
        is built after the run (`end_reembed`), once over every new vector: cheaper than
        updating it for each, and FalkorDB's skips nodes whose vectors were replaced
        while it was built. Searches meanwhile scan."""
        if await self.vector_index_spec() == spec:
            return False
        await self._point_vector_index(spec, replace=True, build=False)
        return True

    async def _point_vector_index(
        self, spec: spi.VectorIndexSpec, *, replace: bool, build: bool
    ) -> None:
        self.native_index, self._native_index_built = None, False
        recorded = await schema.record_vector_index(self._schema_query, spec, replace=replace)
        built = (await self._inventory()).vector_shape
        if built is not None and (not build or built != schema.shape(recorded)):
            await self._ddl(self.queries.drop_vector_index())
            built = None
        if not build:
            return
        if built is None:
            await self._ddl(self.queries.vector_index(recorded.dimensions, recorded.metric))
            await self._await_indexes()
        self.native_index = recorded

    async def _vector_index_ready(self) -> bool:
        """Whether `native_index` is built; until it is, a vector search scans."""
        if not self._native_index_built:
            self._native_index_built = (await self._inventory()).vector_built
        return self._native_index_built

    # ---------------------------------------------------------------- users

    async def put_user(self, user: spi.User) -> None:
        await self._run(q.PUT_USER, user_parameters(user), write=True)

    async def get_user(self, user_id: str) -> spi.User | None:
        rows = await self._run(q.GET_USER, {"id": user_id}, write=False)
        return READER.user(rows[0]) if rows else None

    async def stats(self) -> interface.DatabaseStats:
        """Counts from the graph; its size is not reported (None)."""
        rows = await self._run(q.DATABASE_STATS, {}, write=False)
        users, sessions, events, messages, vectors = (int(value or 0) for value in rows[0])
        return interface.DatabaseStats(users, sessions, events, messages, vectors, None)

    # ---------------------------------------------------------------- sessions

    async def insert_session(self, new: spi.NewSession, *, if_absent: bool) -> spi.Session | None:
        parameters = session_parameters(new, owner_from_parent=False)
        rows = await self._run(self.queries.insert_session, parameters, write=True)
        ok, existed, missing, parent_found, parent_part_of, parent_owner, _ = rows[0][:7]
        if ok:
            return new.session
        _refuse_session(new, existed, missing, parent_found, parent_part_of, parent_owner)
        decisions.refuse_existing(new.session, if_absent)
        return None

    async def find_or_insert_part(self, new: spi.NewSession) -> spi.Session:
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

    async def get_session(self, session_id: str) -> spi.Session | None:
        rows = await self._run(q.GET_SESSION, {"id": session_id}, write=False)
        return READER.session(rows[0]) if rows else None

    async def update_session(self, changes: spi.SessionChanges) -> spi.Session:
        rows = await self._run(self.queries.update_session, update_parameters(changes), write=True)
        if rows:
            return READER.session(rows[0])
        exists = await self._run(q.SESSION_EXISTS, {"id": changes.session_id}, write=False)
        raise decisions.stale_or_missing(changes.session_id, bool(exists[0][0]))

    async def set_title(self, session_id: str, title: str | None, stamp: str) -> spi.Session:
        parameters = {"id": session_id, "title": title, "stamp": stamp}
        rows = await self._run(q.SET_TITLE, parameters, write=True)
        if not rows:
            raise decisions.missing_session(session_id)
        return READER.session(rows[0])

    async def delete_session(self, session_id: str) -> bool:
        rows = await self._run(q.DELETE_SESSION, {"id": session_id}, write=True)
        return bool(rows)

    async def list_sessions(self, page: interface.SessionPage) -> list[spi.Session]:
        query, parameters = _listing(False, page)
        return [READER.session(row) for row in await self._run(query, parameters, write=False)]

    async def list_summaries(self, page: interface.SessionPage) -> list[spi.SessionSummary]:
        query, parameters = _listing(True, page)
        return [READER.summary(row) for row in await self._run(query, parameters, write=False)]

    async def count_sessions(self, owner_id: str, filter: spi.SessionFilter) -> int:
        query = q.count(filter.include_parts, filter.kind is not None)
        rows = await self._run(query, {"owner_id": owner_id, "kind": filter.kind}, write=False)
        return int(rows[0][0])

    async def find_part(self, part_of: str, held_with: str) -> spi.Session | None:
        parameters = {"part_of": part_of, "held_with": held_with}
        rows = await self._run(q.FIND_PART, parameters, write=False)
        return READER.session(rows[0]) if rows else None

    async def list_parts(self, part_of: str) -> list[spi.SessionSummary]:
        rows = await self._run(q.LIST_PARTS, {"part_of": part_of}, write=False)
        return [READER.summary(row) for row in rows]

    async def participants(self, session_id: str) -> list[spi.User]:
        rows = await self._run(q.PARTICIPANTS, {"id": session_id}, write=False)
        return [user for row in rows if (user := READER.user(row)) is not None]

    async def find_sessions_by_metadata(self, name: str, value: str) -> list[spi.Session]:
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

    async def append(self, append: spi.PreparedAppend) -> spi.AppendOutcome:
        parameters = append_parameters(append)
        for _ in range(_APPEND_ATTEMPTS):
            rows = await self._run(self.queries.append, parameters, write=True)
            if rows:
                first_seq = int(rows[0][0]) - len(append.events) + 1
                return spi.AppendOutcome(
                    applied=True,
                    events=[
                        replace(p.event, seq=first_seq + i) for i, p in enumerate(append.events)
                    ],
                )
            refused = await self._refusal(append, parameters["required_users"])
            if refused is not None:
                return refused
        raise StoreError(f"the append to session {append.session_id!r} kept racing; try again")

    async def _refusal(
        self, append: spi.PreparedAppend, required: list[str]
    ) -> spi.AppendOutcome | None:
        """Why an append wrote nothing, in the order `Backend.append` gives; None when
        nothing is wrong any more (it raced another write)."""
        parameters = {"session_id": append.session_id, "required_users": required}
        version, missing = (await self._run(q.APPEND_REFUSAL, parameters, write=False))[0]
        if version is None:
            raise decisions.missing_session(append.session_id)
        if missing:
            raise decisions.unknown_users(missing)
        if append.expected_version is not None and version != append.expected_version:
            return spi.AppendOutcome(applied=False)
        ids = [p.event.id for p in append.events]
        rows = await self._run(q.EVENTS_WITH_IDS, {"ids": ids}, write=False)
        if not rows:
            return None
        return decisions.replay_or_conflict(append, list(map(READER.event, rows)))

    async def version(self, session_id: str) -> int:
        rows = await self._run(q.SESSION_VERSION, {"id": session_id}, write=False)
        return int(rows[0][0]) if rows else 0

    async def read(self, session_id: str, event_filter: EventFilter) -> list[spi.Event]:
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
        self, model: str, roles: Sequence[spi.Role], after: str | None, limit: int
    ) -> list[spi.PendingEmbedding]:
        parameters = {
            "model": model,
            "roles": [role.value for role in roles],
            "after": after or "",
            "limit": limit,
        }
        rows = await self._run(q.PENDING_PAGE, parameters, write=False)
        return [spi.PendingEmbedding(row[0], row[1], spi.Role(row[2]), row[3]) for row in rows]

    async def count_pending_embeddings(self, model: str, roles: Sequence[spi.Role]) -> int:
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

    async def vector_search(self, query_: interface.VectorQuery) -> list[spi.SearchHit]:
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
        if indexed and any(scope):
            small = self.queries.vector_scan_of_a_small_scope(metric, model is not None, scope)
            rows = await self._run(
                small,
                {**parameters, "most": _EXACT_SCOPE_LIMIT, "counted": _EXACT_SCOPE_LIMIT + 1},
                write=False,
            )
            if rows and int(rows[0][0]) <= _EXACT_SCOPE_LIMIT:
                hits = self._vector_hits(rows, metric)
                hits.sort(key=lambda hit: -hit.score)
                return hits[:k]
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

    def _vector_hits(self, rows: Rows, metric: spi.Metric) -> list[spi.SearchHit]:
        return [
            spi.SearchHit(message, self.dialect.score(metric, float(row[1])))
            for row in rows
            if row[2] is not None and isinstance(message := READER.event(row, 2), spi.Message)
        ]

    async def text_search(self, query: interface.TextQuery) -> list[spi.SearchHit]:
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
            spi.SearchHit(message, float(row[0]))
            for row in rows
            if isinstance(message := READER.event(row, 1), spi.Message)
        ]


# ---------------------------------------------------------------------------- helpers

_QUERIES: dict[str, q.CypherQueries] = {}


def _queries(dialect: CypherDialect) -> q.CypherQueries:
    """One set of queries per dialect for the process (its composed queries are cached)."""
    if dialect.name not in _QUERIES:
        _QUERIES[dialect.name] = q.CypherQueries(dialect)
    return _QUERIES[dialect.name]


def _refuse_session(
    new: spi.NewSession,
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


def _listing(summaries: bool, page: interface.SessionPage) -> tuple[str, dict[str, Any]]:
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


def _active_view(rows: Rows, event_filter: EventFilter) -> list[spi.Event]:
    """The view is composed and filtered here, as `filters.active_view` has it, from
    the newest boundary, the events after it and the events it keeps."""
    boundary_seq = int(rows[0][0])
    events = [READER.event(row, 1) for row in rows]
    kept = [event for event in events if event.seq < boundary_seq]
    boundary = next(event for event in events if event.seq == boundary_seq)
    after = [event for event in events if event.seq > boundary_seq]
    _, summaries = compaction_parts(boundary, after)
    return apply_filter(compose_view(kept, summaries, after), event_filter)
