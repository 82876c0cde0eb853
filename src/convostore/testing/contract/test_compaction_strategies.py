"""Compaction strategies and triggers through `Store.compact`, on every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from convostore import (
    COMPACTION,
    Event,
    EventFilter,
    Message,
    MessageWrite,
    Role,
    SessionNotFoundError,
    Store,
    ToolCall,
)
from convostore.compaction import (
    AnyOf,
    SlidingWindow,
    TokenBudget,
    TokenCount,
    TurnCount,
    TurnWindow,
    snap_to_turn_start,
)
from convostore.errors import InvalidArgumentError
from convostore.testing.helpers import ALICE, new_session


async def _turns(store: Store, session_id: str, count: int, *, with_tools: bool = True) -> None:
    """``count`` turns: a user question, an assistant tool call and its result, an answer."""
    for number in range(count):
        await store.add_message(session_id, MessageWrite(Role.USER, f"question {number}"))
        if with_tools:
            await store.add_message(
                session_id,
                MessageWrite(
                    Role.ASSISTANT,
                    f"looking up {number}",
                    tool_calls=[ToolCall(f"call-{number}", "lookup", {"n": number})],
                ),
            )
            await store.add_message(
                session_id,
                MessageWrite(Role.TOOL, f"result {number}", tool_call_id=f"call-{number}"),
            )
        await store.add_message(session_id, MessageWrite(Role.ASSISTANT, f"answer {number}"))


def _contents(events: Sequence[Event]) -> list[str]:
    return [e.content if isinstance(e, Message) else e.type for e in events]


def _summarize(events: list[Event]) -> str:
    return "summary of " + ", ".join(_contents(events))


async def _view(store: Store, session_id: str) -> list[Event]:
    return await store.read(session_id, EventFilter(active_view=True))


async def test_turn_window_keeps_the_last_turns_behind_one_summary(store: Store) -> None:
    session = await new_session(store)
    await _turns(store, session.id, 4)
    version = await store.version(session.id)

    result = await store.compact(session.id, TurnWindow(2), _summarize)

    assert result is not None
    assert result.version == version + 1 == await store.version(session.id)
    view = await _view(store, session.id)
    assert _contents(view)[0].startswith("summary of question 0")
    assert _contents(view)[1:] == [
        "question 2", "looking up 2", "result 2", "answer 2",
        "question 3", "looking up 3", "result 3", "answer 3",
    ]  # fmt: skip
    assert view[0].synthetic
    assert [e.id for e in view[1:]] == list(result.kept_event_ids)
    assert len(result.compacted_event_ids) == 8
    # Nothing is rewritten: the full log still reads every event, then the batch.
    full = await store.read(session.id)
    assert len(full) == 16 + 2
    assert full[16].type == COMPACTION


async def test_sliding_window_snaps_forward_to_a_turn_start(store: Store) -> None:
    session = await new_session(store)
    await _turns(store, session.id, 3)

    # The last 6 events start mid-turn (at "looking up 1"); the cut moves forward to
    # "question 2", so no tool call is kept without its result or vice versa.
    result = await store.compact(session.id, SlidingWindow(6), _summarize)

    assert result is not None
    assert _contents(await _view(store, session.id))[1:] == [
        "question 2", "looking up 2", "result 2", "answer 2",
    ]  # fmt: skip


async def test_token_budget_keeps_the_newest_turn_even_over_budget(store: Store) -> None:
    session = await new_session(store)
    await _turns(store, session.id, 2, with_tools=False)
    await store.add_message(session.id, MessageWrite(Role.USER, "word " * 50))
    await store.add_message(session.id, MessageWrite(Role.ASSISTANT, "word " * 50))

    def words(text: str) -> int:
        return len(text.split())

    result = await store.compact(session.id, TokenBudget(10, count_tokens=words), _summarize)

    assert result is not None
    view = await _view(store, session.id)
    assert len(view) == 3  # the summary and the newest turn, 100 words over a 10 budget
    assert isinstance(view[1], Message)
    assert view[1].role is Role.USER


async def test_token_budget_keeps_what_fits(store: Store) -> None:
    session = await new_session(store)
    for number in range(6):
        await store.add_message(session.id, MessageWrite(Role.USER, f"q{number} two"))
        await store.add_message(session.id, MessageWrite(Role.ASSISTANT, f"a{number} two"))

    def words(text: str) -> int:
        return len(text.split())

    result = await store.compact(session.id, TokenBudget(9, count_tokens=words), _summarize)

    assert result is not None
    # Each turn is 4 words: two turns (8) fit in 9, three (12) do not.
    assert _contents(await _view(store, session.id))[1:] == ["q4 two", "a4 two", "q5 two", "a5 two"]


async def test_nothing_leaving_the_view_writes_nothing(store: Store) -> None:
    session = await new_session(store)
    await _turns(store, session.id, 2)
    version = await store.version(session.id)

    assert await store.compact(session.id, TurnWindow(5), _summarize) is None
    assert await store.compact(session.id, SlidingWindow(100), _summarize) is None
    assert await store.compact(session.id, TokenBudget(10_000), _summarize) is None
    assert await store.version(session.id) == version


async def test_a_log_without_turn_starts_is_never_cut(store: Store) -> None:
    session = await new_session(store)
    for number in range(5):
        await store.add_message(session.id, MessageWrite(Role.ASSISTANT, f"note {number}"))

    assert await store.compact(session.id, SlidingWindow(1), _summarize) is None
    assert await store.version(session.id) == 5


async def test_triggers_decide_whether_to_compact(store: Store) -> None:
    session = await new_session(store)
    await _turns(store, session.id, 3, with_tools=False)

    assert await store.compact(session.id, TurnWindow(1), _summarize, TurnCount(3)) is None
    assert await store.compact(session.id, TurnWindow(1), _summarize, TokenCount(1000)) is None
    assert await store.version(session.id) == 6

    fired = AnyOf(TokenCount(1000), TurnCount(2))
    assert await store.compact(session.id, TurnWindow(1), _summarize, fired) is not None
    # The view now holds one turn: the turn trigger no longer fires.
    assert await store.compact(session.id, TurnWindow(1), _summarize, TurnCount(2)) is None


async def test_second_compaction_summarises_the_first_summary(store: Store) -> None:
    session = await new_session(store)
    await _turns(store, session.id, 3, with_tools=False)
    assert await store.compact(session.id, TurnWindow(2), lambda events: "first") is not None
    await _turns(store, session.id, 1, with_tools=False)
    seen: list[list[str]] = []

    async def summarize(events: list[Event]) -> list[str]:
        seen.append(_contents(events))
        return ["second a", "second b"]

    result = await store.compact(session.id, TurnWindow(1), summarize)

    assert result is not None
    assert seen == [["first", "question 1", "answer 1", "question 2", "answer 2"]]
    assert _contents(await _view(store, session.id)) == [
        "second a", "second b", "question 0", "answer 0",
    ]  # fmt: skip


async def test_racing_compactions_apply_exactly_once(store: Store) -> None:
    session = await new_session(store)
    await _turns(store, session.id, 4)
    both_read = asyncio.Barrier(2)

    async def summarize(events: list[Event]) -> str:
        await both_read.wait()  # both runs hold the same version before either writes
        return "summary"

    results = await asyncio.gather(
        store.compact(session.id, TurnWindow(1), summarize),
        store.compact(session.id, TurnWindow(1), summarize),
    )

    assert sum(result is not None for result in results) == 1
    compactions = await store.read(session.id, EventFilter(types=[COMPACTION]))
    assert len(compactions) == 1


async def test_an_append_racing_a_compaction_is_never_lost(store: Store) -> None:
    session = await new_session(store)
    await _turns(store, session.id, 3, with_tools=False)

    async def summarize_while_someone_appends(events: list[Event]) -> str:
        await store.add_message(session.id, MessageWrite(Role.USER, "late question"))
        return "summary"

    # The append moved the version: this compaction is refused, the append stands.
    assert await store.compact(session.id, TurnWindow(1), summarize_while_someone_appends) is None
    assert _contents(await _view(store, session.id))[-1] == "late question"

    # After a compaction, an append lands after the kept events.
    assert await store.compact(session.id, TurnWindow(1), _summarize) is not None
    await store.add_message(session.id, MessageWrite(Role.ASSISTANT, "late answer"))
    assert _contents(await _view(store, session.id))[1:] == ["late question", "late answer"]


async def test_compacting_an_unknown_session_is_refused(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.compact("no-such-session", TurnWindow(1), _summarize)


async def test_bad_strategy_arguments_are_refused(store: Store) -> None:
    for make in (
        lambda: TurnWindow(0),
        lambda: SlidingWindow(-1),
        lambda: TokenBudget(0),
        lambda: TurnCount(0),
        lambda: AnyOf(),
    ):
        with pytest.raises(InvalidArgumentError):
            make()
    session = await new_session(store, ALICE)
    await _turns(store, session.id, 2, with_tools=False)
    with pytest.raises(InvalidArgumentError):
        await store.compact(session.id, TurnWindow(1), lambda events: 42)  # type: ignore[arg-type, return-value]
    assert await store.version(session.id) == 4


def test_snap_to_turn_start_without_events() -> None:
    assert snap_to_turn_start([], 3) == 0
