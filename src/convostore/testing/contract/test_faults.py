"""Input found to escape the error tree or to be taken when it should not be: each is
refused with a `StoreError` subclass, with a clear message, and nothing is written."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import pytest

from convostore import (
    DataAttachment,
    EventWrite,
    InvalidArgumentError,
    InvalidCursorError,
    PageRequest,
    Role,
    SessionFilter,
    SessionOrder,
    Store,
    StoreClosedError,
    StoreError,
    ToolCall,
    User,
)
from convostore._json import MAX_JSON_DEPTH
from convostore.embedding import HashingEmbedder
from convostore.prepare import MAX_KIND_LENGTH
from convostore.testing.fixtures import StoreFactory
from convostore.testing.helpers import AGENT, ALICE, BOB, new_session, say, snapshot

NON_FINITE = [float("nan"), float("inf"), float("-inf"), 1e39, -1e39]


def nested(depth: int) -> Any:
    """A JSON value whose arrays and objects nest ``depth`` deep."""
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


async def assert_nothing_written(store: Store, session_id: str, before: object) -> None:
    assert await snapshot(store, session_id) == before
    assert await store.count_sessions(ALICE.id) == 1


# ------------------------------------------------------------------ vectors


@pytest.mark.parametrize("bad_value", NON_FINITE, ids=repr)
async def test_non_finite_vectors_are_refused(store: Store, bad_value: float) -> None:
    session = await new_session(store)
    before = await snapshot(store, session.id)
    vector = [0.5, bad_value, 0.25]
    with pytest.raises(InvalidArgumentError, match="finite"):
        await store.add_message(session.id, say("x", embedding=vector, embedding_model="m"))
    with pytest.raises(InvalidArgumentError, match="finite"):
        await store.append_events(
            session.id, [say("ok"), say("x", embedding=vector, embedding_model="m")], 0
        )
    with pytest.raises(InvalidArgumentError, match="finite"):
        await store.search(vector=vector)
    await assert_nothing_written(store, session.id, before)


async def test_a_vector_of_the_index_model_must_have_the_index_width(
    connect_store: StoreFactory,
) -> None:
    embedder = HashingEmbedder(16)
    store = await connect_store(embedder=embedder)
    session = await new_session(store)
    before = await snapshot(store, session.id)
    with pytest.raises(InvalidArgumentError, match="width"):
        await store.add_message(
            session.id, say("x", embedding=[0.1] * 8, embedding_model=embedder.name)
        )
    await assert_nothing_written(store, session.id, before)
    # Another model's vectors of any width are stored: the index does not rank them.
    other = await store.add_message(
        session.id, say("y", embedding=[0.1] * 8, embedding_model="another-model")
    )
    assert other.embedding is not None
    assert len(other.embedding) == 8


# ------------------------------------------------------------------ JSON


DEEP = nested(1000)
DEEP_WRITES: dict[str, Any] = {
    "message-metadata": lambda sid: say("x", metadata={"deep": DEEP}),
    "tool-arguments": lambda sid: say(
        "x", Role.ASSISTANT, tool_calls=[ToolCall("c", "f", {"deep": DEEP})]
    ),
    "payload": lambda sid: EventWrite("APP", payload=DEEP),
    "event-metadata": lambda sid: EventWrite("APP", metadata={"deep": DEEP}),
    "data": lambda sid: say("x", data=[DataAttachment("d", "t", "title", DEEP)]),
    "author-metadata": lambda sid: say("x", author=User("deep", "D", metadata={"d": DEEP})),
}


@pytest.mark.parametrize("write", list(DEEP_WRITES.values()), ids=list(DEEP_WRITES))
async def test_json_nested_too_deep_is_refused(store: Store, write: Any) -> None:
    session = await new_session(store)
    before = await snapshot(store, session.id)
    with pytest.raises(InvalidArgumentError, match="nests deeper"):
        await store.append_event(session.id, write(session.id))
    await assert_nothing_written(store, session.id, before)
    assert await store.get_user("deep") is None


async def test_deep_session_metadata_and_lookups_are_refused(indexed_store: Store) -> None:
    with pytest.raises(InvalidArgumentError, match="nests deeper"):
        await indexed_store.create_session(ALICE, metadata={"tenant": DEEP})
    with pytest.raises(InvalidArgumentError, match="nests deeper"):
        await indexed_store.create_session(ALICE, metadata={"other": DEEP})
    with pytest.raises(InvalidArgumentError, match="nests deeper"):
        await indexed_store.find_sessions_by_metadata("tenant", DEEP)
    with pytest.raises(InvalidArgumentError, match="nests deeper"):
        await indexed_store.put_user(User("u", "U", metadata={"d": DEEP}))
    session = await indexed_store.create_session(ALICE)
    with pytest.raises(InvalidArgumentError, match="nests deeper"):
        await indexed_store.update_session(replace(session, metadata={"deep": DEEP}))
    assert await indexed_store.get_session(session.id) == session
    assert await indexed_store.count_sessions(ALICE) == 1
    assert await indexed_store.get_user("u") is None


async def test_json_as_deep_as_the_limit_round_trips(indexed_store: Store) -> None:
    deepest = nested(MAX_JSON_DEPTH - 1)
    session = await indexed_store.create_session(ALICE, metadata={"tenant": deepest})
    assert (await indexed_store.get_session(session.id)) == session
    assert session.metadata == {"tenant": deepest}
    message = await indexed_store.add_message(session.id, say("x", metadata={"d": deepest}))
    session = await indexed_store.get_session(session.id)  # type: ignore[assignment]
    assert (await indexed_store.messages(session.id)) == [message]
    assert await indexed_store.find_sessions_by_metadata("tenant", deepest) == [session]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")], ids=repr)
async def test_a_metadata_lookup_of_a_non_json_value_is_refused(
    indexed_store: Store, value: float
) -> None:
    with pytest.raises(InvalidArgumentError):
        await indexed_store.find_sessions_by_metadata("tenant", value)
    with pytest.raises(InvalidArgumentError):
        await indexed_store.find_sessions_by_metadata("tenant", {"x": value})


# ------------------------------------------------------------------ appends


@pytest.mark.parametrize("writes", [None, 5, "abc", b"abc", {"a": 1}], ids=repr)
async def test_a_batch_that_is_not_a_sequence_of_writes_is_refused(
    store: Store, writes: Any
) -> None:
    session = await new_session(store)
    before = await snapshot(store, session.id)
    with pytest.raises(InvalidArgumentError, match="append_events takes"):
        await store.append_events(session.id, writes, 0)
    await assert_nothing_written(store, session.id, before)


@pytest.mark.parametrize("model", [None, "", "  ", 5], ids=repr)
async def test_an_embedding_needs_a_model_name(store: Store, model: Any) -> None:
    session = await new_session(store)
    with pytest.raises(InvalidArgumentError, match="embedding_model"):
        await store.add_message(session.id, say("x", embedding=[1.0], embedding_model=model))
    assert await store.read(session.id) == []


# ------------------------------------------------------------------ kind


async def test_kind_has_a_documented_limit(store: Store) -> None:
    longest = "界" * MAX_KIND_LENGTH
    session = await store.create_session(ALICE, kind=longest)
    assert (await store.get_session(session.id)) == session
    part = await store.find_or_create_part(session.id, AGENT, title="t", kind=longest)
    assert part.kind == longest
    assert (await store.list_sessions(ALICE, filter=SessionFilter(kind=longest))).items == [session]
    with pytest.raises(InvalidArgumentError, match=str(MAX_KIND_LENGTH)):
        await store.create_session(ALICE, kind=longest + "x")
    with pytest.raises(InvalidArgumentError, match=str(MAX_KIND_LENGTH)):
        await store.find_or_create_part(session.id, BOB, kind="k" * 5000)
    assert await store.count_sessions(ALICE) == 1
    assert [summary.session for summary in await store.list_parts(session.id)] == [part]
    assert await store.get_user(BOB.id) is None


# ------------------------------------------------------------------ cursors


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _forged(document: dict[str, Any]) -> str:
    return _b64(json.dumps(document, separators=(",", ":")).encode())


FORGED = {
    "id-lone-surrogate": _forged({"v": 1, "o": "created", "id": "\ud800"}),
    "id-nul": _forged({"v": 1, "o": "created", "id": "a\x00b"}),
    "id-too-long": _forged({"v": 1, "o": "created", "id": "x" * 300}),
    "at-overflow": _forged({"v": 1, "o": "last_activity", "id": "x", "at": 10**30}),
    "at-underflow": _forged({"v": 1, "o": "last_activity", "id": "x", "at": -(10**30)}),
    "at-past-datetime": _forged({"v": 1, "o": "last_activity", "id": "x", "at": 2**62}),
    "extra-key": _forged({"v": 1, "o": "created", "id": "x", "more": 1}),
    "spaced-json": _b64(b'{"v": 1, "o": "created", "id": "x"}'),
    "reordered": _forged({"o": "created", "v": 1, "id": "x"}),
    "non-ascii": "é" * 20,
    "lone-surrogate": "\udcff" * 8,
    "nul": "\x00",
}


async def _a_real_cursor(store: Store, order: SessionOrder) -> str:
    for _ in range(3):
        await store.create_session(ALICE)
    page = await store.list_sessions(ALICE, PageRequest(size=1, order=order))
    assert page.next_cursor is not None
    return page.next_cursor


async def _assert_cursor_refused(store: Store, cursor: str, order: SessionOrder | None) -> None:
    for listing in (store.list_sessions, store.list_summaries):
        with pytest.raises(InvalidCursorError) as caught:
            await listing(ALICE.id, PageRequest(size=5, cursor=cursor, order=order))
        assert isinstance(caught.value.__cause__, Exception), cursor


@pytest.mark.parametrize("order", list(SessionOrder), ids=lambda o: o.value)
async def test_every_truncated_or_extended_cursor_is_refused(
    store: Store, order: SessionOrder
) -> None:
    cursor = await _a_real_cursor(store, order)
    altered = [cursor[:cut] for cut in range(1, len(cursor))]
    altered += [cursor + extra for extra in ("A", "=", "==", "-", "_", "%3D", " ", "\n", "!")]
    altered += [cursor[:cut] + "!" + cursor[cut:] for cut in range(0, len(cursor), 7)]
    altered += ["A" + cursor, cursor.upper(), cursor.lower()]
    for forged in altered:
        if forged != cursor:
            await _assert_cursor_refused(store, forged, None)
            await _assert_cursor_refused(store, forged, order)
    # The cursor itself still pages on.
    page = await store.list_sessions(ALICE, PageRequest(size=5, cursor=cursor))
    assert len(page.items) == 2


@pytest.mark.parametrize("cursor", list(FORGED.values()), ids=list(FORGED))
async def test_forged_cursors_are_refused(store: Store, cursor: str) -> None:
    await new_session(store)
    await _assert_cursor_refused(store, cursor, None)
    for order in SessionOrder:
        await _assert_cursor_refused(store, cursor, order)


# ------------------------------------------------------------------ closed stores


CLOSED_CALLS: dict[str, Any] = {
    "put_user": lambda s, sid: s.put_user(User("u", "U")),
    "get_user": lambda s, sid: s.get_user("alice"),
    "create_session": lambda s, sid: s.create_session(ALICE),
    "create_session_if_absent": lambda s, sid: s.create_session_if_absent(ALICE, session_id="new"),
    "get_session": lambda s, sid: s.get_session(sid),
    "set_title": lambda s, sid: s.set_title(sid, "t"),
    "delete_session": lambda s, sid: s.delete_session(sid),
    "list_sessions": lambda s, sid: s.list_sessions(ALICE),
    "list_summaries": lambda s, sid: s.list_summaries(ALICE),
    "count_sessions": lambda s, sid: s.count_sessions(ALICE),
    "find_part": lambda s, sid: s.find_part(sid, "agent"),
    "find_or_create_part": lambda s, sid: s.find_or_create_part(sid, "agent"),
    "list_parts": lambda s, sid: s.list_parts(sid),
    "participants": lambda s, sid: s.participants(sid),
    "find_sessions_by_metadata": lambda s, sid: s.find_sessions_by_metadata("tenant", "x"),
    "delete_expired": lambda s, sid: s.delete_expired(),
    "add_message": lambda s, sid: s.add_message(sid, say("x")),
    "append_event": lambda s, sid: s.append_event(sid, EventWrite("APP")),
    "append_events": lambda s, sid: s.append_events(sid, [say("x")], 0),
    "version": lambda s, sid: s.version(sid),
    "read": lambda s, sid: s.read(sid),
    "messages": lambda s, sid: s.messages(sid),
    "set_narration": lambda s, sid: s.set_narration(sid, "m", "n"),
    "search": lambda s, sid: s.search("hello", mode="text"),
    "reembed": lambda s, sid: s.reembed(HashingEmbedder(8)),
}


async def test_work_after_close_is_refused_and_closing_twice_is_harmless(
    connect_store: StoreFactory,
) -> None:
    store = await connect_store(indexed_metadata=["tenant"])
    session = await new_session(store)
    await store.close()
    await store.close()
    assert "closed" in repr(store)
    for name, call in CLOSED_CALLS.items():
        with pytest.raises(StoreClosedError, match="closed") as caught:
            await call(store, session.id)
        assert isinstance(caught.value, StoreError), name
    async with store:
        pass  # leaving the block closes it again: harmless
