"""Embedders and re-embedding."""

from __future__ import annotations

from dataclasses import dataclass

from convostore.model import Role

__all__ = ["EmbeddingFailed", "ReembedReport"]


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
    recreated the vector index."""

    messages: int
    index_recreated: bool
