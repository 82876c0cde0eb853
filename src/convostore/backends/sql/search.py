"""What search runs alike on the backends whose hits are rows found by row id (SQLite,
MySQL), written once without I/O (`steps`): the scope of a search, the text search's
statement, the exact vector search (of a cache's shortlist, or a scan), and the ranked
rows read whole."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from convostore._vectors import best, from_blobs, scores
from convostore.backends import spi
from convostore.backends.sql.dialect import Dialect
from convostore.backends.sql.statements import EVENT_FIELDS, columns
from convostore.backends.sql.steps import Query, Steps
from convostore.backends.sql.values import json_list
from convostore.backends.sql.vector_cache import Rowids
from convostore.model import Message, Role, SearchHit

__all__ = [
    "SearchStatements",
    "hits",
    "ranked",
    "roles_json",
    "scope_parameters",
    "scoped",
    "text_search",
    "vector_search",
]


class SearchStatements:
    """A backend's search statements (events ``e`` joined to sessions ``s``), each row
    found by its ``key`` column (a row id no other row is given):

    - ``scope``: the conditions narrowing to an owner, a session, roles (parameters
      ``owner_id``, ``session_id``, ``roles``: a JSON list), each a fixed fragment, so
      the statements stay a small bounded set;
    - ``text_matches``: row key and score of the messages matching ``query``;
      ``text_order``: its order, best first, and LIMIT ``k``;
    - ``events_by_row``: the row key, then the event's columns, of each row of
      ``rowids`` (a JSON list); ``shortlisted_vectors``: their keys and vectors;
    - ``vector_candidates``: every message's key and vector of the width ``width``
      (bytes), ``by_model`` narrowing it to ``model``'s.
    """

    def __init__(self, dialect: Dialect, key: str, text_matches: str, text_order: str) -> None:
        p, rows = dialect.p, dialect.integers_table(dialect.p("rowids"), "wanted")
        self.reader = dialect.rows
        self.scope = (
            f" AND s.owner_id = {p('owner_id')}",
            f" AND e.session_id = {p('session_id')}",
            f" AND {dialect.within('e.role', p('roles', 'text[]'))}",
        )
        self.text_matches = text_matches
        self.text_order = text_order
        self.events_by_row = (
            f"SELECT e.{key}, {columns(EVENT_FIELDS, 'e.')} FROM {rows}"
            f" JOIN events e ON e.{key} = wanted.value"
        )
        self.shortlisted_vectors = (
            f"SELECT e.{key}, e.embedding FROM {rows} JOIN events e ON e.{key} = wanted.value"
            f" ORDER BY e.{key}"
        )
        self.vector_candidates = (
            f"SELECT e.{key}, e.embedding FROM events e JOIN sessions s ON s.id = e.session_id"
            " WHERE e.type = 'MESSAGE' AND e.embedding IS NOT NULL"
            f" AND length(e.embedding) = {p('width')}"
        )
        self.by_model = f" AND e.embedding_model = {p('model')}"
        self.by_row = f" ORDER BY e.{key}"


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


def vector_search(
    s: SearchStatements,
    vector: Sequence[float],
    metric: spi.Metric,
    model: str | None,
    k: int,
    scope: tuple[str | None, str | None, Sequence[Role] | None],
    shortlisted: Rowids | None,
) -> Steps[list[SearchHit]]:
    """The k best messages in ``scope`` (owner, session, roles): the ``shortlisted``
    rows (a `convostore.backends.sql.vector_cache.VectorCache`'s) ranked exactly, or,
    without a shortlist, every vector in scope of the query's width (and ``model``)."""
    if shortlisted is None:
        base = s.vector_candidates + ("" if model is None else s.by_model)
        statement = scoped(s, base, *scope) + s.by_row
        parameters = {"width": 4 * len(vector), "model": model, **scope_parameters(*scope)}
        rows = yield Query(statement, parameters, "all")
    elif not shortlisted.shape[0]:
        return []
    else:
        rowids = json.dumps(shortlisted.tolist())
        rows = yield Query(s.shortlisted_vectors, {"rowids": rowids}, "all")
    return (yield from ranked(s, vector, metric, k, rows))


def ranked(
    s: SearchStatements, vector: Sequence[float], metric: spi.Metric, k: int, rows: list[Any]
) -> Steps[list[SearchHit]]:
    """The k best of (row id, float32 vector) ``rows`` (in row order), ranked exactly as
    every scanning backend ranks (`convostore._vectors`), read whole."""
    matrix = from_blobs([row[1] for row in rows], len(vector))
    best_k = best(scores(vector, matrix, metric), k)
    return (yield from hits(s, [(rows[index][0], score) for index, score in best_k]))
