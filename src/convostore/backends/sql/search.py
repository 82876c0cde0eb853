"""What search runs alike on the backends whose hits are rows found by row id (SQLite,
MySQL), written once without I/O (`steps`): the scope of a search, the text search's
statement, and the ranked rows read whole."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from convostore._vectors import best, from_blobs, scores
from convostore.backends.sql.rows import RowReader
from convostore.backends.sql.steps import Query, Steps
from convostore.backends.sql.values import json_list
from convostore.embedding import Metric
from convostore.model import Message, Role, SearchHit

__all__ = [
    "SearchStatements",
    "hits",
    "ranked",
    "roles_json",
    "scope_parameters",
    "scoped",
    "text_search",
]


@dataclass(frozen=True, slots=True)
class SearchStatements:
    """A backend's search statements (events ``e`` joined to sessions ``s``):

    - ``scope``: the conditions narrowing to an owner, a session, roles (parameters
      ``owner_id``, ``session_id``, ``roles``: a JSON list), each a fixed fragment, so
      the statements stay a small bounded set;
    - ``text_matches``: row id and score of the messages matching ``query``;
      ``text_order``: its order, best first, and LIMIT ``k``;
    - ``events_by_row``: the row id, then the event's columns, of each row of
      ``rowids`` (a JSON list).
    """

    scope: tuple[str, str, str]
    text_matches: str
    text_order: str
    events_by_row: str
    reader: RowReader


def roles_json(roles: Sequence[Role] | None) -> str | None:
    return None if roles is None else json_list(role.value for role in roles)


def scoped(
    s: SearchStatements,
    base: str,
    owner_id: str | None,
    session_id: str | None,
    roles: Sequence[Role] | None,
) -> str:
    chosen = (owner_id is not None, session_id is not None, roles is not None)
    return base + "".join(fragment for fragment, on in zip(s.scope, chosen, strict=True) if on)


def scope_parameters(
    owner_id: str | None, session_id: str | None, roles: Sequence[Role] | None
) -> dict[str, Any]:
    return {"owner_id": owner_id, "session_id": session_id, "roles": roles_json(roles)}


def text_search(
    s: SearchStatements,
    query: str | None,
    k: int,
    owner_id: str | None,
    session_id: str | None,
    roles: Sequence[Role] | None,
) -> Steps[list[SearchHit]]:
    """The k best messages ``query`` (the backend's form of the terms; None: nothing can
    match) finds in scope."""
    if query is None:
        return []
    statement = scoped(s, s.text_matches, owner_id, session_id, roles) + s.text_order
    parameters = {"query": query, "k": k, **scope_parameters(owner_id, session_id, roles)}
    rows = yield Query(statement, parameters, "all")
    return (yield from hits(s, [(row[0], float(row[1])) for row in rows]))


def hits(s: SearchStatements, ranked: list[tuple[int, float]]) -> Steps[list[SearchHit]]:
    """The ranked (row id, score) rows read whole, in rank order."""
    if not ranked:
        return []
    rowids = json.dumps([row_id for row_id, _ in ranked])
    rows = yield Query(s.events_by_row, {"rowids": rowids}, "all")
    messages = {row[0]: s.reader.event(row[1:]) for row in rows}
    return [
        SearchHit(message, score)
        for row_id, score in ranked
        if isinstance(message := messages.get(row_id), Message)
    ]


def ranked(
    s: SearchStatements, vector: Sequence[float], metric: Metric, k: int, rows: list[Any]
) -> Steps[list[SearchHit]]:
    """The k best of (row id, float32 vector) ``rows`` (in row order), ranked exactly as
    every scanning backend ranks (`convostore._vectors`), read whole."""
    matrix = from_blobs([row[1] for row in rows], len(vector))
    best_k = best(scores(vector, matrix, metric), k)
    return (yield from hits(s, [(rows[index][0], score) for index, score in best_k]))
