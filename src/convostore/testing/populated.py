"""A database that already holds other owners' data, for tests that must show what only
shows on a database in use (an index that other owners' vectors crowd, a listing or a
lookup that other sessions could leak into).

`populate` writes, deterministically and in batches (one `Store.append_events` per
session, `AT_ONCE` sessions at a time, so that SQLite commits them in one group and a
server's pool works in parallel; a batch refused under that concurrency is written again
alone: MariaDB 11.8's vector graph refuses concurrent appends of vectors, see
``test_differential.py``): `OWNERS` owners, each with `SESSIONS_PER_OWNER`
sessions (every fourth a part of the one before it), each session holding a user message,
an assistant message, a system message and an app event. The messages carry vectors of
four models of three widths (`MODELS`) and some carry none, their words drawn from
`WORDS`, the same vocabulary a test searches with. Sessions never expire before
`FAR_FUTURE`, and their metadata uses the values of `METADATA_VALUES` under the indexed
keys `INDEXED_KEYS`, so a lookup by a value a test also uses finds them too.
`PopulatedDatabase` says what the population holds, and which of its messages a
`Store.reembed` to a given model would embed.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from convostore.embedding import HashingEmbedder, Metric
from convostore.errors import StoreError
from convostore.model import EventWrite, MessageWrite, Role, Session, User
from convostore.store import Store

__all__ = [
    "AT_ONCE",
    "FAR_FUTURE",
    "INDEXED_KEYS",
    "METADATA_VALUES",
    "MODELS",
    "OWNERS",
    "SESSIONS_PER_OWNER",
    "WORDS",
    "NamedHashingEmbedder",
    "PopulatedDatabase",
    "populate",
]

OWNERS = 250
SESSIONS_PER_OWNER = 8
# Sessions written at once (a multiple of 4: a part is written after its parent).
AT_ONCE = 16
INDEXED_KEYS = ("tenant", "topic")
METADATA_VALUES = ("acme", "globex", "initech", "ü-🙂", "42")
FAR_FUTURE = datetime(2999, 1, 1, tzinfo=UTC)
WORDS = (
    "launch",
    "plan",
    "march",
    "calendar",
    "budget",
    "invoice",
    "retry",
    "deploy",
    "cache",
    "query",
    "index",
    "vector",
    "search",
    "owner",
    "session",
    "agent",
    "tool",
    "result",
    "summary",
    "draft",
    "review",
    "release",
    "ticket",
    "alpha",
    "beta",
    "gamma",
    "delta",
    "straße",
    "café",
    "事件",
    "🙂",
)


class NamedHashingEmbedder(HashingEmbedder):
    """The deterministic hashing embedder under a model name of its own."""

    metric: Metric = "cosine"

    def __init__(self, name: str, dimensions: int) -> None:
        super().__init__(dimensions)
        self.name = name


# The models of the population: the first is the one a store starts on.
MODELS: tuple[NamedHashingEmbedder, ...] = (
    NamedHashingEmbedder("populated-m1", 16),
    NamedHashingEmbedder("populated-m2", 16),
    NamedHashingEmbedder("populated-m3", 8),
    NamedHashingEmbedder("populated-m4", 32),
)
# What each message of a population carries, in turn: a model's vector, or none.
_VECTOR_CHOICES: tuple[NamedHashingEmbedder | None, ...] = (*MODELS, MODELS[0], None)


@dataclass
class PopulatedDatabase:
    """A store on a populated database, and what the population holds: ``models``
    counts, for each model, the population's embeddable messages (user, assistant and
    tool messages with content) that carry its vector (None: no vector)."""

    store: Store
    sessions: int = 0
    events: int = 0
    models: Counter[str | None] = field(default_factory=Counter)
    seconds: float = 0.0

    def pending(self, model: str) -> int:
        """How many of the population's messages a reembed to ``model`` embeds."""
        return sum(count for name, count in self.models.items() if name != model)

    def reembedded(self, model: str) -> None:
        """Record that a reembed to ``model`` ran (every embeddable message has its
        vector now)."""
        total = sum(self.models.values())
        self.models = Counter({model: total})


def _agent(owner_number: int) -> User:
    return User(f"populated-agent-{owner_number % 7}", "Agent", kind="agent")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _message(
    rng: random.Random, role: Role, author: str | None, model: NamedHashingEmbedder | None
) -> MessageWrite:
    content = _text(rng, rng.randint(3, 12))
    return MessageWrite(
        role,
        content,
        author=author,
        metadata={"n": rng.randint(0, 9)},
        embedding=None if model is None else model.embed_one(content),
        embedding_model=None if model is None else model.name,
    )


@dataclass(frozen=True)
class _PlannedSession:
    """One session of the population, drawn before anything is written."""

    index: int
    owner_id: str
    agent_id: str
    metadata: dict[str, str]
    writes: list[MessageWrite | EventWrite]

    @property
    def is_part(self) -> bool:
        # Every fourth session is a part of the one before it (of the same owner).
        return self.index % 4 == 3


def _plan(rng: random.Random, populated: PopulatedDatabase) -> list[_PlannedSession]:
    vectors = itertools.cycle(_VECTOR_CHOICES)
    planned: list[_PlannedSession] = []
    for owner_number in range(OWNERS):
        owner_id = f"populated-owner-{owner_number}"
        agent = _agent(owner_number)
        for number in range(SESSIONS_PER_OWNER):
            metadata = {key: rng.choice(METADATA_VALUES) for key in INDEXED_KEYS}
            writes: list[MessageWrite | EventWrite] = []
            for role, author in ((Role.USER, owner_id), (Role.ASSISTANT, agent.id)):
                model = next(vectors)
                writes.append(_message(rng, role, author, model))
                populated.models[None if model is None else model.name] += 1
            writes.append(_message(rng, Role.SYSTEM, None, None))
            writes.append(EventWrite("APP.POPULATED", {"owner": owner_number, "n": number}))
            index = owner_number * SESSIONS_PER_OWNER + number
            planned.append(_PlannedSession(index, owner_id, agent.id, metadata, writes))
    return planned


async def _create(store: Store, planned: _PlannedSession, parent: Session | None) -> Session:
    return await store.create_session(
        planned.owner_id,
        title=f"populated {planned.index}",
        kind="chat" if planned.index % 3 else "task",
        part_of=None if parent is None else parent.id,
        held_with=None if parent is None else planned.agent_id,
        metadata=planned.metadata,
        expires_at=FAR_FUTURE if planned.index % 5 == 0 else None,
    )


async def _append(store: Store, session: Session, planned: _PlannedSession) -> None:
    if not await store.append_events(session.id, planned.writes, expected_version=0):
        raise AssertionError(f"the population's batch for session {planned.index} was refused")


async def populate(store: Store, *, seed: int = 20261201) -> PopulatedDatabase:
    """Write the population (see the module's docstring) through ``store``, which must
    not embed messages itself (each carries its vector, or none on purpose)."""
    started = time.perf_counter()
    populated = PopulatedDatabase(store)
    planned = _plan(random.Random(seed), populated)
    for number in range(7):
        await store.put_user(_agent(number))
    await asyncio.gather(
        *(store.put_user(User(f"populated-owner-{n}", f"Owner {n}")) for n in range(OWNERS))
    )
    for start in range(0, len(planned), AT_ONCE):
        group = planned[start : start + AT_ONCE]
        made: dict[int, Session] = {}
        for parts in (False, True):
            chosen = [p for p in group if p.is_part is parts]
            sessions = await asyncio.gather(
                *(_create(store, p, made[p.index - 1] if parts else None) for p in chosen)
            )
            made.update((p.index, session) for p, session in zip(chosen, sessions, strict=True))
        appended = await asyncio.gather(
            *(_append(store, made[p.index], p) for p in group), return_exceptions=True
        )
        for p, outcome in zip(group, appended, strict=True):
            if isinstance(outcome, StoreError):
                # Refused under concurrency (see the module's docstring): alone, it lands.
                await _append(store, made[p.index], p)
            elif isinstance(outcome, BaseException):
                raise outcome
        populated.sessions += len(group)
        populated.events += sum(len(p.writes) for p in group)
    populated.seconds = time.perf_counter() - started
    return populated
