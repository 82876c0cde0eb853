"""Vector, text and hybrid search, on every backend."""

from __future__ import annotations

import pytest

from convostore import InvalidArgumentError, MessageWrite, Role, Store, User
from convostore.embedding import HashingEmbedder
from convostore.testing.fixtures import StoreFactory
from convostore.testing.helpers import ALICE, BOB, new_session

CORPUS = [
    (Role.USER, "How do I reset my router password?"),
    (Role.ASSISTANT, "Hold the router reset button for ten seconds to restore the password."),
    (Role.USER, "What is the capital of France?"),
    (Role.ASSISTANT, "Paris is the capital of France."),
    (Role.USER, "Recommend a recipe with lentils and spinach."),
    (Role.ASSISTANT, "Try a lentil and spinach curry with cumin."),
    (Role.SYSTEM, "You are a helpful assistant about routers."),
]


async def _seed(store: Store, owner: User = ALICE) -> str:
    session = await new_session(store, owner)
    for role, text in CORPUS:
        await store.add_message(session.id, MessageWrite(role, text))
    return session.id


@pytest.fixture
async def searchable(connect_store: StoreFactory) -> Store:
    return await connect_store(embedder=HashingEmbedder(64))


async def test_vector_search_ranks_related_messages_first(searchable: Store) -> None:
    await _seed(searchable)

    hits = await searchable.search("router password reset", k=3)

    assert len(hits) == 3
    assert {h.message.content for h in hits[:2]} == {CORPUS[0][1], CORPUS[1][1]}
    assert hits[0].score >= hits[1].score >= hits[2].score


async def test_a_query_vector_is_searched_as_given(searchable: Store) -> None:
    await _seed(searchable)
    embedder = HashingEmbedder(64)
    [vector] = await embedder.embed(["Paris is the capital"])

    hits = await searchable.search(vector=vector, k=2)

    assert hits[0].message.content == "Paris is the capital of France."
    assert hits[1].message.content == "What is the capital of France?"
    assert 1.0 >= hits[0].score > hits[1].score > 0.0


async def test_a_vector_of_the_wrong_width_is_refused(searchable: Store) -> None:
    await _seed(searchable)
    with pytest.raises(ValueError, match="width"):
        await searchable.search(vector=[0.1] * 63)


async def test_search_never_leaks_another_owners_messages(searchable: Store) -> None:
    mine = await _seed(searchable, ALICE)
    await _seed(searchable, BOB)

    for mode in ("vector", "text", "hybrid"):
        hits = await searchable.search("router password", mode=mode, owner_id="alice", k=50)
        assert hits
        assert {h.message.session_id for h in hits} == {mine}


async def test_search_narrows_by_session_and_role(searchable: Store) -> None:
    first = await _seed(searchable)
    await _seed(searchable)

    hits = await searchable.search("router", session_id=first, roles=["assistant"], k=50)

    assert hits
    assert all(h.message.session_id == first for h in hits)
    assert all(h.message.role is Role.ASSISTANT for h in hits)


async def test_system_messages_carry_no_vector_and_are_not_vector_hits(searchable: Store) -> None:
    session_id = await _seed(searchable)
    stored = await searchable.messages(session_id)
    system = [m for m in stored if m.role is Role.SYSTEM]
    assert system
    assert all(m.embedding is None for m in system)
    hits = await searchable.search("helpful assistant about routers", k=50)
    assert len(hits) == len(stored) - len(system)
    assert all(h.message.role is not Role.SYSTEM for h in hits)


async def test_text_search_needs_every_word_ignoring_case_and_accents(store: Store) -> None:
    session = await new_session(store)
    for text in ["Café au lait", "CAFE noir", "lait de coco", "un café, du lait"]:
        await store.add_message(session.id, MessageWrite(Role.USER, text))

    hits = await store.search("cafe LAIT")

    assert sorted(h.message.content for h in hits) == ["Café au lait", "un café, du lait"]
    assert await store.search("absent words") == []


async def test_text_search_treats_query_syntax_as_plain_words(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, MessageWrite(Role.USER, "alpha OR beta NOT gamma"))
    await store.add_message(session.id, MessageWrite(Role.USER, "alpha only"))

    hits = await store.search('alpha "OR" * NOT: (beta)', mode="text")

    assert [h.message.content for h in hits] == ["alpha OR beta NOT gamma"]


async def test_text_search_ranks_and_limits(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, MessageWrite(Role.USER, "lentils"))
    await store.add_message(
        session.id,
        MessageWrite(Role.USER, "a long message that mentions lentils once among many words"),
    )
    for n in range(5):
        await store.add_message(session.id, MessageWrite(Role.USER, f"lentils {n}"))

    hits = await store.search("lentils", k=3)

    assert len(hits) == 3
    assert hits[0].score >= hits[-1].score
    assert "long message" not in hits[0].message.content


async def test_hybrid_search_fuses_both_ranks(searchable: Store) -> None:
    await _seed(searchable)

    hits = await searchable.search("lentils spinach", mode="hybrid", k=2)

    assert {h.message.content for h in hits} == {CORPUS[4][1], CORPUS[5][1]}


async def test_default_mode_is_text_without_an_embedder(store: Store) -> None:
    await _seed(store)
    hits = await store.search("Paris")
    assert [h.message.content for h in hits] == ["Paris is the capital of France."]
    with pytest.raises(ValueError, match="embedder"):
        await store.search("Paris", mode="vector")


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": "x", "k": 0},
        {"query": "x", "k": 1001},
        {"query": "x", "mode": "fuzzy"},
        {"query": "   ", "mode": "text"},
        {"query": "x", "roles": ["wizard"]},
    ],
)
async def test_bad_search_arguments_are_refused(
    searchable: Store, arguments: dict[str, object]
) -> None:
    with pytest.raises(InvalidArgumentError):
        await searchable.search(**arguments)  # type: ignore[arg-type]


async def test_a_narrowed_vector_search_still_returns_k_hits(searchable: Store) -> None:
    mine = [await new_session(searchable, ALICE) for _ in range(3)]
    for _ in range(3):
        other = await new_session(searchable, BOB)
        for n in range(40):
            await searchable.add_message(other.id, MessageWrite(Role.USER, f"capital {n}"))
    for session in mine:
        for n in range(10):
            await searchable.add_message(session.id, MessageWrite(Role.USER, f"france {n}"))

    hits = await searchable.search("capital france", owner_id="alice", k=25)

    assert len(hits) == 25
    assert {hit.message.session_id for hit in hits} <= {s.id for s in mine}


async def test_without_an_index_a_vector_meets_every_model_of_its_width(store: Store) -> None:
    session = await new_session(store)
    writes = [
        MessageWrite(Role.USER, f"{model} {n}", embedding=vector, embedding_model=model)
        for n in range(4)
        for model, vector in (("a", [1.0, float(n), 0.0]), ("b", [0.0, 1.0, float(n)]))
    ]
    writes += [
        MessageWrite(Role.USER, f"c {n}", embedding=[1.0] * 8, embedding_model="c")
        for n in range(4)
    ]
    await store.append_events(session.id, writes, expected_version=0)
    assert store.vector_index is None

    hits = await store.search(vector=[1.0, 1.0, 1.0], k=1000)

    assert {hit.message.embedding_model for hit in hits} == {"a", "b"}
    assert len(hits) == 8
    narrow = await store.search(vector=[0.5] * 8, k=1000)
    assert [hit.message.embedding_model for hit in narrow] == ["c"] * 4
