"""Exact nearest-neighbour ranking, shared by the backends that scan."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from convostore.embedding import Metric

Matrix = npt.NDArray[np.float32]


def as_matrix(vectors: Sequence[Sequence[float]], dimensions: int) -> Matrix:
    if not vectors:
        return np.zeros((0, dimensions), dtype=np.float32)
    return np.asarray(vectors, dtype=np.float32).reshape(len(vectors), dimensions)


def from_blobs(blobs: Sequence[bytes], dimensions: int) -> Matrix:
    """Rows of float32 vectors stored as little-endian blobs."""
    if not blobs:
        return np.zeros((0, dimensions), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dimensions)


def top_k(
    query: Sequence[float], matrix: Matrix, metric: Metric, k: int
) -> list[tuple[int, float]]:
    """The ``k`` rows nearest ``query``, best first, as (row, score): cosine similarity,
    or the negative Euclidean distance, so a higher score is always better."""
    if matrix.shape[0] == 0 or k <= 0:
        return []
    q = np.asarray(query, dtype=np.float32)
    if metric == "cosine":
        norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(q))
        scores = (matrix @ q) / np.where(norms == 0.0, 1.0, norms)
    else:
        scores = -np.linalg.norm(matrix - q, axis=1)
    count = min(k, scores.shape[0])
    best = np.argpartition(-scores, count - 1)[:count]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [(int(row), float(scores[row])) for row in best]
