"""The memory backend's own indexes against the reference they must agree with.

Reads walk a view of the log from the end or from a cursor instead of filtering the
whole log, and listings walk per-owner indexes; both must answer exactly what
`convostore.filters.apply_filter` over `active_view` answers, and what sorting every
session answers. Random logs (with compactions, branches, synthetic events and tool
turns) and random filters check that, seeded so a failure repeats.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

import convostore
from convostore import EventFilter, EventWrite, MessageWrite, Role, Store, User
from convostore._time import utc_now
from convostore.filters import active_view, apply_filter
from convostore.model import COMPACTION, Event, PageRequest, SessionFilter, SessionOrder

ROLES = (Role.USER, Role.ASSISTANT, Role.TOOL, Role.SYSTEM)
BRANCHES = (None, None, None, "a", "a.b", "c")
WORDS = ("alpha", "beta", "gamma", "delta")


async def random_log(store: Store, rng: random.Random, size: int) -> list[Event]:
    owner = User("owner", "Owner")
    session = await store.create_session(owner)
    start = utc_now()
    for number in range(size):
        when = start + timedelta(seconds=rng.randint(0, 50))
        if number > 3 and rng.random() < 0.06:
            log = await store.read(session.id)
            kept = rng.sample([e.id for e in log], k=min(len(log), rng.randint(0, 3)))
            boundary = EventWrite(
                COMPACTION, payload={"kept_event_ids": kept}, synthetic=True, created_at=when
            )
            summaries = [
                MessageWrite(Role.SYSTEM, f"summary {n}", synthetic=True)
                for n in range(rng.randint(0, 2))
            ]
            version = await store.version(session.id)
            assert await store.append_events(session.id, [boundary, *summaries], version)
        elif rng.random() < 0.15:
            await store.append_event(
                session.id, EventWrite("APP.NOTE", payload={"n": number}, created_at=when)
            )
        else:
            await store.add_message(
                session.id,
                MessageWrite(
                    rng.choice(ROLES),
                    f"{rng.choice(WORDS)} {number}",
                    branch=rng.choice(BRANCHES),
                    created_at=when,
                ),
            )
    return await store.read(session.id)


def random_filter(rng: random.Random, log: list[Event]) -> EventFilter:
    window = rng.choice(("last", "limit", "none"))
    return EventFilter(
        active_view=rng.random() < 0.5,
        types=rng.choice((None, ("MESSAGE",), ("APP.NOTE", "MESSAGE"), ("APP.NOTE",))),
        roles=rng.choice((None, None, (Role.USER,), (Role.ASSISTANT, Role.TOOL))),
        exclude_synthetic=rng.random() < 0.3,
        branch=rng.choice((None, None, "a.b", "c")),
        since=None if rng.random() < 0.8 else log[0].created_at + timedelta(seconds=10),
        text=rng.choice((None, None, "ALPHA", "1")),
        after_seq=rng.choice((None, None, rng.randint(0, len(log) + 2))),
        limit=rng.randint(0, 12) if window == "limit" else None,
        last=rng.randint(0, 12) if window == "last" else None,
    )


async def test_reads_answer_what_the_reference_answers() -> None:
    rng = random.Random(20261130)
    store = await convostore.connect("memory://")
    async with store:
        for _ in range(12):
            log = await random_log(store, rng, rng.randint(1, 80))
            session_id = log[0].session_id
            for _ in range(60):
                event_filter = random_filter(rng, log)
                view = active_view(log) if event_filter.active_view else log
                expected = apply_filter(view, event_filter.validated())
                got = await store.read(session_id, event_filter)
                assert [e.id for e in got] == [e.id for e in expected], event_filter


@pytest.mark.parametrize("order", list(SessionOrder))
async def test_pages_walk_the_owner_index_in_order(order: SessionOrder) -> None:
    rng = random.Random(7)
    store = await convostore.connect("memory://")
    async with store:
        ada = User("ada", "Ada")
        await store.create_session(User("bob", "Bob"))  # Another owner's, never listed.
        parents = [
            await store.create_session(ada, kind=rng.choice(("chat", "task"))) for _ in range(40)
        ]
        created = [s.id for s in parents]
        for parent in rng.sample(parents, 10):
            part = await store.find_or_create_part(parent.id, User(f"agent-{parent.id}", "A"))
            created.append(part.id)
        for _ in range(120):  # Activity reorders the LAST_ACTIVITY index.
            await store.add_message(rng.choice(parents).id, MessageWrite(Role.USER, "hi"))
        await store.delete_session(parents[5].id)
        stored = [s for s in [await store.get_session(i) for i in created] if s is not None]
        for session_filter in (
            SessionFilter(),
            SessionFilter(kind="task"),
            SessionFilter(include_parts=True),
        ):
            walked = []
            cursor = None
            while True:
                page = await store.list_sessions(
                    "ada", PageRequest(size=7, cursor=cursor, order=order), session_filter
                )
                walked.extend(page.items)
                cursor = page.next_cursor
                if cursor is None:
                    break
            listed = [
                s
                for s in stored
                if (session_filter.include_parts or s.part_of is None)
                and session_filter.kind in (None, s.kind)
            ]
            if order is SessionOrder.LAST_ACTIVITY:
                listed.sort(key=lambda s: (s.last_activity_at, s.id), reverse=True)
            else:
                listed.sort(key=lambda s: s.id, reverse=True)
            assert [s.id for s in walked] == [s.id for s in listed]
            assert await store.count_sessions("ada", session_filter) == len(walked)
