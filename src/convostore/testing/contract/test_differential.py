"""The differential test: the backend, on a database that already holds thousands of
other owners' sessions and vectors, answers every call as the reference (``memory://``)
does (`convostore.testing.differential` says what is compared, and how).

The population (`convostore.testing.populated`) is written once per test session and
backend, on the database of the first test here that runs on that backend, and kept
open on one event loop for every later test. Runs are derandomized, so CI is
reproducible; ``CONVOSTORE_DIFFERENTIAL_EXAMPLES`` sets how many runs (default
`CI_EXAMPLES`), ``CONVOSTORE_DIFFERENTIAL_STEPS`` their length. The scenarios below the
machine replay, step by step, the divergences it found.
"""

from __future__ import annotations

import asyncio
import os
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

import convostore
from convostore import MessageWrite, Role, Session, Store, User
from convostore.embedding import HashingEmbedder, Metric
from convostore.store.base import filtering
from convostore.testing.differential import (
    Lockstep,
    LogDiverged,
    SessionsDiverged,
    World,
    calling,
)
from convostore.testing.fixtures import BackendUnderTest, StoreFactory
from convostore.testing.populated import INDEXED_KEYS, MODELS, populate

CI_EXAMPLES = 10
CI_STEPS = 25


class _NotInline:
    """The population's embedder: it declares the first model's index and embeds
    nothing inline (every message of the population carries its vector, or none on
    purpose)."""

    def __init__(self, model: HashingEmbedder) -> None:
        self.model = model
        self.name = model.name
        self.dimensions = model.dimensions
        self.metric: Metric = model.metric

    def should_embed(self, role: Role, content: str) -> bool:
        return False

    async def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        return await self.model.embed(texts)


@dataclass
class Worlds:
    """The test session's event loop and one `World` per backend, made on first use."""

    loop: asyncio.AbstractEventLoop
    by_backend: dict[str, World] = field(default_factory=dict)

    def of(self, backend: BackendUnderTest) -> World:
        world = self.by_backend.get(backend.name)
        if world is not None and not self.loop.run_until_complete(_still_populated(world)):
            # A backend of one database per server (Neo4j Community) empties it for
            # each test: another test emptied it since.
            self.loop.run_until_complete(world.store.close())
            world = None
        if world is None:
            world = self.by_backend[backend.name] = self.loop.run_until_complete(
                self._make(backend)
            )
        return world

    async def _make(self, backend: BackendUnderTest) -> World:
        store = await convostore.connect(
            backend(), embedder=_NotInline(MODELS[0]), indexed_metadata=INDEXED_KEYS
        )
        populated = await populate(store)
        # From now on the store embeds inline, as the reference does.
        store.embedder = filtering(MODELS[0])
        return World(backend.name, self.loop, populated, MODELS[0])


async def _still_populated(world: World) -> bool:
    """Whether the world's database still holds its population."""
    return (await world.store.stats()).sessions >= world.populated.sessions


@pytest.fixture(scope="session")
def differential_worlds() -> Iterator[Worlds]:
    worlds = Worlds(asyncio.new_event_loop())
    yield worlds
    for world in worlds.by_backend.values():
        worlds.loop.run_until_complete(world.store.close())
    worlds.loop.close()


@pytest.fixture
def world(
    backend: BackendUnderTest, differential_worlds: Worlds, request: pytest.FixtureRequest
) -> World:
    """This backend's populated database (written by the first test that asks)."""
    made = differential_worlds.of(backend)
    request.node.user_properties.append(("population seconds", made.populated.seconds))
    return made


def _count(variable: str, default: int) -> int:
    return int(os.environ.get(variable, "") or default)


def test_the_backend_answers_as_the_reference_does(
    world: World, request: pytest.FixtureRequest
) -> None:
    examples = _count("CONVOSTORE_DIFFERENTIAL_EXAMPLES", CI_EXAMPLES)
    # A known divergence (strict-xfail here) fails at its first step: no shrinking.
    known = request.node.get_closest_marker("xfail") is not None
    run_state_machine_as_test(
        _machine_class(world),
        settings=settings(
            max_examples=examples,
            stateful_step_count=_count("CONVOSTORE_DIFFERENTIAL_STEPS", CI_STEPS),
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate] if known else list(Phase),
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
        ),
    )


def _machine_class(world: World) -> type[Lockstep]:
    return type(f"Lockstep_{world.name}", (Lockstep,), {"world": world})


def _machine(world: World) -> Lockstep:
    return _machine_class(world)()


def _session(machine: Lockstep) -> str:
    _, created = machine.both(
        SessionsDiverged,
        "create_session",
        lambda i, s: s.create_session(machine.owner, session_id=machine.clock.new_id()),
    )
    assert isinstance(created, Session)
    machine.learn_session(created)
    return created.id


def test_scoped_vector_search_finds_the_owners_messages_after_a_reembed(world: World) -> None:
    """The owner's messages are found by a vector search in their session and by one
    over the owner's sessions, right after a reembed to another model rewrote every
    vector of the database (the population's thousands included). The owner writes as
    the issue's user did: sessions of a hundred messages, then one of five."""
    machine = _machine(world)
    try:
        for number in range(5):
            session_id = _session(machine)
            batch = [MessageWrite(Role.USER, f"message {number} {i} launch") for i in range(100)]
            machine.both(
                LogDiverged, "append_events", calling("append_events", session_id, batch, 0)
            )
        session_id = _session(machine)
        for number in range(5):
            write = MessageWrite(Role.USER, f"hello {number} plan")
            machine.both(LogDiverged, "add_message", calling("add_message", session_id, write))
        machine.check_search("vector", "hello plan", None, session_id, None, 10)
        machine.reembed_to_next_model()
        machine.check_search("vector", "hello plan", None, session_id, None, 10)
        machine.check_search("vector", "hello plan", None, None, None, 10)
        machine.check_search("hybrid", "hello plan", None, None, None, 3)
        machine.compare_everything()
    finally:
        machine.clean_up()


def test_messages_appended_after_a_reembed_are_found_by_vector_search(world: World) -> None:
    """Messages appended after a reembed to another model (embedded inline with it) are
    found by a vector search over the owner's sessions and in their session."""
    machine = _machine(world)
    try:
        machine.reembed_to_next_model()
        session_id = _session(machine)
        for number in range(3):
            write = MessageWrite(Role.USER, f"launch {number} later")
            machine.both(LogDiverged, "add_message", calling("add_message", session_id, write))
        machine.check_search("vector", "launch", None, None, None, 1)
        machine.check_search("vector", "launch", None, None, None, 10)
        machine.check_search("vector", "launch", None, session_id, None, 10)
        machine.compare_everything()
    finally:
        machine.clean_up()


async def test_concurrent_appends_of_messages_with_vectors_all_land(
    connect_store: StoreFactory,
) -> None:
    """Appends to different sessions at once, each a message the store embeds: every
    one is stored (what the population, written sixteen sessions at a time, met)."""
    store: Store = await connect_store(embedder=HashingEmbedder(16))
    owner = User("ada", "Ada")
    sessions = [await store.create_session(owner) for _ in range(16)]
    appended = await asyncio.gather(
        *(
            store.add_message(session.id, MessageWrite(Role.USER, f"hello world {number}"))
            for number, session in enumerate(sessions)
        )
    )
    assert [m.session_id for m in appended] == [s.id for s in sessions]
    for session in sessions:
        assert await store.version(session.id) == 1


async def test_a_reembedded_vector_reads_back_as_float32(connect_store: StoreFactory) -> None:
    """A vector written by a reembed reads back as the float32 an appended one does
    (the reference kept the reembedding model's float64 values: the differential test
    saw every reembedded message differ from the backend's)."""
    store: Store = await connect_store(embedder=MODELS[0])
    session = await store.create_session(User("ada", "Ada"))
    message = await store.add_message(session.id, MessageWrite(Role.USER, "launch plan march"))
    await store.reembed(MODELS[1])
    (stored,) = await store.messages(session.id)
    wanted = tuple(array("f", MODELS[1].embed_one(message.content)).tolist())
    assert wanted != tuple(MODELS[1].embed_one(message.content)), "a float32 cut is shown"
    assert stored.embedding == wanted
    assert stored.embedding_model == MODELS[1].name
