"""Generated input through the public API, on every backend: every call gives a result
or a `StoreError`, a refused call writes nothing, and the store stays consistent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convostore import (
    EventFilter,
    EventWrite,
    MessageWrite,
    PageRequest,
    SessionFilter,
    Store,
    StoreError,
    ToolCall,
    User,
)
from convostore.testing.helpers import ALICE, snapshot

Operation = Callable[[Store, str], Awaitable[object]]

# Any code point, lone surrogates and NUL included.
TEXT = st.text(st.characters(exclude_categories=()), max_size=40)
SHORT_TEXT = st.one_of(TEXT, st.sampled_from(["", " ", "x" * 256, "a.b", "A.B_C", "é"]))
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(SHORT_TEXT, inner, max_size=3)
    ),
    max_leaves=12,
)
# Deep values are built, not drawn: a few levels past the limit.
DEEP = st.integers(min_value=95, max_value=1200).map(lambda depth: _nested(depth))
VECTORS = st.one_of(
    st.none(),
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=6),
)
CURSORS = st.one_of(
    st.none(),
    TEXT,
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=", max_size=120),
)
ROLES = st.sampled_from(["user", "assistant", "system", "tool", "robot", ""])
SIZES = st.integers(min_value=-2, max_value=120)


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def operations(draw: st.DrawFn) -> Operation:
    """One public call with generated arguments."""
    choice = draw(st.integers(min_value=0, max_value=10))
    text, other, json_value = draw(SHORT_TEXT), draw(SHORT_TEXT), draw(st.one_of(JSON, DEEP))
    if choice == 0:
        owner = draw(st.sampled_from([ALICE.id, text]))
        return lambda s, sid: s.create_session(
            owner, kind=other, title=text, metadata={"tenant": json_value}
        )
    if choice == 1:
        write = MessageWrite(
            draw(ROLES),
            text,
            author=draw(st.sampled_from([None, ALICE, other])),
            metadata={"m": json_value},
            embedding=draw(VECTORS),
            embedding_model=draw(st.sampled_from([None, "m", other])),
            id=draw(st.sampled_from([None, text])),
            branch=draw(st.sampled_from([None, other])),
            tool_calls=[ToolCall("c", "f", json_value)] if draw(st.booleans()) else (),
        )
        return lambda s, sid: s.add_message(sid, write)
    if choice == 2:
        event = EventWrite(draw(st.sampled_from(["APP.EVENT", text])), payload=json_value)
        return lambda s, sid: s.append_event(sid, event)
    if choice == 3:
        event_filter = EventFilter(
            text=draw(st.sampled_from([None, text])),
            last=draw(st.sampled_from([None, 1, 3])),
            branch=draw(st.sampled_from([None, "a", other])),
        )
        return lambda s, sid: s.read(sid, event_filter)
    if choice == 4:
        page = PageRequest(draw(SIZES), draw(CURSORS))
        return lambda s, sid: s.list_sessions(ALICE, page, SessionFilter(kind=text or None))
    if choice == 5:
        page = PageRequest(draw(SIZES), draw(CURSORS))
        return lambda s, sid: s.list_summaries(ALICE.id, page)
    if choice == 6:
        return lambda s, sid: s.find_sessions_by_metadata("tenant", json_value)
    if choice == 7:
        mode = draw(st.sampled_from(["text", "vector", "hybrid", None]))
        vector, k = draw(VECTORS), draw(SIZES)
        return lambda s, sid: s.search(text, vector=vector, mode=mode, k=k)  # type: ignore[arg-type]
    if choice == 8:
        return lambda s, sid: s.put_user(User(text, other, metadata={"m": json_value}))
    if choice == 9:
        return lambda s, sid: s.set_narration(sid, text, other)
    return lambda s, sid: s.get_session(text)


@settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(operations(), min_size=1, max_size=6))
async def test_generated_calls_give_a_result_or_a_store_error(
    indexed_store: Store, calls: list[Operation]
) -> None:
    store = indexed_store
    session = await store.create_session(ALICE)
    for call in calls:
        before = await snapshot(store, session.id)
        sessions_before = await store.count_sessions(ALICE)
        try:
            await call(store, session.id)
        except StoreError:
            assert await snapshot(store, session.id) == before
            assert await store.count_sessions(ALICE) == sessions_before
    events = await store.read(session.id)
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert await store.version(session.id) == len(events)
    listed: list[str] = []
    cursor: str | None = None
    while True:
        page = await store.list_sessions(ALICE, PageRequest(100, cursor))
        listed.extend(s.id for s in page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(listed) == len(set(listed)) == await store.count_sessions(ALICE)
    assert session.id in listed
