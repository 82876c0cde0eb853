"""SQLite's group commit: writes queued together share one transaction and one fsync,
each still all-or-nothing on its own, none answered before the commit; a process killed
in the middle of group commits loses no acknowledged write and shows no half of one."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import convostore
from convostore import Event, EventFilter, Message, MessageWrite, Role, Store, StoreError, User
from convostore.backends.sqlite import SQLiteBackend
from convostore.backends.sqlite import connection as connection_module
from convostore.backends.sqlite import operations as operations_module
from convostore.backends.sqlite.connection import (
    Outcome,
    RollbackAndReturn,
    Write,
    in_group_transaction,
    open_connection,
)
from convostore.backends.sqlite.url import SQLiteTarget
from convostore.backends.sqlite.worker import ConnectionWorker
from tests.backends.sqlite.support import ADA, group_sizes


async def queued_behind_a_held_writer(
    store: Store, calls: list[Any], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[Any], list[int]]:
    """Run ``calls`` (coroutines of writes) while the writer thread is held, so they are
    all queued when it is let go; answer their results and the size of each group."""
    groups = group_sizes(monkeypatch)
    let_go = threading.Event()
    backend = store.backend
    assert isinstance(backend, SQLiteBackend)
    held = asyncio.ensure_future(backend._writer.run(lambda _: let_go.wait()))
    submitted = 0
    all_queued = asyncio.Event()
    original_submit = ConnectionWorker._submit

    async def counting_submit(
        worker: ConnectionWorker, fn: Any, args: tuple[Any, ...], write: bool
    ) -> Any:
        nonlocal submitted
        submitted += 1
        if submitted == len(calls):
            all_queued.set()  # its waiter runs after this task has queued its write
        return await original_submit(worker, fn, args, write)

    monkeypatch.setattr(ConnectionWorker, "_submit", counting_submit)
    tasks = [asyncio.ensure_future(call) for call in calls]
    await all_queued.wait()
    let_go.set()
    await held
    return await asyncio.gather(*tasks, return_exceptions=True), groups


async def test_writes_queued_together_commit_together(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.put_user(ADA)
    sessions = [await store.create_session(ADA) for _ in range(5)]
    calls = [
        store.add_message(sessions[n % 5].id, MessageWrite(Role.USER, f"m{n}", author="ada"))
        for n in range(30)
    ]
    results, groups = await queued_behind_a_held_writer(store, calls, monkeypatch)
    assert groups == [30]
    assert all(isinstance(result, Event) for result in results)
    for session in sessions:
        log = await store.read(session.id)
        assert [e.seq for e in log] == list(range(1, 7))
        assert await store.version(session.id) == 6


async def test_a_failing_write_fails_alone_in_its_group(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.put_user(ADA)
    session = await store.create_session(ADA)
    newcomer = User("newcomer", "Newcomer")
    calls = [
        store.add_message(session.id, MessageWrite(Role.USER, "first")),
        # Refused after its recipient and the session's counters were written.
        store.add_message(
            session.id, MessageWrite(Role.USER, "lost", author="nobody", recipients=[newcomer])
        ),
        store.append_events(session.id, [MessageWrite(Role.USER, "stale")], 0),
        store.add_message(session.id, MessageWrite(Role.USER, "second")),
    ]
    results, groups = await queued_behind_a_held_writer(store, calls, monkeypatch)
    assert groups == [4]
    assert isinstance(results[0], Event)
    assert isinstance(results[1], StoreError)
    assert results[2] is False
    assert isinstance(results[3], Event)
    assert [e.content for e in await store.messages(session.id)] == ["first", "second"]
    assert await store.get_user("newcomer") is None
    assert await store.version(session.id) == 2


def _appends_of_many_conversations(store: Store, refused: bool) -> list[Any]:
    """Appends to seven sessions with every outcome an append can have: plain and
    multi-event ones, a stale version, a known author, a new user given twice, two
    appends to one session; and, if ``refused``, the ones that raise: a missing
    session, an id stored in another session, a retry of an id stored in its own, an
    unknown author."""
    message = MessageWrite
    calls = [
        store.add_message("s0", message(Role.USER, "a", id="e1")),
        store.add_message("s1", message(Role.USER, "b", id="e2", author="ada")),
        store.append_events(
            "s2", [message(Role.USER, "c1", id="e3"), message(Role.ASSISTANT, "c2", id="e4")], 0
        ),
        store.append_events("s3", [message(Role.USER, "stale", id="e5")], 5),
        store.add_message("s6", message(Role.USER, "hi", id="e8", author=User("grace", "Grace"))),
        store.add_message(
            "s4", message(Role.USER, "to grace", id="e13", recipients=[User("grace", "Grace")])
        ),
        store.add_message("s1", message(Role.ASSISTANT, "b2", id="e9", synthetic=True)),
        store.add_message("s5", message(Role.ASSISTANT, "fine", id="e10")),
        store.append_events("s3", [message(Role.USER, "on time", id="e11")], 0),
    ]
    if refused:
        calls += [
            store.add_message("missing", message(Role.USER, "x", id="e6")),
            store.add_message("s4", message(Role.USER, "taken", id="stored")),
            store.add_message("s0", message(Role.USER, "again", id="e1")),
            store.add_message("s5", message(Role.USER, "who", id="e7", author="nobody")),
            store.add_message("s4", message(Role.USER, "after", id="e12")),
        ]
    return calls


async def _end_state(store: Store, results: list[Any]) -> list[Any]:
    """What each append answered (an event's id, seq and content; a bool; an error's
    class) and each session's log, version, message count and first author."""
    answered = [
        (r.id, r.seq, r.content) if isinstance(r, Message) else r if r in (True, False) else type(r)
        for r in results
    ]
    sessions = []
    for n in range(7):
        log = await store.read(f"s{n}")
        (summary,) = [
            s for s in (await store.list_summaries("ada")).items if s.session.id == f"s{n}"
        ]
        sessions.append(
            (
                [(e.id, e.seq) for e in log],
                await store.version(f"s{n}"),
                summary.message_count,
                None if summary.started_by is None else summary.started_by.id,
                [user.id for user in await store.participants(f"s{n}")],
            )
        )
    return [answered, sessions, await store.get_user("grace") is not None]


async def _many_conversations(store: Store) -> None:
    await store.put_user(ADA)
    for n in range(7):
        await store.create_session(ADA, session_id=f"s{n}")
    await store.add_message("s0", MessageWrite(Role.USER, "stored", id="stored"))


@pytest.mark.parametrize("refused", [False, True], ids=["none-refused", "some-refused"])
async def test_appends_of_many_conversations_in_one_group_end_as_one_at_a_time(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refused: bool
) -> None:
    """A group takes appends to different sessions together, in a few statements; each
    still ends exactly as it does alone. With none refused, no append is run again."""
    await _many_conversations(store)
    run_again = 0
    original = connection_module._one_savepoint_each

    def counting(connection: sqlite3.Connection, writes: list[Write]) -> list[Outcome]:
        nonlocal run_again
        run_again += 1
        return original(connection, writes)

    monkeypatch.setattr(connection_module, "_one_savepoint_each", counting)
    calls = _appends_of_many_conversations(store, refused)
    results, groups = await queued_behind_a_held_writer(store, calls, monkeypatch)
    assert groups == [len(calls)]
    assert run_again == (1 if refused else 0)
    alone = await convostore.connect(f"sqlite:///{tmp_path / 'alone.db'}")
    try:
        await _many_conversations(alone)
        one_at_a_time = []
        for call in _appends_of_many_conversations(alone, refused):
            try:
                one_at_a_time.append(await call)
            except StoreError as error:
                one_at_a_time.append(error)
        assert await _end_state(store, results) == await _end_state(alone, one_at_a_time)
    finally:
        await alone.close()
    answered = (await _end_state(store, results))[0]
    assert answered[:4] == [("e1", 2, "a"), ("e2", 1, "b"), True, False]


async def test_a_group_of_plain_appends_commits_each(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common case, every append to its own session and none refused: all of them
    at once, in order, and nothing else runs them again."""
    await store.put_user(ADA)
    sessions = [(await store.create_session(ADA)).id for _ in range(40)]
    ran_alone = 0
    original = operations_module.write_append

    def counting(connection: sqlite3.Connection, append: Any) -> Any:
        nonlocal ran_alone
        ran_alone += 1
        return original(connection, append)

    monkeypatch.setattr(operations_module, "write_append", counting)
    calls = [
        store.add_message(session_id, MessageWrite(Role.USER, f"m{n}", author="ada"))
        for n, session_id in enumerate(sessions)
    ]
    results, groups = await queued_behind_a_held_writer(store, calls, monkeypatch)
    assert groups == [40]
    assert ran_alone == 0
    assert all(isinstance(r, Message) for r in results)
    assert [(r.session_id, r.seq, r.content) for r in results] == [
        (session_id, 1, f"m{n}") for n, session_id in enumerate(sessions)
    ]
    for n, session_id in enumerate(sessions):
        assert [e.content for e in await store.messages(session_id)] == [f"m{n}"]
        assert await store.version(session_id) == 1


def test_group_outcomes_follow_each_write(tmp_path: Path) -> None:
    """The group runner itself: a write that raises is undone alone, one that asks to roll
    back answers its result with nothing written, and the rest commit once."""
    connection = open_connection(SQLiteTarget(str(tmp_path / "g.db")), reader=False)
    try:
        connection.execute("CREATE TABLE t (v INTEGER UNIQUE)")

        def insert(c: sqlite3.Connection, value: int) -> int:
            c.execute("INSERT INTO t (v) VALUES (?)", (value,))
            return value

        def insert_then_refuse(c: sqlite3.Connection, value: int) -> int:
            c.execute("INSERT INTO t (v) VALUES (?)", (value,))
            raise ValueError("refused")

        def insert_then_roll_back(c: sqlite3.Connection, value: int) -> int:
            c.execute("INSERT INTO t (v) VALUES (?)", (value,))
            raise RollbackAndReturn("rolled back")

        outcomes = in_group_transaction(
            connection,
            [
                (insert, (1,)),
                (insert_then_refuse, (2,)),
                (insert, (1,)),  # a constraint violation
                (insert_then_roll_back, (3,)),
                (insert, (4,)),
            ],
        )
        assert [ok for ok, _ in outcomes] == [True, False, False, True, True]
        assert outcomes[0][1] == 1
        assert isinstance(outcomes[1][1], ValueError)
        assert isinstance(outcomes[2][1], sqlite3.IntegrityError)
        assert outcomes[3][1] == "rolled back"
        assert not connection.in_transaction
        assert [row[0] for row in connection.execute("SELECT v FROM t ORDER BY v")] == [1, 4]
    finally:
        connection.close()


# The child appends, from many conversations at once, batches of three messages and
# single messages, and prints each one's name once the store has acknowledged it.
CHILD = """
import asyncio, sys
import convostore
from convostore import MessageWrite, Role, User

async def main(url, writers):
    store = await convostore.connect(url)
    ada = User("ada", "Ada")
    await store.put_user(ada)
    sessions = [(await store.create_session(ada)).id for _ in range(writers)]
    print("ready " + " ".join(sessions), flush=True)

    async def writer(w, session_id):
        n = 0
        while True:
            writes = [
                MessageWrite(Role.USER, f"{w}/{n}/{j}", id=f"{w}-{n}-{j}")
                for j in range(3 if n % 2 == 0 else 1)
            ]
            if n % 2 == 0:
                assert await store.append_events(session_id, writes, n)
            else:
                await store.append_event(session_id, writes[0])
            sys.stdout.write(f"{w} {n}\\n")
            sys.stdout.flush()
            n += 1

    await asyncio.gather(*(writer(w, s) for w, s in enumerate(sessions)))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def test_killed_during_group_commits_loses_nothing_acknowledged(tmp_path: Path) -> None:
    writers, wanted = 24, 400
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, str(writers)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acknowledged: set[tuple[int, int]] = set()
    try:
        assert child.stdout is not None
        first = child.stdout.readline().split()
        assert first, "the child said nothing"
        assert first[0] == "ready", first
        sessions = first[1:]
        while len(acknowledged) < wanted:
            line = child.stdout.readline()
            assert line, "the child stopped before it was killed"
            w, n = line.split()
            acknowledged.add((int(w), int(n)))
        os.kill(child.pid, signal.SIGKILL)
        # Whatever it printed before it died was acknowledged too.
        for line in child.stdout:
            if line.endswith("\n"):
                w, n = line.split()
                acknowledged.add((int(w), int(n)))
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL

    async def check() -> None:
        async with await convostore.connect(url) as store:
            for w, session_id in enumerate(sessions):
                log = await store.read(session_id, EventFilter())
                parts: dict[int, list[int]] = defaultdict(list)
                for e in log:
                    _, number, part = e.id.split("-")
                    parts[int(number)].append(int(part))
                present = sorted(parts)
                # Each writer waited for one append before the next: what landed is a
                # prefix of what it wrote, each append whole.
                assert present == list(range(len(present)))
                for n in present:
                    assert parts[n] == ([0, 1, 2] if n % 2 == 0 else [0])
                assert {n for (writer, n) in acknowledged if writer == w} <= set(present)
                assert [e.seq for e in log] == list(range(1, len(log) + 1))
                assert await store.version(session_id) == len(present)

    asyncio.run(check())
