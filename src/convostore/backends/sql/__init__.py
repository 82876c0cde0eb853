"""What every SQL backend shares, with no I/O: columns, rows, statements, decisions.

- `tables`: the tables, columns and indexes, described once; `tables.DDL` renders them.
- `statements`: the field lists of ``users``, ``sessions`` and ``events`` and the
  statements every SQL backend runs alike (reads by id, listings and counts, summaries,
  parts, participants, metadata lookups, title, narration, deletes), rendered in a
  dialect by `Statements`.
- `rows`: `RowReader`, rows back to users, sessions, summaries and events, given how
  the dialect reads a time and a vector.
- `decisions`: what a backend decides from what its statements found (a retried append
  or a conflict, stale or missing, a refused parent, unknown users) and the errors.
- `values`: parameters and rows of a schema that keeps times as integer microseconds
  and vectors as float32 blobs (SQLite, MySQL).
- `dialect`: `Dialect`, what a SQL backend says about its SQL.
- `backend`: `SQLBackend`, the primitives written once over three I/O hooks.
- `steps`: operations written once without I/O, as generators of `Query`s a backend
  drives on its connection; written so: `writes` (session writes, metadata keys),
  `reads` (the log's filters, windows and active view), `appends` (the append under
  the session's row lock), `embeddings` (the vector index record, re-embedding),
  `search` (text and exact vector search) and `migrate` (the migration runner,
  `VersionTable`).
- `aio`: what the backends on an asyncio driver share: `Driver`, the transaction runner
  with retries, `AsyncSQLBackend` (the I/O hooks and the connection runner over a
  pool's `_acquire` and `_release`).
- `generic`: `GenericSQLBackend`, every primitive run through the steps, and
  `VectorKeeping`, how such a backend keeps its vectors.

How a new SQL backend plugs in (``convostore.backends.mysql`` is the smallest example):

1. A schema: versioned migrations, the first creating `tables.TABLES` as its
   `tables.DDL` renders them (its type names, table options), and its
   `migrate.VersionTable`; `migrate.migrate` applies them at `open` under its lock.
2. A dialect: ``Dialect(name, param, time_param, rows, ...)``: how a named parameter
   is written (``%(name)s`` for the MySQL drivers), how a time is passed and read
   (``RowReader(time_of, vector_of)``), and where its SQL differs: index hints, its own
   count, the metadata value comparison, the top-level condition, the keyset
   comparison, whether UPDATE has RETURNING, the database's size, a list of strings as
   a table, upserts, row locks. ``STATEMENTS = Statements(DIALECT)`` (a subclass may
   replace a whole statement); ``reads.LogReads``, ``writes.SessionWrites``,
   ``appends.AppendStatements``, ``embeddings.Embeddings`` and
   ``search.SearchStatements`` are made from it with the few fragments that are the
   backend's own (its text match, its insert of a session and of events).
3. On an asyncio driver, a `generic.GenericSQLBackend` subclass: the statements above
   as its class attributes, a `aio.Driver` (how its connection runs a statement and a
   transaction, and which of its errors are retried, lost connections, or refused
   duplicates), the pool's `_acquire` / `_release`, a read snapshot, how its text
   query is written, its `generic.VectorKeeping`, and `open` / `close`: every
   primitive then runs the shared steps. Where its SQL is its own (PostgreSQL's
   single-statement reads and writes), stand on `aio.AsyncSQLBackend` or `SQLBackend`
   and write those primitives; hand what their statements found to `decisions`
   rather than deciding again (`replay_or_conflict`, `stale_or_missing`,
   `check_parent`, `unknown_users`, `refuse_existing`, `event_conditions`, `bounded`).
4. Errors: translate the driver's exceptions where they are caught; only "cannot reach
   or use the database now" is `BackendUnavailableError`, anything else a `StoreError`.
5. One line in `convostore.backends.registry.BUILTIN` (``mysql``/``mariadb`` are there
   already) and one in ``tests/contract/conftest.py``'s ``BACKENDS``; the contract suite
   (`convostore.testing`) then runs on it.
"""

from convostore.backends.sql.backend import SQLBackend
from convostore.backends.sql.dialect import Dialect
from convostore.backends.sql.rows import RowReader
from convostore.backends.sql.statements import Statements

__all__ = ["Dialect", "RowReader", "SQLBackend", "Statements"]
