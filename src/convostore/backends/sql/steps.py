"""How SQL is run without I/O: an operation written once is a generator that yields
each `Query` it needs run and is sent back the answer; its return value is the
operation's. A backend drives it on its connection, inside its transaction: `drive` on a
blocking DB-API connection (SQLite's threads), `convostore.backends.sql.aio.drive` over
an asyncio `Driver` (MySQL, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

__all__ = ["Query", "RollbackAndReturn", "Steps", "drive"]

T = TypeVar("T")


class RollbackAndReturn(Exception):
    """Raised inside a write transaction to roll it back and return ``value``."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


@dataclass(frozen=True, slots=True)
class Query:
    """One statement to run and what to send back: ``one`` its first row (or None),
    ``all`` its rows, ``count`` the rows it changed, ``many`` nothing (``parameters``
    is a list of rows, run once each), ``insert`` whether it inserted (False where a
    unique key refused the row)."""

    statement: str
    parameters: Any = None
    answer: Literal["one", "all", "count", "many", "insert"] = "one"


Steps = Generator[Query, Any, T]


def drive(
    connection: Any, steps: Steps[T], is_duplicate: Callable[[Exception], bool] = lambda e: False
) -> T:
    """Run ``steps`` on a DB-API connection with ``execute`` and ``executemany``
    (sqlite3's); ``is_duplicate`` tells a unique key's refusal, which leaves the
    transaction going on, from other errors (none, where writes run one at a time)."""
    answer: Any = None
    while True:
        try:
            query = steps.send(answer)
        except StopIteration as done:
            result: T = done.value
            return result
        if query.answer == "many":
            connection.executemany(query.statement, query.parameters)
            answer = None
            continue
        try:
            cursor = connection.execute(query.statement, query.parameters or ())
        except Exception as error:
            if query.answer != "insert" or not is_duplicate(error):
                raise
            answer = False
            continue
        if query.answer == "one":
            answer = cursor.fetchone()
        elif query.answer == "all":
            answer = cursor.fetchall()
        elif query.answer == "count":
            answer = cursor.rowcount
        else:
            answer = True
