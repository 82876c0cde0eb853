"""Neo4j 5's `CypherDialect` (5.13 or newer: vector indexes; 5.18: vector functions).

- Indexes have names (``convostore_<label>_<property>``): range indexes for lookups
  and listings, uniqueness constraints for ids (see `schema`), a full-text index with
  Lucene's whitespace analyzer (no stemming or stop words: the tokens are convostore's
  own), and a vector index of the embedder's width and metric.
- The vector index's procedure scores by a similarity of its own; the nodes it gives
  are scored again by the metric's distance, from Neo4j's vector functions. It is
  asked for at least `VECTOR_FETCH_FLOOR` nodes: its search breadth is the number
  asked for, and ten alone miss one true neighbour in ten.
- Transactions are explicit (the driver's managed transactions), and writes
  interleave: a write that checks what it read of a session locks the node first
  (setting and removing a property takes the node's write lock until the commit).
"""

from __future__ import annotations

from typing import Final

from convostore.backends.cypher.dialect import CypherDialect

__all__ = ["FULLTEXT_INDEX", "NEO4J", "VECTOR_FETCH_FLOOR", "VECTOR_INDEX"]

FULLTEXT_INDEX: Final = "convostore_message_search_text"
VECTOR_FETCH_FLOOR: Final = 100
VECTOR_INDEX: Final = "convostore_message_embedding"


NEO4J: Final = CypherDialect(
    name="Neo4j",
    transactions="explicit",
    range_index_template="CREATE RANGE INDEX convostore_{label}_{prop} IF NOT EXISTS"
    " FOR (n:{label}) ON (n.{prop})",
    fulltext_index_template=(
        f"CREATE FULLTEXT INDEX {FULLTEXT_INDEX} IF NOT EXISTS FOR (n:{{label}})"
        " ON EACH [n.{prop}] OPTIONS {{indexConfig: {{`fulltext.analyzer`: 'whitespace'}}}}"
    ),
    fulltext_query_template=(
        f"CALL db.index.fulltext.queryNodes('{FULLTEXT_INDEX}', ${{query}}) YIELD node"
    ),
    vector_index_template=(
        f"CREATE VECTOR INDEX {VECTOR_INDEX} IF NOT EXISTS FOR (n:{{label}}) ON (n.{{prop}})"
        " OPTIONS {{indexConfig: {{`vector.dimensions`: {dimensions},"
        " `vector.similarity_function`: '{metric}'}}}}"
    ),
    drop_vector_index_template=f"DROP INDEX {VECTOR_INDEX} IF EXISTS",
    vector_query_template=(
        f"CALL db.index.vector.queryNodes('{VECTOR_INDEX}',"
        f" CASE WHEN ${{k}} < {VECTOR_FETCH_FLOOR} THEN {VECTOR_FETCH_FLOOR} ELSE ${{k}} END,"
        " {vector}) YIELD node"
        " WITH node, {distance} AS score"
    ),
    vector_value_template="{expression}",
    # The functions give (1 + cos) / 2 and 1 / (1 + d^2); a zero vector's null is a
    # cosine similarity of 0.
    distance_templates={
        "cosine": "coalesce(2.0 - 2.0 * vector.similarity.cosine({left}, {right}), 1.0)",
        "euclidean": "sqrt(1.0 / vector.similarity.euclidean({left}, {right}) - 1.0)",
    },
    lock_template=" SET {alias}._convostore_lock = true REMOVE {alias}._convostore_lock",
    fulltext_separator=" AND ",
)
