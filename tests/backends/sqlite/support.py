"""What the SQLite backend's own tests share: users, URLs, raw reads beside the store,
a statement on the writer's or a reader's connection, and the vector helpers that
compare the cache's answers with a scan of the database."""

from __future__ import annotations

import hashlib
import random
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from convostore import (
    MessageWrite,
    Role,
    Store,
    User,
)
from convostore.backends.sqlite import SQLiteBackend
from convostore.backends.sqlite import search as sqlite_search
from convostore.backends.sqlite import worker as worker_module
from convostore.backends.sqlite.connection import (
    Batches,
    Outcome,
    Write,
    in_group_transaction,
    in_read_snapshot,
)
from convostore.embedding import HashingEmbedder

ADA = User("ada", "Ada")
BOT = User("bot", "Bot", kind="agent")


def sqlite_of(store: Store) -> SQLiteBackend:
    """The SQLite backend under ``store`` (its threads, cache and statements)."""
    assert isinstance(store.backend, SQLiteBackend)
    return store.backend


def db_url(path: Path, query: str = "") -> str:
    return f"sqlite:///{path}" + (f"?{query}" if query else "")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def set_modes(path: Path, *, file_mode: int, directory_mode: int) -> None:
    path.chmod(file_mode)
    path.parent.chmod(directory_mode)


def raw_rows(path: Path, statement: str, *parameters: Any) -> list[Any]:
    """Rows read through a connection of the test's own, outside the store."""
    connection = sqlite3.connect(path)
    try:
        return connection.execute(statement, parameters).fetchall()
    finally:
        connection.close()


async def on_writer(store: Store, statement: str) -> Any:
    """One value read by the store's writer connection."""
    return await sqlite_of(store)._writer.run(lambda c: c.execute(statement).fetchone()[0])


async def on_reader(store: Store, statement: str) -> Any:
    return await sqlite_of(store)._readers.run(lambda c: c.execute(statement).fetchone()[0])


WIDTH = 16
BOB = User("bob", "Bob")


def gaussian(rng: random.Random, width: int = WIDTH) -> list[float]:
    return [rng.gauss(0.0, 1.0) for _ in range(width)]


def vector_write(
    rng: random.Random, role: Role = Role.USER, model: str | None = None, width: int = WIDTH
) -> MessageWrite:
    """A message with a random vector of the store's model (``model``, when given)."""
    return MessageWrite(
        role,
        f"message {rng.random()}",
        embedding=gaussian(rng, width),
        embedding_model=model or HashingEmbedder(WIDTH).name,
    )


async def vector_session(
    store: Store,
    rng: random.Random,
    owner: User = ADA,
    messages: int = 8,
    expires_at: datetime | None = None,
) -> str:
    session = await store.create_session(owner, expires_at=expires_at)
    roles = [Role.USER, Role.ASSISTANT, Role.TOOL]
    writes = [vector_write(rng, roles[n % 3]) for n in range(messages)]
    await store.append_events(session.id, writes, expected_version=0)
    return session.id


async def scanned(store: Store, vector: tuple[float, ...], k: int, **scope: Any) -> Any:
    """What a scan of the database answers, without the cache."""
    spec = store.vector_index
    roles = scope.get("roles")
    arguments = (
        vector,
        spec.metric if spec else "cosine",
        spec.model if spec else None,
        k,
        scope.get("owner_id"),
        scope.get("session_id"),
        None if roles is None else tuple(Role(role) for role in roles),
    )
    return await sqlite_of(store)._readers.run(in_read_snapshot, sqlite_search.scan, arguments)


async def assert_exact(
    store: Store, rng: random.Random, session_ids: list[str], searches: int = 4
) -> None:
    """Searches of random vectors in random scopes answer what a scan answers."""
    for _ in range(searches):
        vector = tuple(gaussian(rng))
        scope: dict[str, Any] = {}
        if rng.random() < 0.4:
            scope["owner_id"] = rng.choice(["ada", "bob", "nobody"])
        if rng.random() < 0.3 and session_ids:
            scope["session_id"] = rng.choice([*session_ids, "no-such-session"])
        if rng.random() < 0.3:
            scope["roles"] = rng.choice([["user"], ["assistant", "tool"], ["system"]])
        k = rng.choice([1, 3, 10, 1000])
        hits = await store.search(vector=vector, k=k, **scope)
        expected = await scanned(store, vector, k, **scope)
        assert [hit.message for hit in hits] == [hit.message for hit in expected], scope
        # float32 products: BLAS may sum a row in another order in another matrix.
        assert [hit.score for hit in hits] == pytest.approx(
            [hit.score for hit in expected], rel=1e-5, abs=1e-6
        )


async def is_nearest(store: Store, vector: Any, message_id: str, **scope: Any) -> bool:
    """Whether the message is the best hit for a vector, as for its own (score 1)."""
    hits = await store.search(vector=vector, k=1, **scope)
    return bool(hits) and hits[0].message.id == message_id and abs(hits[0].score - 1.0) < 1e-5


async def found_ids(store: Store) -> set[str]:
    """Every message a vector search can find."""
    return {hit.message.id for hit in await store.search(vector=gaussian(random.Random(0)), k=1000)}


def group_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each group the writer commits from now on (filled as they commit)."""
    groups: list[int] = []

    def recording(
        connection: sqlite3.Connection, writes: list[Write], batches: Batches | None = None
    ) -> list[Outcome]:
        groups.append(len(writes))
        return in_group_transaction(connection, writes, batches)

    monkeypatch.setattr(worker_module, "in_group_transaction", recording)
    return groups
