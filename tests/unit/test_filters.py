"""The reference filter: validation, matching, turn windows, branches, the active view."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from convostore.errors import InvalidArgumentError
from convostore.fields import parse_role, validate_branch, validate_event_type
from convostore.filters import (
    EventFilter,
    active_view,
    apply_filter,
    branch_lineage,
    compaction_parts,
    compose_view,
    extend_to_turn_start,
    is_turn_start,
)
from convostore.model import COMPACTION, Event, Message, Role

T = datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def msg(seq: int, role: Role | str = Role.USER, content: str = "", **fields: Any) -> Message:
    return Message(
        id=fields.pop("id", f"e{seq}"),
        session_id="s",
        seq=seq,
        created_at=fields.pop("created_at", T + timedelta(seconds=seq)),
        role=Role(role),
        content=content or f"m{seq}",
        **fields,
    )


def ev(seq: int, event_type: str = "APP.X", **fields: Any) -> Event:
    return Event(
        id=fields.pop("id", f"e{seq}"),
        session_id="s",
        seq=seq,
        type=event_type,
        created_at=fields.pop("created_at", T + timedelta(seconds=seq)),
        **fields,
    )


def seqs(events: Sequence[Event]) -> list[int]:
    return [e.seq for e in events]


def run(events: Sequence[Event], **options: Any) -> list[int]:
    return seqs(apply_filter(events, EventFilter(**options).validated()))


# ------------------------------------------------------------------ validation


def test_validated_normalises_roles_types_and_times() -> None:
    minus_7 = timezone(timedelta(hours=-7))
    since = datetime(2024, 1, 1, 5, tzinfo=minus_7)
    checked = EventFilter(
        roles=["user", Role.TOOL], types=["MESSAGE"], since=since, until=since
    ).validated()
    assert checked.roles == (Role.USER, Role.TOOL)
    assert all(isinstance(r, Role) for r in checked.roles or ())
    assert checked.types == ("MESSAGE",)
    assert checked.since == since
    assert checked.since is not None
    assert checked.since.utcoffset() == timedelta(0)
    assert checked.since.hour == 12


def test_validated_keeps_a_plain_filter_as_is() -> None:
    assert EventFilter().validated() == EventFilter()


@pytest.mark.parametrize(
    "options",
    [
        {"limit": 1, "last": 1},
        {"last": -1},
        {"limit": -1},
        {"after_seq": -1},
        {"last": True},
        {"limit": 1.5},
        {"after_seq": "3"},
        {"types": ["lower"]},
        {"types": ["A" * 65]},
        {"types": [5]},
        {"roles": ["robot"]},
        {"roles": ["USER"]},
        {"branch": ""},
        {"branch": "a..b"},
        {"branch": ".a"},
        {"branch": "a."},
        {"text": 5},
        {"since": datetime(2024, 1, 1)},
        {"until": datetime(2024, 1, 1)},
        {"since": "2024-01-01"},
    ],
    ids=repr,
)
def test_validated_refuses_bad_values(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        EventFilter(**options).validated()


def test_validate_event_type() -> None:
    for good in ("MESSAGE", "COMPACTION", "TOOL.RESULT", "X", "A" * 64, "A1_.Z"):
        assert validate_event_type(good) == good
    for wrong in ("", "lower", "1ABC", "A" * 65, "A B", "A-B", "_A", ".A", "Ä"):
        with pytest.raises(InvalidArgumentError):
            validate_event_type(wrong)


def test_validate_branch() -> None:
    for good in ("a", "a.b", "orchestrator.research.deep", "with space", "ü"):
        assert validate_branch(good) == good
    for wrong in ("", ".", "a.", ".a", "a..b"):
        with pytest.raises(InvalidArgumentError):
            validate_branch(wrong)


def test_parse_role() -> None:
    assert parse_role("assistant") is Role.ASSISTANT
    assert parse_role(Role.TOOL) is Role.TOOL
    with pytest.raises(InvalidArgumentError):
        parse_role("robot")


# ------------------------------------------------------------------ matching


LOG: list[Event] = [
    msg(1, "system"),
    msg(2, "user", "Hello 100% World"),
    ev(3, "TOOL.CALL"),
    msg(4, "tool", "a_c"),
    ev(5, "TOOL.RESULT", payload={"text": "hello"}),
    msg(6, "assistant", "abc", branch="orch"),
    msg(7, "system", "summary", synthetic=True),
    ev(8, "APP.NOTE", synthetic=True, branch="orchestrator.research"),
]


def test_types_roles_and_synthetic() -> None:
    assert run(LOG, types=["TOOL.CALL", "TOOL.RESULT"]) == [3, 5]
    assert run(LOG, types=["MESSAGE"]) == [1, 2, 4, 6, 7]
    assert run(LOG, roles=["system"]) == [1, 7]
    assert run(LOG, roles=["user", "tool"]) == [2, 4]
    assert run(LOG, exclude_synthetic=True) == [1, 2, 3, 4, 5, 6]


def test_text_is_literal_case_insensitive_on_messages_only() -> None:
    assert run(LOG, text="hello") == [2]
    assert run(LOG, text="100%") == [2]
    assert run(LOG, text="a_c") == [4]
    assert run(LOG, text="A_C") == [4]
    assert run(LOG, text="%") == [2]


def test_times_are_inclusive() -> None:
    assert run(LOG, since=T + timedelta(seconds=3), until=T + timedelta(seconds=5)) == [3, 4, 5]


def test_after_seq_and_limit() -> None:
    assert run(LOG, after_seq=5) == [6, 7, 8]
    assert run(LOG, after_seq=2, limit=2) == [3, 4]
    assert run(LOG, limit=0) == []


def test_branch_lineage() -> None:
    assert branch_lineage("a") == ("a",)
    assert branch_lineage("a.b.c") == ("a", "a.b", "a.b.c")


def test_branch_visibility() -> None:
    events = [msg(i + 1, branch=b) for i, b in enumerate([None, "orch", "orchestrator", "o.r"])]
    assert run(events, branch="orchestrator") == [1, 3]
    assert run(events, branch="orchestrator.research") == [1, 3]
    assert run(events, branch="orch") == [1, 2]
    assert run(events, branch="o") == [1]
    assert run(events, branch="o.r.x") == [1, 4]


# ------------------------------------------------------------------ turns and windows


def test_is_turn_start() -> None:
    assert is_turn_start(msg(1, "user"))
    assert not is_turn_start(msg(1, "user", synthetic=True))
    assert not is_turn_start(msg(1, "user", branch="a"))
    assert not is_turn_start(msg(1, "assistant"))
    assert not is_turn_start(ev(1, "APP.USER"))


TURNS: list[Event] = [
    msg(1, "user"),
    msg(2, "assistant"),
    msg(3, "tool"),
    msg(4, "assistant"),
    msg(5, "user"),
    msg(6, "assistant"),
    msg(7, "tool"),
    msg(8, "assistant"),
]


@pytest.mark.parametrize(
    ("last", "expected"),
    [
        (0, []),
        (1, [5, 6, 7, 8]),
        (4, [5, 6, 7, 8]),
        (5, list(range(1, 9))),
        (99, list(range(1, 9))),
    ],
)
def test_extend_to_turn_start(last: int, expected: list[int]) -> None:
    assert seqs(extend_to_turn_start(TURNS, last)) == expected
    assert run(TURNS, last=last) == expected


def test_no_extension_without_a_preceding_turn_start() -> None:
    events: list[Event] = [msg(1, "assistant"), msg(2, "tool"), msg(3, "assistant")]
    assert seqs(extend_to_turn_start(events, 1)) == [3]
    assert run(TURNS, roles=["assistant"], last=1) == [8]


def test_can_match_turn_start() -> None:
    assert EventFilter().can_match_turn_start
    assert EventFilter(types=("MESSAGE",)).can_match_turn_start
    assert not EventFilter(types=("APP.X",)).can_match_turn_start
    assert EventFilter(roles=(Role.USER,)).can_match_turn_start
    assert not EventFilter(roles=(Role.ASSISTANT,)).can_match_turn_start


# ------------------------------------------------------------------ active view


def boundary(seq: int, kept: list[str], **payload: Any) -> Event:
    return ev(seq, COMPACTION, payload={"kept_event_ids": kept, **payload}, synthetic=True)


def test_active_view_without_a_boundary_is_the_log() -> None:
    assert active_view(TURNS) == TURNS


def test_active_view_summaries_kept_then_later() -> None:
    log: list[Event] = [
        *TURNS,
        boundary(9, ["e6", "e5"]),
        msg(10, "system", "S1", synthetic=True),
        msg(11, "system", "S2", synthetic=True),
        msg(12, "user"),
    ]
    assert seqs(active_view(log)) == [10, 11, 5, 6, 12]


def test_only_the_newest_boundary_applies() -> None:
    log: list[Event] = [
        *TURNS,
        boundary(9, ["e8"]),
        msg(10, "system", "S1", synthetic=True),
        msg(11, "user"),
        boundary(12, ["e11"]),
        msg(13, "system", "S2", synthetic=True),
        msg(14, "assistant"),
    ]
    assert seqs(active_view(log)) == [13, 11, 14]


def test_summaries_are_the_synthetic_run_after_the_boundary() -> None:
    after: list[Event] = [
        msg(10, "system", synthetic=True),
        ev(11, "APP.SUMMARY", synthetic=True),
        msg(12, "user"),
        msg(13, "system", synthetic=True),
    ]
    kept, summaries = compaction_parts(boundary(9, ["e1"]), after)
    assert kept == ["e1"]
    assert seqs(summaries) == [10, 11]


def test_summaries_named_by_the_boundary() -> None:
    after: list[Event] = [msg(10, "user"), msg(11, "system", synthetic=True)]
    kept, summaries = compaction_parts(boundary(9, [], summary_event_ids=["e11"]), after)
    assert kept == []
    assert seqs(summaries) == [11]
    log: list[Event] = [*TURNS, boundary(9, ["e8"], summary_event_ids=["e11"]), *after]
    assert seqs(active_view(log)) == [11, 8, 10]


def test_compose_view() -> None:
    summaries = [msg(10, "system", synthetic=True)]
    kept = [TURNS[5], TURNS[1]]
    after: list[Event] = [*summaries, msg(11, "user")]
    assert seqs(compose_view(kept, summaries, after)) == [10, 2, 6, 11]
