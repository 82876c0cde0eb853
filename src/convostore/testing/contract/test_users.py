"""Users: stored once, overwritten only by put_user, referenced by id everywhere else."""

from __future__ import annotations

from dataclasses import replace

import pytest

from convostore import (
    NotFoundError,
    Role,
    Store,
    StoreError,
    UnknownUserError,
    User,
)
from convostore.testing.helpers import AGENT, ALICE, BOB, CAROL, new_session, say, snapshot


async def test_put_and_get_user_round_trips_every_field(store: Store) -> None:
    user = User(
        "u-1",
        "Ada Lovelace",
        username="ada",
        email="ada@example.org",
        kind="agent",
        metadata={"team": "analytics", "levels": [1, 2], "nested": {"a": None}},
    )
    assert await store.put_user(user) == user
    assert await store.get_user("u-1") == user


async def test_get_user_unknown_is_none(store: Store) -> None:
    assert await store.get_user("nobody") is None


async def test_put_user_overwrites(store: Store) -> None:
    await store.put_user(User("u-1", "Old", email="old@example.org"))
    await store.put_user(User("u-1", "New", username="new"))
    assert await store.get_user("u-1") == User("u-1", "New", username="new")


async def test_unicode_user_id_round_trips(store: Store) -> None:
    user = User("séance-✓-会话", "Ünïcödé 名前")
    await store.put_user(user)
    assert await store.get_user(user.id) == user
    session = await new_session(store, user)
    assert session.owner_id == user.id


async def test_owner_user_is_inserted_if_absent(store: Store) -> None:
    await new_session(store, ALICE, held_with=AGENT)
    assert await store.get_user(ALICE.id) == ALICE
    assert await store.get_user(AGENT.id) == AGENT


async def test_owner_user_does_not_overwrite_a_stored_user(store: Store) -> None:
    stored = User("alice", "Alice (stored)", email="a@example.org")
    await store.put_user(stored)
    session = await new_session(store, replace(stored, display_name="Impostor", email=None))
    assert session.owner_id == "alice"
    assert await store.get_user("alice") == stored


async def test_author_and_recipients_inserted_if_absent_never_overwritten(store: Store) -> None:
    stored_bob = User("bob", "Bob (stored)", kind="agent")
    await store.put_user(stored_bob)
    session = await new_session(store)
    message = await store.add_message(
        session.id,
        say("hi", author=User("bob", "Not Bob"), recipients=[CAROL, User("bob", "X")]),
    )
    assert message.author_id == "bob"
    assert message.recipient_ids == ("carol", "bob")
    assert await store.get_user("bob") == stored_bob
    assert await store.get_user("carol") == CAROL


async def test_user_ids_of_stored_users_are_accepted(store: Store) -> None:
    await store.put_user(BOB)
    await store.put_user(CAROL)
    session = await new_session(store, "bob", held_with="carol")
    assert (session.owner_id, session.held_with) == ("bob", "carol")
    message = await store.add_message(session.id, say("x", author="bob", recipients=["carol"]))
    assert (message.author_id, message.recipient_ids) == ("bob", ("carol",))


async def test_unknown_owner_id_creates_nothing(store: Store) -> None:
    with pytest.raises(UnknownUserError):
        await store.create_session("ghost", session_id="s-ghost")
    assert await store.get_session("s-ghost") is None


async def test_unknown_held_with_id_creates_nothing_not_even_the_owner(store: Store) -> None:
    with pytest.raises(UnknownUserError):
        await store.create_session(ALICE, session_id="s-1", held_with="ghost")
    assert await store.get_session("s-1") is None
    assert await store.get_user(ALICE.id) is None
    assert await store.count_sessions(ALICE.id) == 0


async def test_unknown_author_id_writes_nothing(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("first", author=ALICE))
    before = await snapshot(store, session.id)
    with pytest.raises(UnknownUserError):
        await store.add_message(session.id, say("x", author="ghost"))
    assert await snapshot(store, session.id) == before


async def test_unknown_recipient_id_writes_nothing_not_even_the_author(store: Store) -> None:
    session = await new_session(store)
    before = await snapshot(store, session.id)
    with pytest.raises(UnknownUserError):
        await store.add_message(session.id, say("x", author=BOB, recipients=[CAROL, "ghost"]))
    assert await snapshot(store, session.id) == before
    assert await store.get_user(BOB.id) is None
    assert await store.get_user(CAROL.id) is None


async def test_unknown_user_error_is_a_lookup_and_value_error(store: Store) -> None:
    session = await new_session(store)
    with pytest.raises(UnknownUserError) as caught:
        await store.add_message(session.id, say("x", Role.ASSISTANT, recipients=["ghost"]))
    assert isinstance(caught.value, StoreError)
    assert isinstance(caught.value, NotFoundError)
    assert isinstance(caught.value, LookupError)
    assert isinstance(caught.value, ValueError)


async def test_deleting_a_session_keeps_its_users(store: Store) -> None:
    session = await new_session(store, ALICE, held_with=AGENT)
    await store.add_message(session.id, say("x", author=BOB, recipients=[CAROL]))
    assert await store.delete_session(session.id)
    for user in (ALICE, AGENT, BOB, CAROL):
        assert await store.get_user(user.id) == user
