"""Search (vector, text, hybrid by reciprocal rank fusion) and re-embedding."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from convostore.backends.interface import SearchScope, TextQuery, VectorQuery
from convostore.embedding import (
    Embedder,
    ReembedReport,
    VectorIndexSpec,
    check_vectors,
    text_tokens,
)
from convostore.errors import InvalidArgumentError
from convostore.fields import parse_role
from convostore.model import Message, Role, SearchHit, UserRef
from convostore.prepare import check_id, check_vector, user_id_of
from convostore.store.base import StoreBase, filtering
from convostore.store.reembedding import reembed

__all__ = ["MAX_SEARCH_HITS", "SearchMode", "SearchOperations"]

MAX_SEARCH_HITS = 1000
SearchMode = Literal["vector", "text", "hybrid"]
# Reciprocal rank fusion: a hit's fused score is the sum of 1 / (RRF_K + rank).
RRF_K = 60


class SearchOperations(StoreBase):
    """The store's search operations (see `convostore.store.Store`)."""

    async def search(
        self,
        query: str | None = None,
        *,
        vector: Sequence[float] | None = None,
        mode: SearchMode | None = None,
        owner_id: UserRef | None = None,
        session_id: str | None = None,
        k: int = 10,
        roles: Sequence[Role | str] | None = None,
    ) -> list[SearchHit]:
        """Messages that match, best first, at most ``k`` (1..1000).

        ``"vector"`` embeds ``query`` with the store's embedder (or takes ``vector``) and
        ranks the messages that carry a vector of the index's model by similarity;
        ``"text"`` finds messages holding every word of ``query`` (case and accents
        ignored); ``"hybrid"`` fuses both ranks. The default is ``"vector"`` when an
        embedder or a vector is at hand, else ``"text"``. ``owner_id`` keeps to that
        owner's sessions, so no other owner's message can appear; ``session_id`` and
        ``roles`` narrow further. A vector of the wrong width is a `ValueError`.
        """
        self._check_open()
        if mode is None:
            mode = "vector" if vector is not None or (self.embedder and query) else "text"
        if mode not in ("vector", "text", "hybrid"):
            raise InvalidArgumentError(f"unknown search mode {mode!r}")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SEARCH_HITS:
            raise InvalidArgumentError(f"k must be between 1 and {MAX_SEARCH_HITS}")
        scope = SearchScope(
            owner_id=None if owner_id is None else user_id_of(owner_id, "owner_id"),
            session_id=None if session_id is None else check_id(session_id, "session_id"),
            roles=None if roles is None else tuple(parse_role(r) for r in roles),
        )
        if mode == "text":
            return await self._search_text(query, k, scope)
        query_vector = await self._query_vector(query, vector)
        if mode == "vector":
            return await self._search_vector(query_vector, k, scope)
        depth = max(k * 4, 40)
        by_vector = await self._search_vector(query_vector, depth, scope)
        by_text = await self._search_text(query, depth, scope)
        return _fuse([by_vector, by_text], k)

    async def _search_text(self, query: str | None, k: int, scope: SearchScope) -> list[SearchHit]:
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgumentError("text search needs a non-blank query")
        terms = tuple(dict.fromkeys(text_tokens(query)))
        if not terms:
            return []
        return await self.backend.text_search(TextQuery(terms, k, scope))

    async def _search_vector(
        self, vector: tuple[float, ...], k: int, scope: SearchScope
    ) -> list[SearchHit]:
        spec = self.vector_index
        return await self.backend.vector_search(
            VectorQuery(
                vector, spec.metric if spec else "cosine", spec.model if spec else None, k, scope
            )
        )

    async def _query_vector(
        self, query: str | None, vector: Sequence[float] | None
    ) -> tuple[float, ...]:
        width = None if self.vector_index is None else self.vector_index.dimensions
        if vector is not None:
            checked = check_vector(vector)
            if width is not None and len(checked) != width:
                raise InvalidArgumentError(
                    f"the query vector has width {len(checked)}, the vector index {width}"
                )
            return checked
        if self.embedder is None:
            raise InvalidArgumentError("vector search needs a vector, or a store with an embedder")
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgumentError("vector search needs a non-blank query or a vector")
        embedded = await self.embedder.embed([query])
        return check_vectors(embedded, 1, self.embedder.dimensions)[0]

    async def reembed(
        self,
        embedder: Embedder | None = None,
        *,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> ReembedReport:
        """Embed every message that has no vector or another model's, with ``embedder``
        (default: the store's, which it replaces), in pages. A failing batch is split
        down to single messages; a wrong number of vectors is a failed call; after a
        bounded run of failed calls the service is taken for dead. The vector index is
        always restored. Raises `ReembedIncompleteError` naming the messages that
        failed and how many were never tried; a rerun touches only what is pending.
        ``on_progress(done, total)`` is called after each page."""
        self._check_open()
        chosen = self.embedder if embedder is None else filtering(embedder)
        if chosen is None:
            raise InvalidArgumentError("reembed needs an embedder (the store has none)")
        # New messages are embedded with the new model from now on, so the run leaves
        # nothing pending behind it.
        self.embedder = chosen
        self.vector_index = VectorIndexSpec.of(chosen)
        self.vector_index_drift = None
        return await reembed(self, chosen, on_progress=on_progress)


def _fuse(rankings: Sequence[list[SearchHit]], k: int) -> list[SearchHit]:
    """Reciprocal rank fusion of several rankings of messages."""
    scores: dict[str, float] = {}
    messages: dict[str, Message] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.message.id] = scores.get(hit.message.id, 0.0) + 1.0 / (RRF_K + rank)
            messages.setdefault(hit.message.id, hit.message)
    best = sorted(scores, key=lambda message_id: -scores[message_id])[:k]
    return [SearchHit(messages[message_id], scores[message_id]) for message_id in best]
