"""Re-embedding: every message with no vector or another model's gets one from the new
embedder, in pages, with the backend's index pointed at the new model for the run and
restored after it, however the run ends (see `Store.reembed`)."""

from __future__ import annotations

import logging
from array import array
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from convostore.backends.spi import PendingEmbedding, VectorIndexSpec
from convostore.embedding import Embedder, check_vectors, embedded_roles, should_embed
from convostore.errors import InvalidArgumentError, ReembedIncompleteError
from convostore.ids import new_stamp
from convostore.model import ReembedReport

if TYPE_CHECKING:
    from convostore.store.base import StoreBase

__all__ = ["reembed"]

log = logging.getLogger("convostore.embedding")


async def reembed(
    store: StoreBase,
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
                await store.backend.set_embeddings(spec.model, embedded, new_stamp())
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
