"""The sync facade: the same API as plain blocking calls, for scripts."""

from __future__ import annotations

import inspect
import threading

import pytest

import convostore.sync
from convostore import (
    ConversationFactory,
    EventFilter,
    Message,
    Page,
    Session,
    SessionNotFoundError,
    Store,
    StoreError,
    UnknownUserError,
    UserMessage,
)
from convostore.testing.fixtures import BackendUnderTest
from convostore.testing.helpers import ALICE, BOB, say

PUBLIC_COROUTINES = sorted(
    name
    for name, member in inspect.getmembers(Store)
    if not name.startswith("_") and inspect.iscoroutinefunction(member)
)


def test_a_small_scenario(backend: BackendUnderTest) -> None:
    with convostore.sync.connect(backend()) as store:
        session = store.create_session(ALICE, title="sync")
        assert isinstance(session, Session)
        assert store.get_session(session.id) == session
        first = store.add_message(session.id, say("hello", author=ALICE))
        second = store.add_message(session.id, say("hi", "assistant", author=BOB))
        assert isinstance(first, Message)
        assert store.read(session.id) == [first, second]
        assert [m.content for m in store.messages(session.id, last=1)] == ["hello", "hi"]
        assert store.read(session.id, EventFilter(text="HELLO")) == [first]
        page = store.list_sessions(ALICE.id)
        assert isinstance(page, Page)
        assert [s.id for s in page.items] == [session.id]
        assert page.next_cursor is None
        assert store.count_sessions(ALICE.id) == 1
        assert store.version(session.id) == 2
        assert store.participants(session.id) == [ALICE, BOB]
        with pytest.raises(SessionNotFoundError):
            store.add_message("missing", say("x"))
        with pytest.raises(UnknownUserError):
            store.add_message(session.id, say("x", author="ghost"))
        assert store.version(session.id) == 2


def test_every_public_coroutine_is_a_blocking_method(backend: BackendUnderTest) -> None:
    assert "add_message" in PUBLIC_COROUTINES
    store = convostore.sync.connect(backend())
    try:
        for name in PUBLIC_COROUTINES:
            method = getattr(store, name)
            assert callable(method), name
            assert not inspect.iscoroutinefunction(method), name
        result = store.version("nothing")
        assert result == 0
        assert not inspect.isawaitable(result)
    finally:
        store.close()


def test_close_releases_the_store_and_data_persists(backend: BackendUnderTest) -> None:
    store = convostore.sync.connect(backend())
    persistent = store.capabilities.persistent
    session = store.create_session(ALICE)
    store.add_message(session.id, say("kept"))
    store.close()
    if not persistent:
        pytest.skip("the backend keeps nothing after close")
    with convostore.sync.connect(backend()) as reopened:
        assert [m.content for m in reopened.messages(session.id)] == ["kept"]


def test_calls_from_several_threads(backend: BackendUnderTest) -> None:
    with convostore.sync.connect(backend()) as store:
        session = store.create_session(ALICE)
        errors: list[BaseException] = []

        def writer(index: int) -> None:
            try:
                for n in range(10):
                    store.add_message(session.id, say(f"{index}-{n}"))
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert [e.seq for e in store.read(session.id)] == list(range(1, 41))
        assert store.version(session.id) == 40


def _shape(signature: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


@pytest.mark.parametrize("name", PUBLIC_COROUTINES)
def test_every_method_is_declared_with_the_async_signature(name: str) -> None:
    """Declared on the class (so mypy, IDEs and dir() see it), never found by a proxy."""
    declared = inspect.getattr_static(convostore.sync.SyncStore, name)
    assert inspect.isfunction(declared), name
    async_method = getattr(Store, name)
    assert _shape(inspect.signature(declared)) == _shape(inspect.signature(async_method))
    if name != "close":  # the facade's close also stops its loop thread, and says so
        assert inspect.getdoc(declared) == inspect.getdoc(async_method)


def test_the_facade_completes_in_a_repl(backend: BackendUnderTest) -> None:
    with convostore.sync.connect(backend()) as store:
        names = dir(store)
        assert set(PUBLIC_COROUTINES) <= set(names)
        assert {"close", "capabilities", "indexed_metadata", "target"} <= set(names)
        assert isinstance(store.target, Store)
        assert store.capabilities == store.target.capabilities


def test_sync_connect_takes_what_connect_takes() -> None:
    assert _shape(inspect.signature(convostore.sync.connect)) == _shape(
        inspect.signature(convostore.connect)
    )


def test_work_after_close_is_a_store_error_and_closing_twice_is_harmless(
    backend: BackendUnderTest,
) -> None:
    store = convostore.sync.connect(backend())
    session = store.create_session(ALICE)
    factory = ConversationFactory.for_sync_store(store)
    chat = factory.create_for_participants(None, ALICE, BOB)
    assert not store.closed
    store.close()
    assert store.closed
    store.close()
    with store:
        pass
    for call in (
        lambda: store.get_session(session.id),
        lambda: store.add_message(session.id, say("late")),
        lambda: store.version(session.id),
        lambda: factory.load(session.id),
        chat.flush,
        lambda: chat.add(UserMessage("late")),
    ):
        with pytest.raises(StoreError, match="closed"):
            call()


def test_a_sync_store_called_from_its_own_loop_is_refused(backend: BackendUnderTest) -> None:
    with convostore.sync.connect(backend()) as store:
        factory = ConversationFactory.for_sync_store(store)
        chat = factory.create_for_participants(None, ALICE, BOB)
        refused: list[BaseException] = []

        def listener(event: object) -> None:
            try:
                store.version(chat.session_id)
            except StoreError as error:
                refused.append(error)

        factory.subscribe(listener)
        chat.add(UserMessage("hello"))
        chat.flush()
        assert refused
        assert all("own event loop" in str(error) for error in refused)
        assert store.version(chat.session_id) == 1
