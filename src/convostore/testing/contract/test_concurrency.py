"""Real concurrency: many calls at once on one store object and, where the backend lets
several processes share a database, spread over several store objects."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

import convostore.prepare
from convostore import (
    Event,
    Message,
    PageRequest,
    Role,
    SessionExistsError,
    Store,
    StoreError,
    User,
)
from convostore.prepare import prepare_append
from convostore.testing.fixtures import StoreFactory
from convostore.testing.helpers import AGENT, ALICE, contents, event, new_session, say

WRITERS = 8


@pytest.fixture(params=["one-store", "several-stores"])
async def stores(
    request: pytest.FixtureRequest, store: Store, connect_store: StoreFactory
) -> list[Store]:
    """The stores the concurrent calls are spread over (round robin)."""
    if request.param == "one-store":
        return [store]
    if not store.capabilities.cross_process:
        pytest.skip("the backend does not share a database between store objects")
    # One store object (its own connections) per writer.
    return [store, *[await connect_store() for _ in range(WRITERS - 1)]]


def pick(stores: list[Store], index: int) -> Store:
    return stores[index % len(stores)]


async def test_create_session_if_absent_exactly_one_wins(stores: list[Store]) -> None:
    await stores[0].put_user(ALICE)
    results = await asyncio.gather(
        *(
            pick(stores, i).create_session_if_absent("alice", session_id="race", title=f"t{i}")
            for i in range(WRITERS)
        )
    )
    assert sorted(results) == [False] * (WRITERS - 1) + [True]
    winner = results.index(True)
    session = await stores[0].get_session("race")
    assert session is not None
    assert session.title == f"t{winner}"
    assert await stores[0].count_sessions("alice") == 1


async def test_create_session_exactly_one_succeeds(stores: list[Store]) -> None:
    await stores[0].put_user(ALICE)
    results = await asyncio.gather(
        *(
            pick(stores, i).create_session("alice", session_id="race", title=f"t{i}")
            for i in range(WRITERS)
        ),
        return_exceptions=True,
    )
    created = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(created) == 1
    assert all(isinstance(r, SessionExistsError) for r in refused), refused
    assert await stores[0].get_session("race") == created[0]


async def test_batches_with_one_expected_version_exactly_one_applies(
    stores: list[Store],
) -> None:
    session = await new_session(stores[0])
    await stores[0].add_message(session.id, say("first"))
    results = await asyncio.gather(
        *(
            pick(stores, i).append_events(
                session.id, [say(f"w{i}-a"), event("APP.X", {"w": i}), say(f"w{i}-b")], 1
            )
            for i in range(WRITERS)
        )
    )
    assert sorted(results) == [False] * (WRITERS - 1) + [True]
    winner = results.index(True)
    assert await stores[0].version(session.id) == 2
    log = await stores[0].read(session.id)
    assert [e.seq for e in log] == [1, 2, 3, 4]
    assert log[2].payload == {"w": winner}


async def test_retries_of_one_event_id_store_it_once(stores: list[Store]) -> None:
    session = await new_session(stores[0])
    returned: list[Event] = await asyncio.gather(
        *(
            pick(stores, i).add_message(session.id, say(f"attempt {i}", id="once"))
            for i in range(WRITERS)
        )
    )
    log = await stores[0].read(session.id)
    assert len(log) == 1
    assert all(event == log[0] for event in returned)
    assert await stores[0].version(session.id) == 1


async def test_concurrent_appends_get_gap_free_seq(stores: list[Store]) -> None:
    session = await new_session(stores[0])

    async def writer(index: int) -> list[int]:
        target = pick(stores, index)
        seqs = []
        for n in range(10):
            write = say(f"{index}-{n}") if n % 2 else event("APP.X", {"w": index, "n": n})
            seqs.append((await target.append_event(session.id, write)).seq)
        return seqs

    per_writer = await asyncio.gather(*(writer(i) for i in range(WRITERS)))
    for seqs in per_writer:
        assert seqs == sorted(seqs)
    assert sorted(s for seqs in per_writer for s in seqs) == list(range(1, 10 * WRITERS + 1))
    log = await stores[0].read(session.id)
    assert [e.seq for e in log] == list(range(1, 10 * WRITERS + 1))
    assert len({e.id for e in log}) == len(log)
    assert await stores[0].version(session.id) == 10 * WRITERS


async def test_optimistic_writers_all_land_by_retrying(stores: list[Store]) -> None:
    session = await new_session(stores[0])

    async def writer(index: int) -> int:
        target = pick(stores, index)
        attempts = 0
        while True:
            attempts += 1
            version = await target.version(session.id)
            if await target.append_events(session.id, [say(f"{index}"), say(f"{index}")], version):
                return attempts
            assert attempts < 1000
            await asyncio.sleep(0)

    await asyncio.gather(*(writer(i) for i in range(WRITERS)))
    log = await stores[0].read(session.id)
    assert [e.seq for e in log] == list(range(1, 2 * WRITERS + 1))
    assert await stores[0].version(session.id) == WRITERS
    written = contents(log)
    assert all(written[i] == written[i + 1] for i in range(0, len(written), 2))
    assert sorted(written[::2]) == sorted(str(i) for i in range(WRITERS))


async def test_find_or_create_part_settles_on_one(stores: list[Store]) -> None:
    parent = await new_session(stores[0])
    parts = await asyncio.gather(
        *(pick(stores, i).find_or_create_part(parent.id, AGENT) for i in range(WRITERS))
    )
    assert len({p.id for p in parts}) == 1
    assert [s.session.id for s in await stores[0].list_parts(parent.id)] == [parts[0].id]


async def test_expiry_extended_concurrently_survives(stores: list[Store]) -> None:
    now = datetime(2024, 6, 1, tzinfo=UTC)
    sessions = [
        await new_session(stores[0], expires_at=now - timedelta(days=1)) for _ in range(WRITERS * 4)
    ]

    async def extend(index: int) -> bool:
        later = replace(sessions[index], expires_at=now + timedelta(days=1))
        try:
            await pick(stores, index + 1).update_session(later)
        except StoreError:
            return False
        return True

    deleted, *extended = await asyncio.gather(
        pick(stores, 0).delete_expired(before=now), *(extend(i) for i in range(len(sessions)))
    )
    for session, was_extended in zip(sessions, extended, strict=True):
        current = await stores[0].get_session(session.id)
        if was_extended:
            assert current is not None, "an extended session was deleted"
            assert current.expires_at == now + timedelta(days=1)
        else:
            assert current is None
    assert deleted == extended.count(False)


async def test_last_activity_never_moves_back_under_lagging_writers(
    stores: list[Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await new_session(stores[0])
    late = datetime(2030, 1, 1, tzinfo=UTC)
    monkeypatch.setattr(convostore.prepare, "utc_now", lambda: late)
    await stores[0].add_message(session.id, say("from a fast clock"))
    clocks = [late - timedelta(minutes=n) for n in range(1, WRITERS)]

    async def lagging(index: int, when: datetime) -> None:
        # The append as a writer whose clock lags would prepare it.
        prepared = prepare_append(session.id, [say(f"at {when}", created_at=when)], None)
        await pick(stores, index).backend.append(replace(prepared, activity_at=when))

    await asyncio.gather(*(lagging(i + 1, when) for i, when in enumerate(clocks)))
    current = await stores[0].get_session(session.id)
    assert current is not None
    assert current.last_activity_at == late
    assert await stores[0].version(session.id) == WRITERS


async def test_appends_at_once_fail_alone(stores: list[Store]) -> None:
    """Many appends in flight at once, some refused: each refused one writes nothing (not
    even the users it named) and the others all land, as if each had run alone."""
    await stores[0].put_user(ALICE)
    sessions = [await new_session(stores[0]) for _ in range(4)]
    taken = await stores[0].append_event(sessions[0].id, event("APP.X", id="taken"))
    newcomer = User("newcomer", "Newcomer")

    def refused(index: int) -> Awaitable[object]:
        target, session_id = pick(stores, index), sessions[index % 4].id
        kind = index % 4
        if kind == 0:
            return target.append_event("no-such-session", say("lost"))
        if kind == 1:
            # The author is unknown; the recipient would be inserted with the message.
            write = say("lost", author="nobody", recipients=[newcomer])
            return target.add_message(session_id, write)
        if kind == 2:
            return target.append_event(session_id, event("APP.X", id=taken.id))
        return target.append_events(session_id, [say("lost"), say("lost")], 99)

    async def landing(index: int) -> Event:
        target, session_id = pick(stores, index), sessions[index % 4].id
        return await target.append_event(session_id, say(f"kept {index}"))

    calls: list[Awaitable[object]] = []
    for index in range(40):
        calls.append(landing(index))
        calls.append(refused(index))
    results = await asyncio.gather(*calls, return_exceptions=True)
    kept, refusals = results[0::2], results[1::2]
    assert all(isinstance(result, Event) for result in kept)
    for index, result in enumerate(refusals):
        if index % 4 == 3:
            assert result is False
        else:
            assert isinstance(result, StoreError), result
    assert await stores[0].get_user("newcomer") is None
    for number, session in enumerate(sessions):
        log = await stores[0].read(session.id)
        assert "lost" not in contents(log)
        expected = sorted(f"kept {i}" for i in range(40) if i % 4 == number)
        assert sorted(c for c in contents(log) if c.startswith("kept")) == expected
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert await stores[0].version(session.id) == len(log)


async def test_appends_of_many_conversations_at_once_keep_every_count(
    stores: list[Store],
) -> None:
    """One write to each of many sessions, all in flight at once, of every kind that
    lands or is turned away without an error: each session ends as that write alone
    leaves it (its log, version, message count, first author and participants), and
    the users the writes give are stored."""
    await stores[0].put_user(ALICE)
    sessions = [await new_session(stores[0]) for _ in range(20)]

    def write(index: int) -> Awaitable[object]:
        target, session_id = pick(stores, index), sessions[index].id
        kind = index % 5
        if kind == 0:  # a new user, as author, and a known one as recipient
            author = User(f"writer-{index}", "Writer")
            return target.add_message(session_id, say("hello", author=author, recipients=["alice"]))
        if kind == 1:  # a batch at its expected version
            return target.append_events(session_id, [say("one"), say("two", Role.ASSISTANT)], 0)
        if kind == 2:  # a batch at a stale version: nothing written
            return target.append_events(session_id, [say("stale")], 5)
        if kind == 3:  # a synthetic message: not counted
            return target.add_message(session_id, say("note", Role.SYSTEM, synthetic=True))
        return target.add_message(session_id, say("from alice", author="alice"))

    results = await asyncio.gather(*(write(index) for index in range(20)))
    summaries = {
        summary.session.id: summary
        for summary in (await stores[0].list_summaries(ALICE, PageRequest(size=100))).items
    }
    for index, session in enumerate(sessions):
        kind, summary = index % 5, summaries[session.id]
        log = await stores[0].read(session.id)
        contents_of, version = {
            0: (["hello"], 1),
            1: (["one", "two"], 1),
            2: ([], 0),
            3: (["note"], 1),
            4: (["from alice"], 1),
        }[kind]
        assert contents(log) == contents_of
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert await stores[0].version(session.id) == version
        assert summary.message_count == {0: 1, 1: 2, 2: 0, 3: 0, 4: 1}[kind]
        first = {0: f"writer-{index}", 4: "alice"}.get(kind)
        assert (summary.started_by and summary.started_by.id) == first
        participants = [user.id for user in await stores[0].participants(session.id)]
        assert participants == ([] if first is None else [first])
        answer = results[index]
        if kind in (1, 2):
            assert answer is (kind == 1)
        else:
            assert isinstance(answer, Message)
            assert (answer.session_id, answer.seq) == (session.id, 1)
    for index in range(0, 20, 5):
        assert await stores[0].get_user(f"writer-{index}") is not None


async def test_appends_cancelled_at_any_point_land_whole_or_not_at_all(store: Store) -> None:
    """A caller's timeout may cancel an append anywhere in its work: before it starts,
    waiting for a connection, between its statements, while it commits. Each lands whole
    or not at all, the log stays gap-free with its version and counts agreeing, and the
    store goes on working."""
    session = await new_session(store)
    took = []
    for timed in range(3):
        started = time.perf_counter()
        batch = [say(f"timed{timed}.{part}") for part in range(3)]
        assert await store.append_events(session.id, batch, await store.version(session.id))
        took.append(time.perf_counter() - started)
    # The moments of cancelling are spread over one append's time.
    quickest = min(took)
    loop = asyncio.get_running_loop()
    rounds = 40
    for point in range(rounds):
        batch = [say(f"{point}.{part}") for part in range(3)]
        version = await store.version(session.id)
        task = asyncio.create_task(store.append_events(session.id, batch, version))
        loop.call_later(quickest * point / rounds, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task
    after = await store.add_message(session.id, say("after"))
    log = await store.read(session.id)
    assert log[-1].id == after.id
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    appends = [content.split(".")[0] for content in contents(log[:-1])]
    assert set(Counter(appends).values()) == {3}  # whole batches only
    # Each batch is one run of the log, never interleaved with another.
    assert appends == [name for name in dict.fromkeys(appends) for _ in range(3)]
    assert await store.version(session.id) == len(appends) // 3 + 1
    [summary] = (await store.list_summaries(ALICE)).items
    assert summary.message_count == len(log)
    assert (await store.add_message(session.id, say("and on"))).seq == len(log) + 1
