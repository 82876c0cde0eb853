"""`GenericSQLBackend`: every primitive run through the shared steps of
`convostore.backends.sql` on a pool's connections. A SQL backend built on it gives its
dialect's statements, its schema, its driver and how it keeps its vectors; MySQL is
one. (PostgreSQL writes its own reads, writes and search as single statements, and
stands on `AsyncSQLBackend` instead.)
"""

from __future__ import annotations

import abc
import functools
import itertools
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Protocol, TypeVar

from convostore._time import to_micros
from convostore.backends import interface, spi
from convostore.backends.sql import appends, writes
from convostore.backends.sql import search as search_steps
from convostore.backends.sql.aio import AsyncSQLBackend, drive
from convostore.backends.sql.appends import AppendStatements
from convostore.backends.sql.event_cache import EventCache
from convostore.backends.sql.reads import LogReads
from convostore.backends.sql.rows import user_values
from convostore.backends.sql.search import SearchStatements
from convostore.backends.sql.writes import SessionWrites
from convostore.filters import EventFilter

__all__ = ["GenericSQLBackend", "VectorKeeping"]

C = TypeVar("C")
T = TypeVar("T")
# A connection type, which a `VectorKeeping` only takes.
C_in = TypeVar("C_in", contravariant=True)
# A write's own function, run on the connection of its transaction.
Write = Callable[..., Awaitable[Any]]


class VectorKeeping(Protocol[C_in]):
    """How a `GenericSQLBackend` keeps and searches its vectors. Every write that adds,
    changes or removes a vector runs through it, in the write's transaction, so what it
    keeps beside the rows (a change feed, an index of the database's own) commits or
    rolls back with them."""

    # Whether a search walks the database's own vector index (`Capabilities`).
    native: bool

    async def append(
        self, connection: C_in, prepared: spi.PreparedAppend, write: Write
    ) -> spi.AppendOutcome:
        """``write(connection, prepared)``, then the vectors it added kept."""

    async def set_embeddings(
        self, connection: C_in, ids: Sequence[str], write: Write, *args: Any
    ) -> None:
        """``write(connection, *args)``, which sets the vectors of messages ``ids``, then
        kept."""

    async def delete_session(self, connection: C_in, session_id: str) -> bool:
        """Delete one session (its events and parts cascade); whether it existed."""

    async def delete_expired(self, connection: C_in, before: int) -> int:
        """Delete the sessions expired at ``before`` (microseconds), each only if it
        still is (its parts go with it); how many."""

    async def declared(
        self,
        connect: Callable[[], AbstractAsyncContextManager[C_in]],
        *,
        replace: bool,
        reembedding: bool,
    ) -> None:
        """After a vector index was declared (``replace``: anew; ``reembedding``: before
        a re-embedding run); ``connect`` opens a connection for the work it starts."""

    async def search(self, connection: C_in, query: interface.VectorQuery) -> list[spi.SearchHit]:
        """The hits of ``query``, in one read snapshot."""

    def clear(self) -> None:
        """Forget what is kept in memory (the store closes)."""


class GenericSQLBackend(AsyncSQLBackend[C]):
    """An `AsyncSQLBackend` whose every primitive runs the shared steps. Beside what
    `AsyncSQLBackend` asks, a subclass sets the statements of the steps in its dialect
    (``writes``, ``appends``, ``reads``, ``search``), ``text_query`` and ``vectors``,
    and gives `_read_snapshot`. Events read are kept decoded in ``event_cache``."""

    writes: SessionWrites
    appends: AppendStatements
    reads: LogReads
    search: SearchStatements
    vectors: VectorKeeping[C]

    def __init__(self, where: str) -> None:
        self._where = where
        self.event_cache = EventCache()

    @staticmethod
    @abc.abstractmethod
    def text_query(terms: tuple[str, ...]) -> str | None:
        """The terms of a text search (`convostore.embedding.text_tokens` words) as the
        ``query`` parameter of ``search.text_matches``; None when nothing can match."""

    @abc.abstractmethod
    def _read_snapshot(self, connection: C) -> AbstractAsyncContextManager[Any]:
        """The block on ``connection`` in one read-only consistent snapshot."""

    async def _snapshot(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``fn(connection, *args)`` in one read snapshot."""
        async with self._connection() as connection, self._read_snapshot(connection):
            return await fn(connection, *args)

    # ---------------------------------------------------------------- users and sessions

    async def put_user(self, user: spi.User) -> None:
        values = user_values(user)
        self._check(values, "the user")
        await self._run(self.driver.execute, self.statements.upsert_user, values)

    async def insert_session(self, new: spi.NewSession, *, if_absent: bool) -> spi.Session | None:
        self._check(self.writes.session_row(new), "the session")
        return await self._write_steps(writes.insert_session, self.writes, new, if_absent)

    async def find_or_insert_part(self, new: spi.NewSession) -> spi.Session:
        self._check(self.writes.session_row(new), "the session")
        return await self._write_steps(writes.find_or_insert_part, self.writes, new)

    async def update_session(self, changes: spi.SessionChanges) -> spi.Session:
        values = (changes.title, changes.metadata_json, changes.session_id, changes.new_stamp)
        self._check(values, "the session")
        return await self._write_steps(writes.update_session, self.writes, changes)

    # Every write that touches a vector runs through ``vectors``, which keeps them.

    async def delete_session(self, session_id: str) -> bool:
        return await self._write(self.vectors.delete_session, session_id)

    async def delete_expired(self, before: datetime) -> int:
        return await self._write(self.vectors.delete_expired, to_micros(before))

    # ---------------------------------------------------------------- the log

    async def append(self, append: spi.PreparedAppend) -> spi.AppendOutcome:
        return await self._write(self.vectors.append, append, self._append)

    async def _append(self, connection: C, append: spi.PreparedAppend) -> spi.AppendOutcome:
        """The shared append (`convostore.backends.sql.appends`), its rows no larger than
        the database takes (`_check`)."""

        def check(rows: Sequence[Sequence[Any]]) -> None:
            self._check(itertools.chain.from_iterable(rows), "the append")

        write = appends.append(self.appends, self.writes, append, check)
        return await drive(self.driver, connection, write)

    async def read(self, session_id: str, event_filter: EventFilter) -> list[spi.Event]:
        decode = functools.partial(self.event_cache.events, reader=self.rows)
        read = self.reads.read_events(session_id, event_filter, decode)
        async with self._connection() as connection:
            if not event_filter.active_view:
                return await drive(self.driver, connection, read)
            # The active view's boundary and later events must agree: one snapshot.
            async with self._read_snapshot(connection):
                return await drive(self.driver, connection, read)

    # ---------------------------------------------------------------- vectors and text

    async def declare_vector_index(self, spec: spi.VectorIndexSpec, *, replace: bool) -> None:
        await self._run(self._steps, self.embeddings.declare_index, spec, replace)
        await self.vectors.declared(self._connection, replace=replace, reembedding=False)

    async def begin_reembed(self, spec: spi.VectorIndexSpec) -> bool:
        if await self.vector_index_spec() == spec:
            return False
        await self._run(self._steps, self.embeddings.declare_index, spec, True)
        await self.vectors.declared(self._connection, replace=True, reembedding=True)
        return True

    async def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]], stamp: str
    ) -> None:
        ids = [message_id for message_id, _ in vectors]
        write = (self._steps, self.embeddings.set_embeddings, model, vectors, stamp)
        await self._write(self.vectors.set_embeddings, ids, *write)

    async def vector_search(self, query: interface.VectorQuery) -> list[spi.SearchHit]:
        return await self._run(self.vectors.search, query)

    async def text_search(self, query: interface.TextQuery) -> list[spi.SearchHit]:
        scope, terms = query.scope, self.text_query(query.terms)
        found = (self.search, terms, query.k, scope.owner_id, scope.session_id, scope.roles)
        return await self._snapshot(self._steps, search_steps.text_search, *found)
