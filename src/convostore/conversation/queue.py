"""A conversation's write queue: its writes run in order, by one writer task at a time."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from convostore.model import Message, MessageWrite

__all__ = ["Entry", "Job", "State", "WriteQueue"]

logger = logging.getLogger("convostore.conversation")

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]
"""Runs a coroutine as a task its owner holds until done."""


class State(enum.Enum):
    PENDING = enum.auto()
    STORED = enum.auto()
    FAILED = enum.auto()


@dataclass(eq=False, slots=True)
class Entry:
    """One message of a conversation and the write that stores it."""

    message: Message
    write: MessageWrite | None
    state: State
    error: BaseException | None = None


@dataclass(eq=False, slots=True)
class Job:
    """A step of the write queue; ``done`` resolves when it has run (never with an error)."""

    run: Callable[[], Awaitable[None]]
    done: asyncio.Future[None]
    entry: Entry | None = None


class WriteQueue:
    """Jobs run one after another on ``loop``; a job that raises is logged and the next
    runs. The writer task starts with the first job and ends when the queue is empty.

    If the writer is cancelled (its loop is shutting down), the jobs left are dropped,
    their ``done`` resolved, and ``on_cancelled`` gets the entries they would have
    written.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        spawn: Spawn,
        name: str,
        on_cancelled: Callable[[list[Entry], asyncio.CancelledError], None],
    ) -> None:
        self._loop = loop
        self._spawn = spawn
        self._name = name
        self._on_cancelled = on_cancelled
        self._jobs: deque[Job] = deque()
        self._writer: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._jobs)

    def enqueue(self, run: Callable[[], Awaitable[None]], entry: Entry | None = None) -> Job:
        """Queue ``run`` (on the loop); ``entry`` is the message it writes, if any."""
        job = Job(run, self._loop.create_future(), entry)
        self._jobs.append(job)
        if self._writer is None:
            self._writer = self._spawn(self._drain(), f"convostore writer {self._name}")
        return job

    async def wait(self) -> None:
        """Wait until every job queued so far has run."""
        if self._jobs:
            await asyncio.shield(self._jobs[-1].done)

    async def _drain(self) -> None:
        try:
            while self._jobs:
                job = self._jobs[0]
                try:
                    await job.run()
                except Exception:
                    logger.exception("conversation %s: a queued write failed", self._name)
                self._jobs.popleft()
                job.done.set_result(None)
        except asyncio.CancelledError as cancelled:
            self._abandon(cancelled)
            raise
        finally:
            self._writer = None

    def _abandon(self, cancelled: asyncio.CancelledError) -> None:
        jobs = list(self._jobs)
        self._jobs.clear()
        try:
            self._on_cancelled([job.entry for job in jobs if job.entry is not None], cancelled)
        finally:
            for job in jobs:
                if not job.done.done():
                    job.done.set_result(None)
