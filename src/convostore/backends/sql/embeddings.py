"""The vector index record and re-embedding, written once as `Steps` over statements
rendered in a dialect: the declared index (one row of ``vector_index``), the messages
waiting for a vector of a model, and the vectors set."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from convostore.backends import spi
from convostore.backends.sql.dialect import Dialect
from convostore.backends.sql.steps import Query, Steps
from convostore.model import Role

__all__ = ["SELECT_VECTOR_INDEX", "Embeddings"]

SELECT_VECTOR_INDEX: Final = "SELECT dimensions, metric, model FROM vector_index WHERE id = 1"


class Embeddings:
    """The statements in one dialect. ``non_blank``: the condition that a message's
    content holds a character `str.strip` keeps (with ``non_blank_parameters``);
    ``vector``: a vector as a parameter."""

    def __init__(
        self,
        dialect: Dialect,
        non_blank: str,
        *,
        non_blank_parameters: dict[str, Any] | None = None,
        vector: Callable[[tuple[float, ...]], Any] = list,
    ) -> None:
        p = dialect.p
        self.dialect = dialect
        self.vector = vector
        self.non_blank_parameters = non_blank_parameters or {}
        record = (
            "INSERT INTO vector_index (id, dimensions, metric, model)"
            f" VALUES (1, {p('dimensions')}, {p('metric')}, {p('model')})"
        )
        # The exact scan needs no index structure: the record is the index's declaration.
        self.declare = record + dialect.keep_existing("id")
        self.replace = record + dialect.replace_existing("id", ("dimensions", "metric", "model"))
        # Messages with no vector of a model, of some roles, with non-blank content.
        where = (
            " WHERE type = 'MESSAGE' AND (embedding_model IS NULL OR embedding_model <> "
            f"{p('model')}) AND {dialect.within('role', p('roles', 'text[]'))}"
            f" AND {non_blank}"
        )
        # Keyset by id: every page starts where the last ended, so a whole run reads each
        # row once even though embedded rows leave the pending set behind it.
        self.pending_page = (
            f"SELECT id, session_id, role, content FROM events{where}"
            f" AND id > {p('after')} ORDER BY id LIMIT {p('limit')}"
        )
        self.count_pending_statement = f"SELECT count(*) FROM events{where}"
        self.set_embedding = (
            f"UPDATE events SET embedding = {p('embedding')}, embedding_model = {p('model')},"
            f" stamp = {p('stamp')} WHERE id = {p('id')} AND type = 'MESSAGE'"
        )

    def spec(self) -> Steps[spi.VectorIndexSpec | None]:
        row = yield Query(SELECT_VECTOR_INDEX)
        return None if row is None else spi.VectorIndexSpec(int(row[0]), row[1], row[2])

    def declare_index(self, spec: spi.VectorIndexSpec, replace: bool) -> Steps[None]:
        parameters = {"dimensions": spec.dimensions, "metric": spec.metric, "model": spec.model}
        yield Query(self.replace if replace else self.declare, parameters, "count")

    def _pending_parameters(self, model: str, roles: Sequence[Role]) -> dict[str, Any]:
        roles_parameter = self.dialect.strings(role.value for role in roles)
        return {"model": model, "roles": roles_parameter, **self.non_blank_parameters}

    def pending(
        self, model: str, roles: Sequence[Role], after: str | None, limit: int
    ) -> Steps[list[spi.PendingEmbedding]]:
        parameters = self._pending_parameters(model, roles) | {"after": after or "", "limit": limit}
        rows = yield Query(self.pending_page, parameters, "all")
        return [spi.PendingEmbedding(row[0], row[1], Role(row[2]), row[3]) for row in rows]

    def count_pending(self, model: str, roles: Sequence[Role]) -> Steps[int]:
        row = yield Query(self.count_pending_statement, self._pending_parameters(model, roles))
        return int(row[0])

    def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]], stamp: str
    ) -> Steps[None]:
        rows = [
            {"embedding": self.vector(vector), "model": model, "stamp": stamp, "id": id_}
            for id_, vector in vectors
        ]
        if rows:
            yield Query(self.set_embedding, rows, "many")
