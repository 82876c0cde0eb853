"""Embedders and re-embedding."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ReembedReport"]


@dataclass(frozen=True, slots=True)
class ReembedReport:
    """What `Store.reembed` did: how many messages it embedded, and whether it
    recreated the vector index."""

    messages: int
    index_recreated: bool
