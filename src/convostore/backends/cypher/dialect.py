"""What differs between Cypher servers, as one object: `CypherDialect`.

The queries of `convostore.backends.cypher.queries` are written once in the Cypher that
FalkorDB, Neo4j 5 and Memgraph share (MATCH, OPTIONAL MATCH, MERGE, FOREACH, UNWIND,
list comprehensions, parameters). What they do not share is here: index DDL, the
full-text and vector procedures, how a vector value is written, and how a transaction
is expressed. FalkorDB's dialect is here, Neo4j's in `convostore.backends.neo4j.dialect`
(its constraints, named range, full-text and vector indexes, a lock before a write
checks what it read, explicit transactions); the notes below are what Memgraph would
need, for whoever adds it once a server to test on is at hand (none runs here, so its
scheme stays reserved).

Memgraph (Bolt, the same ``neo4j`` driver):
- Range indexes: ``CREATE INDEX ON :Label(prop)``; label-property indexes only.
- Full text: ``CREATE TEXT INDEX <name> ON :Message`` (Tantivy), queried with
  ``CALL text_search.search(<name>, $query) YIELD node`` (syntax of its own).
- Vectors: ``CREATE VECTOR INDEX <name> ON :Message(embedding) WITH CONFIG
  {"dimension": d, "capacity": n, "metric": "cos"}`` (capacity must be given), queried
  with ``CALL vector_search.search(<name>, $k, $vector) YIELD node, similarity``.
- Transactions: explicit (``BEGIN``/``COMMIT`` through the driver), under snapshot
  isolation; two writers of one session node conflict and one is retried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final, Literal

from convostore.backends import spi

__all__ = ["FALKORDB", "CypherDialect"]

Transactions = Literal["one-query", "explicit"]


@dataclass(frozen=True, slots=True)
class CypherDialect:
    """How one Cypher server spells what the common queries leave to it.

    Every name that goes into DDL or a procedure call (labels, properties) comes from
    convostore's own constants; a width comes from a checked integer and a metric from
    ``Metric``. Values always travel as parameters.

    - ``transactions``: ``"one-query"`` when each query is its own atomic transaction
      and writes to a graph run one at a time (FalkorDB), so every write operation is
      written as one query; ``"explicit"`` when the driver opens transactions.
    - ``distance_templates``: the functions that score two vectors in a query, by metric
      (for a scan where no vector index serves, and for the nodes a vector index gives),
      each giving a distance.
    - ``lock_template``: the clause that takes a write lock on a node (``{alias}``) before
      a write checks what it read of it; empty where writes never interleave.
    - ``metric_names``: how the vector index's DDL names each metric.
    - ``fulltext_separator``: what joins the quoted terms of a full-text query so that a
      node must hold every one.
    """

    name: str
    transactions: Transactions
    range_index_template: str
    fulltext_index_template: str
    fulltext_query_template: str
    vector_index_template: str
    drop_vector_index_template: str
    vector_query_template: str
    vector_value_template: str
    distance_templates: dict[spi.Metric, str]
    metric_names: dict[spi.Metric, str] = field(
        default_factory=lambda: {"cosine": "cosine", "euclidean": "euclidean"}
    )
    lock_template: str = ""
    fulltext_separator: str = " "

    def range_index(self, label: str, prop: str) -> str:
        """DDL of a range (exact match and range) index on one property."""
        return self.range_index_template.format(label=label, prop=prop)

    def fulltext_index(self, label: str, prop: str) -> str:
        """DDL of the full-text index over whitespace-separated tokens: no stemming, no
        stop words, so a query term matches exactly the tokens convostore wrote."""
        return self.fulltext_index_template.format(label=label, prop=prop)

    def fulltext_query(self, label: str, query_parameter: str) -> str:
        """A clause yielding ``node`` for each node whose tokens match the query."""
        return self.fulltext_query_template.format(label=label, query=query_parameter)

    def fulltext_terms(self, terms: tuple[str, ...]) -> str:
        """The query text that asks for nodes holding every term, each exactly."""
        return self.fulltext_separator.join(f'"{term}"' for term in terms)

    def vector_index(self, label: str, prop: str, dimensions: int, metric: spi.Metric) -> str:
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
            raise ValueError(f"a vector index needs a positive width, not {dimensions!r}")
        return self.vector_index_template.format(
            label=label, prop=prop, dimensions=dimensions, metric=self.metric_names[metric]
        )

    def drop_vector_index(self, label: str, prop: str) -> str:
        return self.drop_vector_index_template.format(label=label, prop=prop)

    def vector_query(
        self, label: str, prop: str, k_parameter: str, vector_parameter: str, metric: spi.Metric
    ) -> str:
        """A clause yielding ``node`` and ``score`` (a distance) for the nearest nodes.
        A template whose procedure gives a similarity of its own scores the nodes with
        ``{distance}``, the metric's distance from each node's vector to the query's."""
        vector = self.vector_value("$" + vector_parameter)
        return self.vector_query_template.format(
            label=label,
            prop=prop,
            k=k_parameter,
            vector=vector,
            distance=self.distance(metric, f"node.{prop}", vector),
        )

    def lock(self, alias: str) -> str:
        """A clause (empty, or with a leading space) that write-locks the node ``alias``
        until the transaction ends; a null ``alias`` locks nothing."""
        return self.lock_template.format(alias=alias)

    def vector_value(self, expression: str) -> str:
        """An expression turning a list of floats into a stored vector."""
        return self.vector_value_template.format(expression=expression)

    def distance(self, metric: spi.Metric, left: str, right: str) -> str:
        """An expression of the distance between two vectors (lower is nearer)."""
        return self.distance_templates[metric].format(left=left, right=right)

    @staticmethod
    def score(metric: spi.Metric, distance: float) -> float:
        """A distance as convostore scores it, higher is better: cosine similarity
        (1 - cosine distance), or the negative Euclidean distance. A zero vector has no
        direction: its similarity is 0."""
        if math.isnan(distance):
            return 0.0
        return 1.0 - distance if metric == "cosine" else -distance


FALKORDB: Final = CypherDialect(
    name="FalkorDB",
    transactions="one-query",
    range_index_template="CREATE INDEX FOR (n:{label}) ON (n.{prop})",
    fulltext_index_template=(
        "CALL db.idx.fulltext.createNodeIndex({{label: '{label}', stopwords: [],"
        " language: 'english'}}, {{field: '{prop}', nostem: true}})"
    ),
    # Quoted terms match verbatim (no stemming expansion at query time).
    fulltext_query_template="CALL db.idx.fulltext.queryNodes('{label}', ${query}) YIELD node",
    vector_index_template=(
        "CREATE VECTOR INDEX FOR (n:{label}) ON (n.{prop}) OPTIONS {{dimension: {dimensions},"
        " similarityFunction: '{metric}', M: 16, efConstruction: 200, efRuntime: 100}}"
    ),
    drop_vector_index_template="DROP VECTOR INDEX FOR (n:{label}) ON (n.{prop})",
    vector_query_template=(
        "CALL db.idx.vector.queryNodes('{label}', '{prop}', ${k}, {vector}) YIELD node, score"
    ),
    vector_value_template="vecf32({expression})",
    distance_templates={
        "cosine": "vec.cosineDistance({left}, {right})",
        "euclidean": "vec.euclideanDistance({left}, {right})",
    },
)
