"""The append workload every backend's benchmark runs through the store."""

from __future__ import annotations

import asyncio
import time

import convostore
from convostore import MessageWrite, Role, User

AUTHOR = User("ada", "Ada")
CONTENT = "What is the capital of France? Answer in one word, please."


async def store_appends(url: str, count: int, writers: int) -> float:
    """Messages per second through `Store.add_message`, from ``writers`` conversations
    appending at once, each message waiting for the one before it."""
    store = await convostore.connect(url)
    try:
        await store.put_user(AUTHOR)
        write = MessageWrite(Role.USER, CONTENT, author=AUTHOR.id)
        sessions = [await store.create_session(AUTHOR) for _ in range(writers)]
        for session in sessions:
            await store.add_message(session.id, write)  # Prepares the statements.

        async def converse(session_id: str, messages: int) -> None:
            for _ in range(messages):
                await store.add_message(session_id, write)

        each = count // writers
        started = time.perf_counter()
        await asyncio.gather(*(converse(session.id, each) for session in sessions))
        return each * writers / (time.perf_counter() - started)
    finally:
        await store.close()
