"""Exact nearest-neighbour ranking, shared by the backends that scan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

from convostore.backends.spi import Metric

Matrix = npt.NDArray[np.float32]
Scores = npt.NDArray[np.float32]

# Rows scored at once for the Euclidean metric, whose difference matrix is a temporary
# as large as the rows it covers: a scan of 100,000 rows then never holds a second copy.
_EUCLIDEAN_CHUNK = 8192


def as_matrix(vectors: Sequence[Sequence[float]], dimensions: int) -> Matrix:
    if not vectors:
        return np.zeros((0, dimensions), dtype=np.float32)
    return np.asarray(vectors, dtype=np.float32).reshape(len(vectors), dimensions)


def from_blobs(blobs: Sequence[bytes], dimensions: int) -> Matrix:
    """Rows of float32 vectors stored as little-endian blobs."""
    if not blobs:
        return np.zeros((0, dimensions), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dimensions)


def row_norms(matrix: Matrix) -> Scores:
    """Each row's Euclidean norm, as `scores` computes it; a row's norm depends on that
    row alone, so norms computed in pieces equal norms computed at once."""
    norms: Scores = np.linalg.norm(matrix, axis=1)
    return norms


def scores(
    query: Sequence[float], matrix: Matrix, metric: Metric, norms: Scores | None = None
) -> Scores:
    """Each row's score against ``query``: cosine similarity, or the negative Euclidean
    distance, so a higher score is always better. ``norms`` are the rows' `row_norms`,
    when known."""
    q = np.asarray(query, dtype=np.float32)
    if metric == "cosine":
        lengths = (row_norms(matrix) if norms is None else norms) * float(np.linalg.norm(q))
        # float32 throughout: a Python float does not widen a float32 array.
        return cast(Scores, (matrix @ q) / np.where(lengths == 0.0, 1.0, lengths))
    if matrix.shape[0] <= _EUCLIDEAN_CHUNK:
        distances: Scores = np.linalg.norm(matrix - q, axis=1)
        return -distances
    return np.concatenate(
        [
            -np.linalg.norm(matrix[start : start + _EUCLIDEAN_CHUNK] - q, axis=1)
            for start in range(0, matrix.shape[0], _EUCLIDEAN_CHUNK)
        ]
    )


def best(scored: Scores, k: int) -> list[tuple[int, float]]:
    """The ``k`` best (row, score), best first."""
    if scored.shape[0] == 0 or k <= 0:
        return []
    count = min(k, scored.shape[0])
    chosen = np.argpartition(-scored, count - 1)[:count]
    chosen = chosen[np.argsort(-scored[chosen], kind="stable")]
    return [(int(row), float(scored[row])) for row in chosen]


def top_k(
    query: Sequence[float], matrix: Matrix, metric: Metric, k: int
) -> list[tuple[int, float]]:
    """The ``k`` rows nearest ``query``, best first, as (row, score): cosine similarity,
    or the negative Euclidean distance, so a higher score is always better."""
    if matrix.shape[0] == 0 or k <= 0:
        return []
    return best(scores(query, matrix, metric), k)
