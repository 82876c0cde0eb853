"""What a SQL backend says about its database's SQL: how a parameter is written, and
how a time and a vector travel. The rest of `convostore.backends.sql` is written once
against it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from convostore.backends.sql.rows import RowReader

__all__ = ["Dialect"]


@dataclass(frozen=True, slots=True)
class Dialect:
    """One SQL dialect.

    - ``param(name, sql_type)``: the marker of the named parameter ``name`` (``:name``
      for sqlite3, ``%(name)s`` for psycopg), with a cast to ``sql_type`` where the
      database cannot infer it (``sql_type`` is one of ``text``, ``bigint``,
      ``timestamptz``; a dialect that needs no cast ignores it).
    - ``time_param``: a time as a parameter; ``rows``: rows back to values (how a time
      and a vector are read).
    - ``index_hint(name)``: what follows ``FROM sessions s`` to make a listing walk the
      index ``name`` (see `convostore.backends.sql.statements.LISTING_INDEXES`); empty
      where the planner needs no hint.
    - ``count_sessions(include_parts, by_kind)``: the statement that counts an owner's
      sessions, or None for the plain ``count(*)`` over ``sessions``.
    - ``value_equals(column, marker)``: the condition that an indexed metadata value
      equals a parameter, in full, using the index (a dialect whose index holds a digest
      or a prefix of long values compares that, then the value).
    - ``top_level``: the condition on a ``sessions`` row that it is not a part, as the
      listing indexes hold it (``part_of IS NULL`` where they are partial indexes).
    - ``keyset_before(a, b, x, y)``: the condition that ``(a, b)`` sorts before ``(x,
      y)``, in a form the planner walks as one index range (a row comparison by default).
    - ``returning``: whether an UPDATE can end with RETURNING. Where it cannot, the
      statement is rendered without it and `SQLBackend._returning` reads the row back
      in the same transaction.
    - ``database_size``: an expression of the bytes the store's tables take, or NULL.
    - ``strings``: a list of strings as one parameter (an array, or JSON text);
      ``no_limit``: the LIMIT parameter that limits nothing.
    - ``strings_table(marker, alias)``: such a parameter as a table ``alias`` of one
      column ``value``; ``in_strings(column, marker)``: the condition that a column's
      value is among them, where it is not ``IN (SELECT value FROM`` that table ``)``;
      ``integers(marker, alias)``: the same table of a JSON list of integers, where it
      differs.
    - ``marker``: a positional parameter's marker; ``for_update``: what makes a SELECT
      lock its rows until commit (nothing where writes run one at a time).
    - ``keep_existing(column)``: what ends an INSERT so that a row whose unique key is
      taken leaves the stored row as it is (changing nothing, counting 0);
      ``replace_existing(key, columns)``: so that it sets those columns of the stored row.
    - ``share_indexed_keys`` and ``lock_indexed_keys``: how the metadata index stays
      whole whatever interleaves (see `convostore.backends.sql.statements`). A session
      write that indexes metadata runs ``share_indexed_keys`` in its transaction before
      it reads the keys the database indexes; a key add or drop runs
      ``lock_indexed_keys`` first in its own. The two conflict and two writes' shares do
      not, so a key change waits for every write in flight to commit and every later
      write waits for the key change, then reads the keys it committed. No
      ``share_indexed_keys`` where write transactions run one at a time anyway
      (SQLite), or where the statement that writes the entries takes a conflicting lock
      itself before its snapshot (PostgreSQL: ROW EXCLUSIVE on ``session_metadata``).
      ``deletes_lock_entries``: what begins a statement that deletes sessions so that it
      takes the lock a key change conflicts with before it locks any session row (where
      the delete's cascade would take it only after), so that a key change's backfill
      may wait for the row locks it meets (PostgreSQL).
    """

    name: str
    param: Callable[[str, str | None], str]
    time_param: Callable[[datetime], Any]
    rows: RowReader
    index_hint: Callable[[str], str] = lambda index: ""
    count_sessions: Callable[[bool, bool], str | None] = lambda include_parts, by_kind: None
    value_equals: Callable[[str, str], str] = lambda column, marker: f"{column} = {marker}"
    top_level: str = "part_of IS NULL"
    keyset_before: Callable[[str, str, str, str], str] = lambda a, b, x, y: (
        f"({a}, {b}) < ({x}, {y})"
    )
    returning: bool = True
    database_size: str = "NULL"
    strings: Callable[[Iterable[str]], Any] = list
    no_limit: int | None = None
    share_indexed_keys: str | None = None
    lock_indexed_keys: str | None = None
    strings_table: Callable[[str, str], str] = lambda marker, alias: (
        f"unnest({marker}) AS {alias} (value)"
    )
    in_strings: Callable[[str, str], str] | None = None
    integers: Callable[[str, str], str] | None = None
    marker: str = "%s"
    for_update: str = " FOR UPDATE"
    keep_existing: Callable[[str], str] = lambda column: " ON CONFLICT DO NOTHING"
    replace_existing: Callable[[str, tuple[str, ...]], str] = lambda key, columns: (
        f" ON CONFLICT ({key}) DO UPDATE SET "
        + ", ".join(f"{column} = excluded.{column}" for column in columns)
    )
    deletes_lock_entries: str = ""

    def p(self, name: str, sql_type: str | None = None) -> str:
        """Shorthand for ``param``."""
        return self.param(name, sql_type)

    def insert(
        self,
        table: str,
        fields: tuple[str, ...],
        rows: int = 1,
        values: Mapping[str, str] | None = None,
    ) -> str:
        """The INSERT of ``rows`` rows of ``fields`` into ``table``, each row's values
        positional parameters in the order of ``fields``; ``values`` gives a field's
        value expression in place of the bare marker (it holds one marker)."""
        given = values or {}
        row = "(" + ", ".join(given.get(field, self.marker) for field in fields) + ")"
        return f"INSERT INTO {table} ({', '.join(fields)}) VALUES " + ", ".join([row] * rows)

    def integers_table(self, marker: str, alias: str) -> str:
        """A parameter of integers as a table ``alias`` of one column ``value``."""
        if self.integers is not None:
            return self.integers(marker, alias)
        return self.strings_table(marker, alias)

    def within(self, column: str, marker: str) -> str:
        """The condition that ``column`` is among the strings of a parameter."""
        if self.in_strings is not None:
            return self.in_strings(column, marker)
        return f"{column} IN (SELECT value FROM {self.strings_table(marker, 'listed')})"
