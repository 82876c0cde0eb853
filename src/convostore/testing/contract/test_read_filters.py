"""Reading the log: turn windows, types, roles, synthetic, branches, text, times, paging."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from convostore import (
    EventFilter,
    EventWrite,
    Message,
    MessageWrite,
    Role,
    Store,
)
from convostore.testing.helpers import (
    ALICE,
    append_all,
    contents,
    event,
    new_session,
    say,
    tool_turns,
)

# ------------------------------------------------------------------ last=n and turns


@pytest.mark.parametrize(
    ("last", "expected"),
    [
        (0, []),
        (1, ["q2", "", "r2", "a2"]),
        (2, ["q2", "", "r2", "a2"]),
        (3, ["q2", "", "r2", "a2"]),
        (4, ["q2", "", "r2", "a2"]),
        (5, ["q1", "", "r1", "a1", "q2", "", "r2", "a2"]),
        (8, ["q1", "", "r1", "a1", "q2", "", "r2", "a2"]),
        (100, ["q1", "", "r1", "a1", "q2", "", "r2", "a2"]),
    ],
)
async def test_last_extends_back_to_the_turn_start(
    store: Store, last: int, expected: list[str]
) -> None:
    session = await new_session(store)
    await tool_turns(store, session.id)
    window = await store.read(session.id, EventFilter(last=last))
    assert contents(window) == expected
    assert [m.content for m in await store.messages(session.id, last=last)] == expected


async def test_a_tool_call_never_comes_without_its_result(store: Store) -> None:
    session = await new_session(store)
    log = await tool_turns(store, session.id)
    for last in range(1, 9):
        window = await store.read(session.id, EventFilter(last=last))
        assert len(window) >= last
        assert window == log[-len(window) :]
        calls = {c.id for e in window if isinstance(e, Message) for c in e.tool_calls}
        results = {e.tool_call_id for e in window if isinstance(e, Message) and e.tool_call_id}
        assert calls == results


async def test_no_extension_when_no_turn_start_precedes(store: Store) -> None:
    session = await new_session(store)
    await append_all(
        store,
        session.id,
        [say("a1", Role.ASSISTANT), say("t1", Role.TOOL), say("a2", Role.ASSISTANT)],
    )
    assert contents(await store.read(session.id, EventFilter(last=1))) == ["a2"]
    assert contents(await store.read(session.id, EventFilter(last=2))) == ["t1", "a2"]


async def test_no_extension_when_the_filter_admits_no_turn_start(store: Store) -> None:
    session = await new_session(store)
    await tool_turns(store, session.id)
    assistant = await store.read(session.id, EventFilter(roles=["assistant"], last=1))
    assert contents(assistant) == ["a2"]
    tools = await store.read(session.id, EventFilter(roles=[Role.TOOL], last=1))
    assert contents(tools) == ["r2"]


async def test_extension_stays_among_the_matches(store: Store) -> None:
    session = await new_session(store)
    await append_all(
        store,
        session.id,
        [
            say("q1"),
            event("APP.X"),
            say("a1", Role.ASSISTANT),
            event("APP.X"),
            say("a2", Role.ASSISTANT),
        ],
    )
    window = await store.read(session.id, EventFilter(types=["MESSAGE"], last=1))
    assert contents(window) == ["q1", "a1", "a2"]
    events = await store.read(session.id, EventFilter(types=["APP.X"], last=1))
    assert contents(events) == ["APP.X"]
    assert [e.seq for e in events] == [4]
    mixed = await store.read(session.id, EventFilter(types=["MESSAGE", "APP.X"], last=2))
    assert contents(mixed) == ["q1", "APP.X", "a1", "APP.X", "a2"]


async def test_only_root_non_synthetic_user_messages_start_turns(store: Store) -> None:
    session = await new_session(store)
    await append_all(
        store,
        session.id,
        [
            say("q1"),
            say("a1", Role.ASSISTANT),
            say("synthetic user", synthetic=True),
            say("a2", Role.ASSISTANT),
            say("branch user", branch="side"),
            say("a3", Role.ASSISTANT),
            say("system", Role.SYSTEM),
            event("APP.X"),
            say("a4", Role.ASSISTANT),
        ],
    )
    window = await store.read(session.id, EventFilter(last=1))
    assert contents(window)[0] == "q1"
    assert len(window) == 9
    side = await store.read(session.id, EventFilter(branch="side", last=1))
    assert contents(side)[0] == "q1"
    no_synthetic = await store.read(session.id, EventFilter(exclude_synthetic=True, last=2))
    assert contents(no_synthetic)[0] == "q1"
    assert "synthetic user" not in contents(no_synthetic)


async def test_last_window_lands_on_a_turn_start(store: Store) -> None:
    session = await new_session(store)
    await append_all(store, session.id, [say("q1"), say("a1", Role.ASSISTANT), say("q2")])
    assert contents(await store.read(session.id, EventFilter(last=1))) == ["q2"]
    assert contents(await store.read(session.id, EventFilter(last=2))) == ["q1", "a1", "q2"]


async def test_messages_last(store: Store) -> None:
    session = await new_session(store)
    await append_all(
        store,
        session.id,
        [say("q1"), event("APP.X"), say("a1", Role.ASSISTANT), say("q2"), event("APP.Y")],
    )
    messages = await store.messages(session.id, last=1)
    assert [m.content for m in messages] == ["q2"]
    assert all(isinstance(m, Message) for m in messages)
    assert [m.content for m in await store.messages(session.id, last=2)] == ["q1", "a1", "q2"]
    assert [m.content for m in await store.messages(session.id)] == ["q1", "a1", "q2"]


async def test_unknown_session_reads_empty(store: Store) -> None:
    assert await store.read("missing") == []
    assert await store.read("missing", EventFilter(last=3, text="x")) == []
    assert await store.messages("missing") == []
    assert await store.messages("missing", last=2) == []


# ------------------------------------------------------------------ types, roles, synthetic


async def mixed_log(store: Store, session_id: str) -> None:
    await append_all(
        store,
        session_id,
        [
            say("sys", Role.SYSTEM),
            say("q", author=ALICE),
            event("TOOL.CALL", {"n": 1}),
            say("r", Role.TOOL, tool_call_id="c"),
            event("TOOL.RESULT", {"n": 2}),
            say("a", Role.ASSISTANT),
            say("summary", Role.SYSTEM, synthetic=True),
            event("APP.NOTE", synthetic=True),
        ],
    )


async def test_types_filter(store: Store) -> None:
    session = await new_session(store)
    await mixed_log(store, session.id)
    only = await store.read(session.id, EventFilter(types=["TOOL.RESULT"]))
    assert contents(only) == ["TOOL.RESULT"]
    both = await store.read(session.id, EventFilter(types=["TOOL.CALL", "TOOL.RESULT"]))
    assert contents(both) == ["TOOL.CALL", "TOOL.RESULT"]
    messages = await store.read(session.id, EventFilter(types=["MESSAGE"]))
    assert contents(messages) == ["sys", "q", "r", "a", "summary"]
    assert await store.read(session.id, EventFilter(types=["NOTHING"])) == []
    assert await store.read(session.id, EventFilter(types=[])) == []


async def test_roles_filter_matches_messages_only(store: Store) -> None:
    session = await new_session(store)
    await mixed_log(store, session.id)
    found = await store.read(session.id, EventFilter(roles=["system", Role.TOOL]))
    assert contents(found) == ["sys", "r", "summary"]
    assert contents(await store.read(session.id, EventFilter(roles=["user"]))) == ["q"]


async def test_exclude_synthetic(store: Store) -> None:
    session = await new_session(store)
    await mixed_log(store, session.id)
    found = await store.read(session.id, EventFilter(exclude_synthetic=True))
    assert contents(found) == ["sys", "q", "TOOL.CALL", "r", "TOOL.RESULT", "a"]
    assert len(await store.read(session.id)) == 8


async def test_filters_combine(store: Store) -> None:
    session = await new_session(store)
    await mixed_log(store, session.id)
    found = await store.read(
        session.id, EventFilter(types=["MESSAGE"], roles=["system"], exclude_synthetic=True)
    )
    assert contents(found) == ["sys"]


# ------------------------------------------------------------------ times


async def test_since_and_until_are_inclusive(store: Store) -> None:
    session = await new_session(store)
    base = datetime(2024, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    times = [base + timedelta(microseconds=i) for i in range(5)]
    for i, when in enumerate(times):
        await store.add_message(session.id, say(f"m{i}", created_at=when))
    found = await store.read(session.id, EventFilter(since=times[1], until=times[3]))
    assert contents(found) == ["m1", "m2", "m3"]
    assert contents(await store.read(session.id, EventFilter(since=times[4]))) == ["m4"]
    assert contents(await store.read(session.id, EventFilter(until=times[0]))) == ["m0"]
    one = await store.read(session.id, EventFilter(since=times[2], until=times[2]))
    assert contents(one) == ["m2"]
    assert await store.read(session.id, EventFilter(since=times[3], until=times[1])) == []


async def test_time_bounds_follow_created_at_not_seq(store: Store) -> None:
    session = await new_session(store)
    late = datetime(2030, 1, 1, tzinfo=UTC)
    early = datetime(2020, 1, 1, tzinfo=UTC)
    await store.add_message(session.id, say("late", created_at=late))
    await store.add_message(session.id, say("early", created_at=early))
    await store.add_message(session.id, say("late too", created_at=late))
    found = await store.read(session.id, EventFilter(since=late))
    assert contents(found) == ["late", "late too"]
    assert contents(await store.read(session.id, EventFilter(until=early))) == ["early"]


# ------------------------------------------------------------------ after_seq + limit


async def test_after_seq_and_limit_page_through_a_long_log(store: Store) -> None:
    session = await new_session(store)
    for start in range(0, 250, 50):
        batch: list[MessageWrite | EventWrite] = [
            say(f"m{i}") if i % 5 else event("APP.TICK", {"i": i}) for i in range(start, start + 50)
        ]
        assert await store.append_events(session.id, batch, start // 50)
    seen: list[int] = []
    after = 0
    while True:
        page = await store.read(session.id, EventFilter(after_seq=after, limit=40))
        if not page:
            break
        assert len(page) <= 40
        seen.extend(e.seq for e in page)
        after = page[-1].seq
    assert seen == list(range(1, 251))


async def test_after_seq_and_limit_with_a_filter(store: Store) -> None:
    session = await new_session(store)
    writes: list[MessageWrite | EventWrite] = [
        say(f"m{i}") if i % 5 else event("APP.TICK", {"i": i}) for i in range(100)
    ]
    assert await store.append_events(session.id, writes, 0)
    seen: list[object] = []
    after = 0
    while page := await store.read(
        session.id, EventFilter(types=["APP.TICK"], after_seq=after, limit=3)
    ):
        seen.extend(e.payload["i"] for e in page)
        after = page[-1].seq
    assert seen == list(range(0, 100, 5))


async def test_after_seq_alone_and_limit_alone(store: Store) -> None:
    session = await new_session(store)
    assert await store.append_events(session.id, [say(f"m{i}") for i in range(10)], 0)
    assert [e.seq for e in await store.read(session.id, EventFilter(after_seq=7))] == [8, 9, 10]
    assert [e.seq for e in await store.read(session.id, EventFilter(limit=2))] == [1, 2]
    assert await store.read(session.id, EventFilter(limit=0)) == []
    assert await store.read(session.id, EventFilter(after_seq=10)) == []
    assert len(await store.read(session.id, EventFilter(after_seq=0))) == 10


async def test_last_with_after_seq(store: Store) -> None:
    session = await new_session(store)
    await tool_turns(store, session.id)
    window = await store.read(session.id, EventFilter(after_seq=5, last=1))
    assert [e.seq for e in window] == [8]
    assert [e.seq for e in await store.read(session.id, EventFilter(after_seq=4, last=1))] == [
        5,
        6,
        7,
        8,
    ]


# ------------------------------------------------------------------ text


TEXT_LOG = [
    "Hello World",
    "100% sure",
    "1000 things",
    "a_c",
    "abc",
    "back\\slash",
    "backslash",
    "ks",
    "star * and question ?",
    "[a] bracket",
    "a",
    "quote ' and \" here",
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello", ["Hello World"]),
        ("WORLD", ["Hello World"]),
        ("o w", ["Hello World"]),
        ("100%", ["100% sure"]),
        ("%", ["100% sure"]),
        ("_", ["a_c"]),
        ("a_c", ["a_c"]),
        ("k\\s", ["back\\slash"]),
        ("\\", ["back\\slash"]),
        ("*", ["star * and question ?"]),
        ("?", ["star * and question ?"]),
        ("[a]", ["[a] bracket"]),
        ("' and \"", ["quote ' and \" here"]),
        ("no such text", []),
    ],
)
async def test_text_is_a_literal_case_insensitive_substring(
    store: Store, text: str, expected: list[str]
) -> None:
    session = await new_session(store)
    await append_all(store, session.id, [say(content) for content in TEXT_LOG])
    await store.append_event(session.id, event("APP.X", {"content": text}))
    found = await store.read(session.id, EventFilter(text=text))
    assert contents(found) == expected


async def test_text_matching_is_case_insensitive_beyond_ascii(store: Store) -> None:
    session = await new_session(store)
    await append_all(store, session.id, [say("ÉCOLE Ünïcode"), say("straße"), say("other")])
    found = await store.read(session.id, EventFilter(text="école ünï"))
    assert contents(found) == ["ÉCOLE Ünïcode"]


async def test_text_combines_with_last(store: Store) -> None:
    session = await new_session(store)
    await append_all(
        store, session.id, [say("find q1"), say("find a1", Role.ASSISTANT), say("q2 find")]
    )
    found = await store.read(session.id, EventFilter(text="FIND", last=1))
    assert contents(found) == ["q2 find"]
    found = await store.read(session.id, EventFilter(text="find", last=2))
    assert contents(found) == ["find q1", "find a1", "q2 find"]


# ------------------------------------------------------------------ branches

BRANCHES = [
    None,
    "orchestrator",
    "orchestrator.research",
    "orchestrator.other",
    "orchestrator.research.deep",
    "orch",
    "orch.research",
    "orchestrator_research",
    "orchestratorXresearch",
    "research",
]


@pytest.mark.parametrize(
    ("branch", "visible"),
    [
        ("orchestrator.research", [None, "orchestrator", "orchestrator.research"]),
        ("orchestrator", [None, "orchestrator"]),
        ("orch", [None, "orch"]),
        ("orch.research", [None, "orch", "orch.research"]),
        (
            "orchestrator.research.deep",
            [None, "orchestrator", "orchestrator.research", "orchestrator.research.deep"],
        ),
        ("research", [None, "research"]),
        ("elsewhere", [None]),
    ],
)
async def test_branch_sees_root_ancestors_and_itself(
    store: Store, branch: str, visible: list[str | None]
) -> None:
    session = await new_session(store)
    for name in BRANCHES:
        await store.add_message(session.id, say(str(name), branch=name))
        await store.append_event(session.id, event("APP.X", branch=name))
    found = await store.read(session.id, EventFilter(branch=branch))
    assert [e.branch for e in found] == [b for b in visible for _ in range(2)]
    assert contents(found)[::2] == [str(b) for b in visible]


async def test_no_branch_filter_reads_every_branch(store: Store) -> None:
    session = await new_session(store)
    for name in BRANCHES:
        await store.add_message(session.id, say(str(name), branch=name))
    assert [e.branch for e in await store.read(session.id)] == BRANCHES


# ------------------------------------------------------------------ narration


async def test_set_narration(store: Store) -> None:
    session = await new_session(store)
    message = await store.add_message(session.id, say("hi"))
    version = await store.version(session.id)
    assert await store.set_narration(session.id, message.id, "Alice says hi") is True
    (narrated,) = await store.messages(session.id)
    assert narrated.narration == "Alice says hi"
    assert narrated.stamp != message.stamp
    assert narrated.content == "hi"
    assert narrated.seq == message.seq
    assert await store.version(session.id) == version
    assert await store.set_narration(session.id, message.id, None) is True
    (cleared,) = await store.messages(session.id)
    assert cleared.narration is None
    assert cleared.stamp != narrated.stamp


async def test_set_narration_outside_the_session_writes_nothing(store: Store) -> None:
    first = await new_session(store)
    second = await new_session(store)
    message = await store.add_message(first.id, say("hi"))
    other = await store.append_event(second.id, event("APP.X", id="not-a-message"))
    before = await store.read(first.id)
    assert await store.set_narration(second.id, message.id, "wrong session") is False
    assert await store.set_narration(first.id, "unknown-id", "nothing") is False
    assert await store.set_narration("missing", message.id, "nothing") is False
    assert await store.set_narration(second.id, other.id, "not a message") is False
    assert await store.read(first.id) == before
    assert await store.read(second.id) == [other]


async def test_huge_window_bounds_mean_no_bound(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("one"))
    for huge in (2**63, 10**30):
        assert len(await store.read(session.id, EventFilter(limit=huge))) == 1
        assert len(await store.read(session.id, EventFilter(last=huge))) == 1
        assert await store.read(session.id, EventFilter(after_seq=huge)) == []


async def test_the_text_filter_folds_case_as_python_lower(store: Store) -> None:
    """Case maps fully, as str.lower() does: a dotted capital I becomes two characters,
    a final sigma stays final."""
    session = await new_session(store)
    content = "İSTANBUL ΟΔΟΣ Straße"
    await store.add_message(session.id, say(content))
    await store.add_message(session.id, say("istanbul οδοσ"))
    for needle in [content.lower(), "İstanbul", "οδος", "ΟΔΟΣ", "straße"]:
        found = await store.read(session.id, EventFilter(text=needle))
        expected = [m for m in (content, "istanbul οδοσ") if needle.lower() in m.lower()]
        assert contents(found) == expected, needle
