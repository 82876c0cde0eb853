"""The Cypher layer without a server: what FalkorDB's and Neo4j's dialects write, how a
distance becomes a score, and that every query takes its values as parameters."""

from __future__ import annotations

import math
import re

import pytest

from convostore.backends.cypher import queries as q
from convostore.backends.cypher.dialect import FALKORDB, CypherDialect
from convostore.model import SessionOrder


def _neo4j() -> CypherDialect:
    pytest.importorskip("neo4j")
    from convostore.backends.neo4j.dialect import NEO4J

    return NEO4J


def test_index_ddl_comes_from_constants_and_checked_numbers() -> None:
    assert FALKORDB.range_index("Event", "seq") == "CREATE INDEX FOR (n:Event) ON (n.seq)"
    ddl = FALKORDB.vector_index("Message", "embedding", 384, "euclidean")
    assert "dimension: 384" in ddl
    assert "similarityFunction: 'euclidean'" in ddl
    with pytest.raises(ValueError, match="width"):
        FALKORDB.vector_index("Message", "embedding", 0, "cosine")
    assert "nostem: true" in FALKORDB.fulltext_index("Message", "search_text")


def test_full_text_terms_are_each_matched_exactly() -> None:
    assert FALKORDB.fulltext_terms(("router", "reset")) == '"router" "reset"'


def test_a_distance_becomes_a_score_where_higher_is_better() -> None:
    assert FALKORDB.score("cosine", 0.25) == 0.75
    assert FALKORDB.score("euclidean", 5.0) == -5.0
    # A zero vector has no direction: FalkorDB's distance is NaN, its similarity 0.
    assert FALKORDB.score("cosine", math.nan) == 0.0


def test_falkordb_takes_no_lock_and_neo4j_locks_before_it_reads() -> None:
    falkordb = q.CypherQueries(FALKORDB)
    for text in (falkordb.append, falkordb.update_session, falkordb.delete_expired):
        assert "lock" not in text
    assert falkordb.find_or_insert_part == q.FIND_OR_INSERT_PART
    neo4j = q.CypherQueries(_neo4j())
    lock = " SET s._convostore_lock = true REMOVE s._convostore_lock"
    # The append locks its session before it reads the version it checks.
    assert neo4j.append.index(lock) < neo4j.append.index("s.version = $expected_version")
    assert neo4j.update_session.index(lock) < neo4j.update_session.index("s.stamp =")
    keyset = "SET keyset._convostore_lock = true"
    assert neo4j.update_session.index(keyset) < neo4j.update_session.index("keyset.indexed")
    assert neo4j.insert_session.index(keyset) < neo4j.insert_session.index("keyset.indexed")
    assert neo4j.find_or_insert_part.startswith("OPTIONAL MATCH (held:Session {id: $part_of})")
    assert lock in neo4j.delete_expired
    assert _neo4j().fulltext_terms(("router", "reset")) == '"router" AND "reset"'


def _queries(dialect: CypherDialect = FALKORDB) -> list[str]:
    composed = q.CypherQueries(dialect)
    texts = [value for name, value in vars(q).items() if name.isupper() and isinstance(value, str)]
    texts += [composed.append, composed.set_embeddings, composed.update_session]
    texts += [composed.insert_session, composed.find_or_insert_part, composed.delete_expired]
    texts += [
        q.listing(summaries, order, parts, kind, paged)
        for summaries in (False, True)
        for order in SessionOrder
        for parts in (False, True)
        for kind in (False, True)
        for paged in (False, True)
    ]
    every = (True,) * len(q.EVENT_CONDITIONS)
    texts += [q.forward(every, False, True), q.last(every, False, False)]
    texts += [composed.vector_search(True, "cosine", True, (True, True, True))]
    texts += [composed.vector_search(False, "euclidean", True, (True, True, True))]
    texts += [composed.text_search((True, True, True))]
    return texts


def test_no_query_holds_a_quoted_value_other_than_its_own_constants() -> None:
    # The only literals are the model's own names ('MESSAGE', 'COMPACTION', 'user', the
    # word separator and the schema key's label) and procedure arguments naming indexes.
    allowed = {"'MESSAGE'", "'COMPACTION'", "'user'", "' '", "'Message'", "'embedding'", "''"}
    for text in _queries():
        assert set(re.findall(r"'[^']*'", text)) <= allowed, text


def test_no_neo4j_query_holds_a_quoted_value_other_than_its_own_constants() -> None:
    dialect = _neo4j()
    allowed = {"'MESSAGE'", "'COMPACTION'", "'user'", "' '", "''"}
    allowed |= {"'convostore_message_embedding'", "'convostore_message_search_text'"}
    for text in _queries(dialect):
        assert set(re.findall(r"'[^']*'", text)) <= allowed, text
