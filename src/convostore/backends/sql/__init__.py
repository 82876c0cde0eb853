"""What every SQL backend shares, with no I/O: columns, rows, statements, decisions.

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

How a new SQL backend plugs in (``convostore.backends.mysql`` is the smallest example):

1. A schema: versioned migrations creating the tables named in `statements` (with the
   columns of `USER_FIELDS`, `SESSION_FIELDS`, `EVENT_FIELDS`, plus ``sessions.last_seq``,
   ``message_count``, ``started_by``; ``participants``; ``session_metadata``;
   ``indexed_metadata_keys``; the vector index record), recorded in a table and applied
   at `open`, refusing a newer schema (`SchemaVersionError`).
2. A dialect: ``Dialect(name, param, time_param, rows, ...)``: how a named parameter
   is written (``%(name)s`` for the MySQL drivers), how a time is passed and read
   (``RowReader(time_of, vector_of)``), and where its SQL differs: index hints, its own
   count, the metadata value comparison, the top-level condition, the keyset
   comparison, whether UPDATE has RETURNING, the database's size.
   ``STATEMENTS = Statements(DIALECT)`` (a subclass may replace a whole statement).
3. A `SQLBackend` subclass: ``statements = STATEMENTS``; the I/O hooks `_fetch_all`,
   `_changed`, `_returning` (where the database has no RETURNING, run the UPDATE then
   the SELECT in one transaction); `open` / `close`; and the primitives whose SQL is
   its own: `put_user`, `insert_session`, `find_or_insert_part`, `update_session`,
   `append`, `read`, `add_indexed_keys` / `remove_indexed_key`, the vector index and
   search primitives. Hand what the statements found to `decisions` rather than
   deciding again (`replay_or_conflict`, `stale_or_missing`, `check_parent`,
   `unknown_users`, `refuse_existing`, `event_conditions`, `bounded`).
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
