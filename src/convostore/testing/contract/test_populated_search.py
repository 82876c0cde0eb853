"""Search on a database that already holds other owners' data: a search never misses
because a vector index is being built, rebuilt, or holds replaced vectors."""

from __future__ import annotations

import pytest

from convostore import MessageWrite, Role, User
from convostore.embedding import HashingEmbedder
from convostore.testing.fixtures import StoreFactory

CROWD = User("crowd", "Crowd")
FEW = User("few", "Few")
CROWD_SESSIONS = 20
CROWD_MESSAGES = 100


class NamedEmbedder(HashingEmbedder):
    """The hashing embedder under a model name of its own."""

    def __init__(self, name: str, dimensions: int = 16) -> None:
        super().__init__(dimensions)
        self.name = name


@pytest.mark.parametrize("width", [16, 24])
async def test_search_after_reembed_on_a_populated_database_finds_every_match(
    connect_store: StoreFactory, width: int
) -> None:
    store = await connect_store(embedder=NamedEmbedder("m1"))
    for n in range(CROWD_SESSIONS):
        session = await store.create_session(CROWD)
        writes = [
            MessageWrite(Role.USER, f"crowd session {n} line {i} about cats", author=CROWD)
            for i in range(CROWD_MESSAGES)
        ]
        assert await store.append_events(session.id, writes, 0)
    few = await store.create_session(FEW)
    mine = [
        await store.add_message(few.id, MessageWrite(Role.USER, f"few says {i} dogs"))
        for i in range(5)
    ]
    new_model = NamedEmbedder("m2", width)
    report = await store.reembed(new_model)
    total = CROWD_SESSIONS * CROWD_MESSAGES + 5
    assert report.messages == total
    assert report.index_recreated
    vector = new_model.embed_one("few says dogs")

    scoped = await store.search(vector=vector, mode="vector", k=10, session_id=few.id)
    assert sorted(hit.message.id for hit in scoped) == sorted(m.id for m in mine)
    assert all(hit.message.embedding_model == "m2" for hit in scoped)
    owned = await store.search(vector=vector, mode="vector", k=3, owner_id=FEW.id)
    assert len(owned) == 3
    assert {hit.message.id for hit in owned} <= {m.id for m in mine}
    everywhere = await store.search(vector=vector, mode="vector", k=10)
    assert len(everywhere) == 10
    scores = [hit.score for hit in everywhere]
    assert scores == sorted(scores, reverse=True)
    later = await store.add_message(few.id, MessageWrite(Role.USER, "few says dogs again"))
    again = await store.search(vector=vector, mode="vector", k=10, session_id=few.id)
    assert later.id in {hit.message.id for hit in again}
    assert len(again) == 6
