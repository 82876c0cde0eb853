"""Inline embedding, the vector index, and re-embedding, on every backend."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from convostore import MessageWrite, ReembedIncompleteError, Role, Store
from convostore.embedding import (
    EmbeddingFailed,
    HashingEmbedder,
    RoleFilteringEmbedder,
    VectorIndexSpec,
)
from convostore.testing.fixtures import StoreFactory
from convostore.testing.helpers import ALICE, new_session


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting its calls and the texts it was given; it fails on
    any text that contains one of ``poison``, and on every call while ``dead``."""

    def __init__(self, dimensions: int = 32, *, name: str | None = None) -> None:
        super().__init__(dimensions)
        if name is not None:
            self.name = name
        self.calls = 0
        self.texts: list[str] = []
        self.poison: tuple[str, ...] = ()
        self.dead = False
        self.wrong_width = False
        self.wrong_count = False

    async def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        self.calls += 1
        self.texts.extend(texts)
        if self.dead or any(p in t for t in texts for p in self.poison):
            raise ConnectionError("embedding service unavailable")
        vectors = await super().embed(texts)
        if self.wrong_width:
            return [[*v, 0.0] for v in vectors]
        if self.wrong_count:
            return vectors[:-1]
        return vectors


async def test_messages_are_embedded_inline_before_their_write(
    connect_store: StoreFactory,
) -> None:
    embedder = CountingEmbedder()
    store = await connect_store(embedder=embedder)
    session = await new_session(store)

    user = await store.add_message(session.id, MessageWrite(Role.USER, "the cat sat"))
    system = await store.add_message(session.id, MessageWrite(Role.SYSTEM, "be brief"))
    blank = await store.add_message(session.id, MessageWrite(Role.ASSISTANT, "   "))
    given = await store.add_message(
        session.id,
        MessageWrite(Role.ASSISTANT, "mine", embedding=[1.0] * 32, embedding_model="other"),
    )

    assert user.embedding is not None
    assert len(user.embedding) == 32
    assert user.embedding_model == embedder.name
    assert system.embedding is None
    assert blank.embedding is None
    assert given.embedding_model == "other"
    assert embedder.texts == ["the cat sat"]
    stored = await store.messages(session.id)
    assert stored[0].embedding == user.embedding
    assert stored[0].embedding_model == embedder.name


async def test_a_batch_is_embedded_in_one_call(connect_store: StoreFactory) -> None:
    embedder = CountingEmbedder()
    store = await connect_store(embedder=embedder)
    session = await new_session(store)

    writes = [MessageWrite(Role.USER, f"question {n}") for n in range(5)]
    assert await store.append_events(session.id, writes, expected_version=0)

    assert embedder.calls == 1
    assert all(m.embedding is not None for m in await store.messages(session.id))


@pytest.mark.parametrize("failure", ["raises", "wrong_width", "wrong_count"])
async def test_a_failed_embed_still_saves_the_message(
    connect_store: StoreFactory, failure: str
) -> None:
    embedder = CountingEmbedder()
    if failure == "raises":
        embedder.dead = True
    else:
        setattr(embedder, failure, True)
    store = await connect_store(embedder=embedder)
    failures: list[EmbeddingFailed] = []
    store.on_embedding_failed(failures.append)
    session = await new_session(store)

    message = await store.add_message(session.id, MessageWrite(Role.USER, "hello"))

    assert message.embedding is None
    assert message.embedding_model is None
    [stored] = await store.messages(session.id)
    assert stored.content == "hello"
    assert stored.embedding is None
    assert len(failures) == 1
    assert failures[0].session_id == session.id
    assert failures[0].message_id == message.id
    assert failures[0].role is Role.USER
    assert isinstance(failures[0].cause, Exception)


async def test_a_raising_failure_listener_breaks_nothing(connect_store: StoreFactory) -> None:
    embedder = CountingEmbedder()
    embedder.dead = True
    store = await connect_store(embedder=embedder)
    seen: list[EmbeddingFailed] = []

    def broken(failure: EmbeddingFailed) -> None:
        raise RuntimeError("listener bug")

    store.on_embedding_failed(broken)
    store.on_embedding_failed(seen.append)
    session = await new_session(store)

    await store.add_message(session.id, MessageWrite(Role.USER, "hello"))

    assert len(seen) == 1
    assert len(await store.messages(session.id)) == 1


async def test_the_vector_index_is_declared_from_the_embedder(
    connect_store: StoreFactory,
) -> None:
    embedder = CountingEmbedder(48)
    store = await connect_store(embedder=embedder)
    assert store.vector_index == VectorIndexSpec(48, "cosine", embedder.name)
    assert store.vector_index_drift is None


async def test_another_width_is_reported_as_drift_never_dropped(
    connect_store: StoreFactory,
) -> None:
    store = await connect_store(embedder=CountingEmbedder(48))
    if not store.capabilities.persistent:
        pytest.skip("the backend keeps nothing after close, so no index outlives a store")
    session = await new_session(store)
    await store.add_message(session.id, MessageWrite(Role.USER, "kept across reconnects"))

    again = await connect_store(embedder=CountingEmbedder(48))
    assert again.vector_index_drift is None
    narrower = await connect_store(embedder=CountingEmbedder(16, name="narrow"))
    assert narrower.vector_index_drift is not None
    assert "48" in narrower.vector_index_drift
    # Drift is reported, never repaired by dropping: the old vectors are still there.
    [message] = await narrower.messages(session.id)
    assert message.embedding is not None
    assert len(message.embedding) == 48


async def test_reembed_fills_in_what_is_missing_and_a_rerun_touches_nothing(
    connect_store: StoreFactory,
) -> None:
    embedder = CountingEmbedder()
    embedder.dead = True
    store = await connect_store(embedder=embedder)
    session = await new_session(store)
    for n in range(7):
        await store.add_message(session.id, MessageWrite(Role.USER, f"message {n}"))
    await store.add_message(session.id, MessageWrite(Role.SYSTEM, "never embedded"))
    embedder.dead = False
    embedder.calls = 0

    report = await store.reembed()

    assert report.messages == 7
    messages = await store.messages(session.id)
    assert all(m.embedding is not None for m in messages if m.role is not Role.SYSTEM)
    calls = embedder.calls
    again = await store.reembed()
    assert again.messages == 0
    assert embedder.calls == calls


async def test_reembed_with_a_new_model_recreates_the_index(connect_store: StoreFactory) -> None:
    store = await connect_store(embedder=CountingEmbedder(32, name="model-a"))
    session = await new_session(store)
    for n in range(5):
        await store.add_message(session.id, MessageWrite(Role.USER, f"message {n}"))

    report = await store.reembed(CountingEmbedder(24, name="model-b"))

    assert report.messages == 5
    assert report.index_recreated
    assert store.vector_index == VectorIndexSpec(24, "cosine", "model-b")
    for message in await store.messages(session.id):
        assert message.embedding_model == "model-b"
        assert message.embedding is not None
        assert len(message.embedding) == 24
    # New messages now get the new model's vectors.
    fresh = await store.add_message(session.id, MessageWrite(Role.USER, "after"))
    assert fresh.embedding_model == "model-b"


async def test_reembed_splits_a_failing_batch_down_to_the_bad_messages(
    connect_store: StoreFactory,
) -> None:
    store = await connect_store()
    session = await new_session(store)
    for n in range(20):
        text = f"poison {n}" if n in (3, 11) else f"fine {n}"
        await store.add_message(session.id, MessageWrite(Role.USER, text))
    embedder = CountingEmbedder()
    embedder.poison = ("poison",)

    with pytest.raises(ReembedIncompleteError) as raised:
        await store.reembed(embedder)

    messages = await store.messages(session.id)
    bad = {m.id for m in messages if m.content.startswith("poison")}
    assert set(raised.value.failed_message_ids) == bad
    assert raised.value.not_attempted == 0
    assert raised.value.report.messages == 18
    assert all(m.embedding is not None for m in messages if m.id not in bad)

    # A rerun tries only the two that are still pending.
    embedder.poison = ()
    embedder.texts.clear()
    report = await store.reembed(embedder)
    assert report.messages == 2
    assert sorted(embedder.texts) == ["poison 11", "poison 3"]


async def test_reembed_gives_up_on_a_dead_service(connect_store: StoreFactory) -> None:
    store = await connect_store()
    session = await new_session(store)
    for n in range(300):
        await store.add_message(session.id, MessageWrite(Role.USER, f"message {n}"))
    embedder = CountingEmbedder()
    embedder.dead = True

    with pytest.raises(ReembedIncompleteError) as raised:
        await store.reembed(embedder)

    assert embedder.calls <= 10
    error = raised.value
    assert error.report.messages == 0
    assert len(error.failed_message_ids) + error.not_attempted == 300
    assert error.not_attempted > 0
    # The index is restored even though the run failed.
    assert store.vector_index == VectorIndexSpec.of(embedder)


async def test_reembed_counts_a_wrong_number_of_vectors_as_failed(
    connect_store: StoreFactory,
) -> None:
    store = await connect_store()
    session = await new_session(store)
    for n in range(4):
        await store.add_message(session.id, MessageWrite(Role.USER, f"message {n}"))
    embedder = CountingEmbedder()
    embedder.wrong_count = True

    with pytest.raises(ReembedIncompleteError):
        await store.reembed(embedder)

    assert all(m.embedding is None for m in await store.messages(session.id))


async def test_a_custom_message_filter_replaces_the_default(connect_store: StoreFactory) -> None:
    inner = CountingEmbedder()
    store = await connect_store(embedder=RoleFilteringEmbedder(inner, roles=[Role.ASSISTANT]))
    session = await new_session(store, ALICE)

    user = await store.add_message(session.id, MessageWrite(Role.USER, "not me"))
    assistant = await store.add_message(session.id, MessageWrite(Role.ASSISTANT, "me"))

    assert user.embedding is None
    assert assistant.embedding is not None
    assert inner.texts == ["me"]


async def test_reembed_without_any_embedder_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="embedder"):
        await store.reembed()


async def test_only_messages_with_words_wait_for_a_vector(store: Store) -> None:
    """Whitespace only, as str.strip() sees it (tabs, newlines, no-break and ideographic
    spaces, line separators), is blank everywhere: such messages wait for no vector."""
    session = await new_session(store)
    for content in ("\n\t", "\u00a0\u3000", "  ", "", "\u3000\n\x1c ", "\u2028", "word"):
        await store.add_message(session.id, MessageWrite(Role.USER, content))
    assert await store.backend.count_pending_embeddings("m", tuple(Role)) == 1
    pending = await store.backend.pending_embeddings("m", (Role.USER,), None, 10)
    assert [p.content for p in pending] == ["word"]
    embedder = CountingEmbedder()
    assert (await store.reembed(embedder)).messages == 1
    assert embedder.texts == ["word"]
