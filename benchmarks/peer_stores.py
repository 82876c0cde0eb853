"""The stores `peers.py` measures, each driven through its own public API.

Each `Peer` creates sessions, appends one message per call, fills a long log (with the
store's batch call where it has one: that part is not timed), reads the last n messages
and, where the store can, lists one user's sessions. The frameworks come from the
``bench`` extra and are imported when their row runs.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import convostore
from convostore import EventFilter, MessageWrite, PageRequest, Role, Store, User

APP = "bench"


def text_of(n: int) -> str:
    return f"Message {n}: what is the capital of France? Answer in one word, please."


def role_of(n: int) -> str:
    """Users and assistants take turns, a user first: a window of an even size ends
    where it starts a turn, so no store widens it."""
    return "user" if n % 2 == 0 else "assistant"


def use_wal(path: Path) -> None:
    """Put a new database file in WAL mode (a property of the file, kept once set)."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
    finally:
        connection.close()


class Peer:
    """A store under measurement. Session keys are whatever the store uses."""

    name = ""
    durability = ""
    concurrent = True  # whether its API lets several conversations append at once
    lists = False  # whether it can list a user's sessions

    async def open(self, directory: Path) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def create_session(self, user: str) -> str:
        raise NotImplementedError

    async def append(self, key: str, n: int) -> None:
        raise NotImplementedError

    async def fill(self, key: str, count: int) -> None:
        for n in range(count):
            await self.append(key, n)

    async def last(self, key: str, n: int) -> list[Any]:
        raise NotImplementedError

    async def list_all(self, user: str) -> int:
        raise NotImplementedError

    async def list_notes(self, user: str) -> list[str]:
        return []


class RawSQLite(Peer):
    """The floor: a minimal schema, statements executed by hand on one connection in
    the caller's thread, one transaction per append."""

    concurrent = False
    lists = True

    def __init__(self, synchronous: str) -> None:
        self.name = f"raw sqlite3, synchronous={synchronous}"
        self.durability = synchronous
        self.synchronous = synchronous
        self.connection: sqlite3.Connection | None = None

    @property
    def db(self) -> sqlite3.Connection:
        assert self.connection is not None
        return self.connection

    async def open(self, directory: Path) -> None:
        path = directory / "raw.db"
        use_wal(path)
        self.connection = sqlite3.connect(path, isolation_level=None)
        self.db.execute(f"PRAGMA synchronous = {self.synchronous}")
        self.db.execute(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, user_id TEXT NOT NULL, "
            "created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL)"
        )
        self.db.execute("CREATE INDEX sessions_by_user ON sessions (user_id, id)")
        self.db.execute(
            "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, "
            "role TEXT NOT NULL, content TEXT NOT NULL, created_at INTEGER NOT NULL)"
        )
        self.db.execute("CREATE INDEX messages_by_session ON messages (session_id, id)")

    async def close(self) -> None:
        self.db.close()

    async def create_session(self, user: str) -> str:
        key = str(uuid.uuid4())
        now = time.time_ns() // 1000
        self.db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)", (key, user, now, now))
        return key

    async def append(self, key: str, n: int) -> None:
        now = time.time_ns() // 1000
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, ?, ?, ?)",
            (key, role_of(n), text_of(n), now),
        )
        db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, key))
        db.execute("COMMIT")

    async def last(self, key: str, n: int) -> list[Any]:
        rows = self.db.execute(
            "SELECT id, role, content, created_at FROM messages WHERE session_id = ? "
            "ORDER BY id DESC LIMIT ?",
            (key, n),
        ).fetchall()
        rows.reverse()
        return rows

    async def list_all(self, user: str) -> int:
        rows = self.db.execute(
            "SELECT id, user_id, created_at, updated_at FROM sessions WHERE user_id = ? "
            "ORDER BY id DESC",
            (user,),
        ).fetchall()
        return len(rows)


class Convostore(Peer):
    lists = True

    def __init__(self, name: str, durability: str, url: Callable[[Path], str]) -> None:
        self.name = name
        self.durability = durability
        self.url = url
        self._store: Store | None = None
        self._writes: dict[int, MessageWrite] = {}

    @property
    def store(self) -> Store:
        assert self._store is not None
        return self._store

    async def open(self, directory: Path) -> None:
        self._store = await convostore.connect(self.url(directory))

    async def close(self) -> None:
        await self.store.close()

    async def create_session(self, user: str) -> str:
        session = await self.store.create_session(User(user, user.title()))
        return session.id

    def _write(self, n: int) -> MessageWrite:
        return MessageWrite(Role(role_of(n)), text_of(n))

    async def append(self, key: str, n: int) -> None:
        await self.store.add_message(key, self._write(n))

    async def fill(self, key: str, count: int) -> None:
        for start in range(0, count, 1000):
            writes = [self._write(n) for n in range(start, min(count, start + 1000))]
            assert await self.store.append_events(key, writes, await self.store.version(key))

    async def last(self, key: str, n: int) -> list[Any]:
        return await self.store.read(key, EventFilter(last=n))

    async def list_all(self, user: str) -> int:
        listed, cursor = 0, None
        while True:
            page = await self.store.list_sessions(user, PageRequest(size=100, cursor=cursor))
            listed += len(page.items)
            cursor = page.next_cursor
            if cursor is None:
                return listed

    async def list_notes(self, user: str) -> list[str]:
        started = time.perf_counter()
        repeat = 50
        for _ in range(repeat):
            await self.store.list_sessions(user, PageRequest(size=50))
        page_ms = (time.perf_counter() - started) / repeat * 1000
        return [f"one page of 50 sessions: {page_ms:.2f} ms (the listing column walks every page)"]


class OpenAISQLite(Peer):
    """OpenAI Agents SDK `SQLiteSession` on a file: sqlite3 in a thread per call."""

    name = "OpenAI Agents SQLiteSession"
    durability = "FULL"

    def __init__(self) -> None:
        self.path = Path()
        self.sessions: dict[str, Any] = {}

    async def open(self, directory: Path) -> None:
        self.path = directory / "openai.db"
        use_wal(self.path)

    async def close(self) -> None:
        for session in self.sessions.values():
            session.close()

    async def create_session(self, user: str) -> str:
        from agents import SQLiteSession

        key = str(uuid.uuid4())
        self.sessions[key] = SQLiteSession(key, self.path)
        return key

    async def append(self, key: str, n: int) -> None:
        await self.sessions[key].add_items([{"role": role_of(n), "content": text_of(n)}])

    async def fill(self, key: str, count: int) -> None:
        items = [{"role": role_of(n), "content": text_of(n)} for n in range(count)]
        await self.sessions[key].add_items(items)

    async def last(self, key: str, n: int) -> list[Any]:
        items: list[Any] = await self.sessions[key].get_items(limit=n)
        return items


class OpenAISQLAlchemy(OpenAISQLite):
    """OpenAI Agents SDK `SQLAlchemySession` on SQLite through aiosqlite, one engine."""

    name = "OpenAI Agents SQLAlchemySession"

    def __init__(self) -> None:
        super().__init__()
        self.engine: Any = None

    async def open(self, directory: Path) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        await super().open(directory)
        self.engine = create_async_engine(f"sqlite+aiosqlite:///{self.path}")

    async def close(self) -> None:
        await self.engine.dispose()

    async def create_session(self, user: str) -> str:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

        key = str(uuid.uuid4())
        self.sessions[key] = SQLAlchemySession(key, engine=self.engine, create_tables=True)
        return key


class ADK(Peer):
    """Google ADK session services: `append_event` on the session object it returned."""

    lists = True

    def __init__(self, name: str, durability: str, kind: str) -> None:
        self.name = name
        self.durability = durability
        self.kind = kind
        self.service: Any = None
        self.sessions: dict[str, Any] = {}
        self._invocations = itertools.count()

    async def open(self, directory: Path) -> None:
        from google.adk.sessions import DatabaseSessionService, InMemorySessionService

        path = directory / "adk.db"
        if self.kind == "memory":
            self.service = InMemorySessionService()
        elif self.kind == "database":
            use_wal(path)
            self.service = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
        else:
            from google.adk.sessions.sqlite_session_service import SqliteSessionService

            use_wal(path)
            self.service = SqliteSessionService(str(path))

    async def close(self) -> None:
        close = getattr(self.service, "close", None)
        if close is not None:
            await close()

    async def create_session(self, user: str) -> str:
        session = await self.service.create_session(app_name=APP, user_id=user)
        self.sessions[session.id] = session
        return str(session.id)

    async def append(self, key: str, n: int) -> None:
        from google.adk.events import Event
        from google.genai import types

        role = role_of(n)
        event = Event(
            invocation_id=f"inv-{next(self._invocations)}",
            author="user" if role == "user" else "agent",
            content=types.Content(
                role="user" if role == "user" else "model", parts=[types.Part(text=text_of(n))]
            ),
        )
        await self.service.append_event(self.sessions[key], event)

    async def last(self, key: str, n: int) -> list[Any]:
        from google.adk.sessions.base_session_service import GetSessionConfig

        session = await self.service.get_session(
            app_name=APP,
            user_id=self.sessions[key].user_id,
            session_id=key,
            config=GetSessionConfig(num_recent_events=n),
        )
        events: list[Any] = session.events
        return events

    async def list_all(self, user: str) -> int:
        response = await self.service.list_sessions(app_name=APP, user_id=user)
        return len(response.sessions)


class LangChainSQL(Peer):
    """LangChain `SQLChatMessageHistory` (langchain-community) on SQLite, its sync API:
    it reads a session's whole history, so the last n are sliced off in Python."""

    name = "LangChain SQLChatMessageHistory"
    durability = "FULL"
    concurrent = False

    def __init__(self) -> None:
        self.engine: Any = None
        self.histories: dict[str, Any] = {}

    async def open(self, directory: Path) -> None:
        from sqlalchemy import create_engine

        path = directory / "langchain.db"
        use_wal(path)
        self.engine = create_engine(f"sqlite:///{path}")

    async def close(self) -> None:
        self.engine.dispose()

    async def create_session(self, user: str) -> str:
        from langchain_community.chat_message_histories import SQLChatMessageHistory

        key = str(uuid.uuid4())
        self.histories[key] = SQLChatMessageHistory(key, connection=self.engine)
        return key

    def _message(self, n: int) -> Any:
        from langchain_core.messages import AIMessage, HumanMessage

        return HumanMessage(text_of(n)) if role_of(n) == "user" else AIMessage(text_of(n))

    async def append(self, key: str, n: int) -> None:
        self.histories[key].add_message(self._message(n))

    async def fill(self, key: str, count: int) -> None:
        self.histories[key].add_messages([self._message(n) for n in range(count)])

    async def last(self, key: str, n: int) -> list[Any]:
        messages: list[Any] = self.histories[key].messages
        return messages[-n:]


def _convostore(name: str, durability: str, url: Callable[[Path], str]) -> Callable[[], Peer]:
    return lambda: Convostore(name, durability, url)


PEERS: tuple[Callable[[], Peer], ...] = (
    lambda: RawSQLite("NORMAL"),
    lambda: RawSQLite("FULL"),
    OpenAISQLite,
    OpenAISQLAlchemy,
    lambda: ADK("Google ADK InMemorySessionService", "none (process memory)", "memory"),
    lambda: ADK("Google ADK DatabaseSessionService", "FULL", "database"),
    lambda: ADK("Google ADK SqliteSessionService", "FULL", "sqlite"),
    LangChainSQL,
    _convostore("convostore sqlite:/// (FULL)", "FULL", lambda d: f"sqlite:///{d}/c.db"),
    _convostore(
        "convostore ?synchronous=normal",
        "NORMAL",
        lambda d: f"sqlite:///{d}/c.db?synchronous=normal",
    ),
    _convostore("convostore memory://", "none (process memory)", lambda d: "memory://"),
)
