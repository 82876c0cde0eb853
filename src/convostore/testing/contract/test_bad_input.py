"""Wrong calls: each raises `InvalidArgumentError` (a `ValueError` and a `StoreError`)
and writes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from convostore import (
    COMPACTION,
    Attachment,
    EventFilter,
    EventWrite,
    InvalidArgumentError,
    MessageWrite,
    PageRequest,
    Role,
    SessionFilter,
    Store,
    StoreError,
    ToolCall,
    User,
)
from convostore.testing.fixtures import StoreFactory
from convostore.testing.helpers import ALICE, new_session, say, snapshot

Call = Callable[[Store, str], Awaitable[object]]
TOO_LONG = "x" * 256
BLANK_IDS = ["", "   ", "\t\n", TOO_LONG]


def bad(value: Any) -> Any:
    """A value of the wrong type, passed where the signature says otherwise."""
    return value


BAD_CALLS: dict[str, Call] = {
    # ids
    **{
        f"session-id-{i}": (lambda s, sid, v=v: s.get_session(v))  # type: ignore[misc]
        for i, v in enumerate(BLANK_IDS)
    },
    **{
        f"create-id-{i}": (lambda s, sid, v=v: s.create_session(ALICE, session_id=v))  # type: ignore[misc]
        for i, v in enumerate(BLANK_IDS)
    },
    **{
        f"event-id-{i}": (lambda s, sid, v=v: s.add_message(sid, say("x", id=v)))  # type: ignore[misc]
        for i, v in enumerate(BLANK_IDS)
    },
    **{
        f"user-id-{i}": (lambda s, sid, v=v: s.put_user(User(v, "name")))  # type: ignore[misc]
        for i, v in enumerate(BLANK_IDS)
    },
    "non-string-session-id": lambda s, sid: s.get_session(bad(42)),
    "append-to-blank-session": lambda s, sid: s.add_message(" ", say("x")),
    "read-blank-session": lambda s, sid: s.read(""),
    "version-blank-session": lambda s, sid: s.version(""),
    "delete-blank-session": lambda s, sid: s.delete_session(""),
    "blank-owner-id": lambda s, sid: s.create_session(""),
    "blank-author-id": lambda s, sid: s.add_message(sid, say("x", author="")),
    "non-user-author": lambda s, sid: s.add_message(sid, say("x", author=bad(7))),
    "recipients-as-a-string": lambda s, sid: s.add_message(sid, say("x", recipients="alice")),
    "recipients-none": lambda s, sid: s.add_message(sid, say("x", recipients=bad(None))),
    "tool-calls-none": lambda s, sid: s.add_message(sid, say("x", tool_calls=bad(None))),
    "attachments-a-number": lambda s, sid: s.add_message(sid, say("x", attachments=bad(0))),
    "data-a-string": lambda s, sid: s.add_message(sid, say("x", data=bad(""))),
    "assets-a-bool": lambda s, sid: s.add_message(sid, say("x", assets=bad(False))),
    # users
    "user-kind": lambda s, sid: s.put_user(User("u", "n", kind=bad("robot"))),
    "user-display-name": lambda s, sid: s.put_user(User("u", bad(None))),
    "user-metadata-not-json": lambda s, sid: s.put_user(User("u", "n", metadata={"s": {1}})),
    "put-user-not-a-user": lambda s, sid: s.put_user(bad({"id": "u"})),
    # sessions
    "blank-kind": lambda s, sid: s.create_session(ALICE, kind=" "),
    "title-not-a-string": lambda s, sid: s.create_session(ALICE, title=bad(5)),
    "metadata-not-a-mapping": lambda s, sid: s.create_session(ALICE, metadata=bad([1])),
    "metadata-not-json": lambda s, sid: s.create_session(ALICE, metadata={"x": object()}),
    "metadata-nan": lambda s, sid: s.create_session(ALICE, metadata={"x": float("nan")}),
    "set-title-not-a-string": lambda s, sid: s.set_title(sid, bad(5)),
    "update-not-a-session": lambda s, sid: s.update_session(bad({"id": sid})),
    # messages and events
    "role": lambda s, sid: s.add_message(sid, say("x", "robot")),
    "content-none": lambda s, sid: s.add_message(sid, MessageWrite("user", bad(None))),
    "branch-empty": lambda s, sid: s.add_message(sid, say("x", branch="")),
    "branch-double-dot": lambda s, sid: s.add_message(sid, say("x", branch="a..b")),
    "branch-trailing-dot": lambda s, sid: s.append_event(sid, EventWrite("APP", branch="a.")),
    "event-metadata-not-json": lambda s, sid: s.append_event(
        sid, EventWrite("APP", metadata={"x": {1, 2}})
    ),
    "payload-not-json": lambda s, sid: s.append_event(sid, EventWrite("APP", payload=object())),
    "message-via-event-write": lambda s, sid: s.append_event(sid, EventWrite("MESSAGE")),
    "compaction-without-kept-ids": lambda s, sid: s.append_event(sid, EventWrite(COMPACTION)),
    "compaction-kept-ids-not-strings": lambda s, sid: s.append_event(
        sid, EventWrite(COMPACTION, payload={"kept_event_ids": [1, 2]})
    ),
    "tool-call-not-a-tool-call": lambda s, sid: s.add_message(
        sid, say("x", tool_calls=[bad({"id": "c"})])
    ),
    "tool-call-arguments-not-json": lambda s, sid: s.add_message(
        sid, say("x", tool_calls=[ToolCall("c", "n", {"x": object()})])
    ),
    "attachment-not-an-attachment": lambda s, sid: s.add_message(
        sid, say("x", attachments=[bad("file.txt")])
    ),
    "attachment-blank-id": lambda s, sid: s.add_message(
        sid, say("x", attachments=[Attachment(" ", "f")])
    ),
    "empty-embedding": lambda s, sid: s.add_message(
        sid, say("x", embedding=[], embedding_model="m")
    ),
    "embedding-not-floats": lambda s, sid: s.add_message(
        sid, say("x", embedding=bad(["a", "b"]), embedding_model="m")
    ),
    "embedding-without-model": lambda s, sid: s.add_message(sid, say("x", embedding=[1.0])),
    "embedding-beyond-single-precision": lambda s, sid: s.add_message(
        sid, say("x", embedding=[1.0, 1e300], embedding_model="m")
    ),
    "embedding-not-a-number": lambda s, sid: s.add_message(
        sid, say("x", embedding=[1.0, float("nan")], embedding_model="m")
    ),
    "search-vector-infinite": lambda s, sid: s.search(vector=[1.0, -float("inf")]),
    "append-not-a-write": lambda s, sid: s.append_event(sid, bad("hello")),
    "batch-with-a-non-write": lambda s, sid: s.append_events(sid, [say("ok"), bad(None)], 0),
    "expected-version-negative": lambda s, sid: s.append_events(sid, [say("x")], -1),
    "expected-version-bool": lambda s, sid: s.append_events(sid, [say("x")], bad(True)),
    "expected-version-str": lambda s, sid: s.append_events(sid, [say("x")], bad("0")),
    "narration-not-a-string": lambda s, sid: s.set_narration(sid, "m", bad(5)),
    # reads
    "filter-limit-and-last": lambda s, sid: s.read(sid, EventFilter(limit=1, last=1)),
    "filter-negative-last": lambda s, sid: s.read(sid, EventFilter(last=-1)),
    "filter-negative-limit": lambda s, sid: s.read(sid, EventFilter(limit=-1)),
    "filter-negative-after-seq": lambda s, sid: s.read(sid, EventFilter(after_seq=-1)),
    "filter-bool-last": lambda s, sid: s.read(sid, EventFilter(last=bad(True))),
    "filter-float-limit": lambda s, sid: s.read(sid, EventFilter(limit=bad(1.5))),
    "filter-bad-type": lambda s, sid: s.read(sid, EventFilter(types=["lower"])),
    "filter-bad-role": lambda s, sid: s.read(sid, EventFilter(roles=["robot"])),
    "filter-bad-branch": lambda s, sid: s.read(sid, EventFilter(branch="a..b")),
    "filter-text-not-a-string": lambda s, sid: s.read(sid, EventFilter(text=bad(5))),
    "messages-negative-last": lambda s, sid: s.messages(sid, last=-2),
    # listings
    "page-not-a-page-request": lambda s, sid: s.list_sessions("alice", bad(10)),
    "page-unknown-order": lambda s, sid: s.list_sessions(
        "alice", PageRequest(order=bad("sideways"))
    ),
    "page-size-bool": lambda s, sid: s.list_sessions("alice", PageRequest(size=bad(True))),
    "filter-not-a-session-filter": lambda s, sid: s.count_sessions("alice", bad("chat")),
    "filter-kind-not-a-string": lambda s, sid: s.list_sessions(
        "alice", None, SessionFilter(kind=bad(3))
    ),
    "blank-owner-listing": lambda s, sid: s.list_sessions(""),
    "blank-owner-count": lambda s, sid: s.count_sessions(" "),
    "blank-part-of": lambda s, sid: s.find_or_create_part("", ALICE),
}


@pytest.mark.parametrize("call", list(BAD_CALLS.values()), ids=list(BAD_CALLS))
async def test_bad_arguments_are_refused_and_write_nothing(store: Store, call: Call) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("existing", id="m"))
    before = await snapshot(store, session.id)
    users_before = await store.get_user("u")
    with pytest.raises(InvalidArgumentError) as caught:
        await call(store, session.id)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, StoreError)
    assert await snapshot(store, session.id) == before
    assert await store.get_user("u") == users_before
    assert await store.count_sessions(ALICE.id) == 1


async def test_ids_of_255_characters_are_accepted(store: Store) -> None:
    longest = "é" * 255
    session = await new_session(store, User(longest, "n"), session_id=longest)
    message = await store.add_message(session.id, say("x", id=longest, author=longest))
    assert (await store.read(longest)) == [message]
    assert await store.get_user(longest) == User(longest, "n")


async def test_invalid_indexed_metadata_keys_are_refused(connect_store: StoreFactory) -> None:
    for keys in (["bad key"], [""], ["x" * 65], [bad(5)]):
        with pytest.raises(InvalidArgumentError):
            await connect_store(indexed_metadata=keys)


async def test_update_with_bad_values_writes_nothing(store: Store) -> None:
    session = await new_session(store, title="t")
    for changed in (
        replace(session, title=bad(5)),
        replace(session, metadata=bad([1])),
        replace(session, metadata={"x": {1}}),
        replace(session, id=""),
    ):
        with pytest.raises(InvalidArgumentError):
            await store.update_session(changed)
    assert await store.get_session(session.id) == session


@pytest.mark.parametrize("lone", ["lone \ud800 surrogate", "nul \x00 inside"])
async def test_text_no_backend_can_store_is_refused_everywhere(store: Store, lone: str) -> None:
    """A lone surrogate is not Unicode, and a NUL ends a string in some databases: every
    backend refuses both, none stores half."""
    session = await store.create_session(ALICE)
    writes = [MessageWrite(Role.USER, lone), MessageWrite(Role.TOOL, "ok", tool_call_id=lone)]
    if "\x00" not in lone:  # JSON escapes a NUL, so metadata may hold one
        writes.append(MessageWrite(Role.USER, "ok", metadata={"note": lone}))
    for write in writes:
        with pytest.raises(InvalidArgumentError):
            await store.add_message(session.id, write)
    with pytest.raises(InvalidArgumentError):
        await store.create_session(ALICE, title=lone)
    with pytest.raises(InvalidArgumentError):
        await store.put_user(User(lone, "x"))
    with pytest.raises(InvalidArgumentError):
        await store.read(session.id, EventFilter(text=lone))
    assert await store.read(session.id) == []
    assert await store.version(session.id) == 0
    assert await store.count_sessions(ALICE.id) == 1


async def test_json_values_may_hold_a_nul(store: Store) -> None:
    session = await store.create_session(ALICE, metadata={"note": "a\x00b"})
    message = await store.add_message(
        session.id, MessageWrite(Role.USER, "ok", metadata={"note": "c\x00d"})
    )
    assert (await store.get_session(session.id)).metadata == {"note": "a\x00b"}  # type: ignore[union-attr]
    [stored] = await store.messages(session.id)
    assert stored.metadata == message.metadata == {"note": "c\x00d"}


@pytest.mark.parametrize("lone", ["lone \ud800 surrogate", "nul \x00 inside"])
async def test_indexed_metadata_is_text_every_backend_can_hold(
    indexed_store: Store, lone: str
) -> None:
    with pytest.raises(InvalidArgumentError):
        await indexed_store.create_session(ALICE, metadata={"tenant": lone})
    with pytest.raises(InvalidArgumentError):
        await indexed_store.find_sessions_by_metadata("tenant", lone)
    assert await indexed_store.count_sessions(ALICE.id) == 0
    # Outside the index, JSON holds a NUL as an escape.
    if "\x00" in lone:
        session = await indexed_store.create_session(ALICE, metadata={"note": lone})
        assert await indexed_store.get_session(session.id) == session
