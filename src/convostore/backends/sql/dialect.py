"""What a SQL backend says about its database's SQL: how a parameter is written, and
how a time and a vector travel. The rest of `convostore.backends.sql` is written once
against it."""

from __future__ import annotations

from collections.abc import Callable
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
      of long values compares the digest, then the value).
    """

    name: str
    param: Callable[[str, str | None], str]
    time_param: Callable[[datetime], Any]
    rows: RowReader
    index_hint: Callable[[str], str] = lambda index: ""
    count_sessions: Callable[[bool, bool], str | None] = lambda include_parts, by_kind: None
    value_equals: Callable[[str, str], str] = lambda column, marker: f"{column} = {marker}"

    def p(self, name: str, sql_type: str | None = None) -> str:
        """Shorthand for ``param``."""
        return self.param(name, sql_type)
