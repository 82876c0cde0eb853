"""The Cypher layer without a server: what FalkorDB's dialect writes, how a distance
becomes a score, and that every query takes its values as parameters."""

from __future__ import annotations

import math
import re

import pytest

from convostore.backends.cypher import queries as q
from convostore.backends.cypher.dialect import FALKORDB
from convostore.model import SessionOrder


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


def _queries() -> list[str]:
    composed = q.CypherQueries(FALKORDB)
    texts = [value for name, value in vars(q).items() if name.isupper() and isinstance(value, str)]
    texts += [composed.append, composed.set_embeddings]
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
