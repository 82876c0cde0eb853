"""Time: every timestamp is aware UTC, microsecond exact, whatever the local zone.

The suite runs with TZ=Asia/Kathmandu (UTC+05:45, see `convostore.testing.fixtures`), so
a backend that stores or reads local time is off by 5h45m and fails here.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from convostore import (
    Asset,
    Attachment,
    EventFilter,
    Message,
    PageRequest,
    SessionOrder,
    Store,
)
from convostore.testing.helpers import (
    ALICE,
    MINUS_7,
    PLUS_0545,
    event,
    is_utc,
    new_session,
    say,
    snapshot,
)

NAIVE = r"naive|aware"

INSTANTS = [
    datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=MINUS_7),
    datetime(2024, 7, 1, 23, 59, 59, 999999, tzinfo=PLUS_0545),
    datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(1900, 3, 1, 12, 0, 0, 7, tzinfo=UTC),
    datetime(2999, 12, 31, 0, 0, 0, 500000, tzinfo=MINUS_7),
]


def test_suite_runs_in_a_non_utc_zone() -> None:
    assert time.localtime().tm_gmtoff == 5 * 3600 + 45 * 60


@pytest.mark.parametrize("when", INSTANTS, ids=lambda d: d.isoformat())
async def test_message_created_at_round_trips_to_the_microsecond_as_utc(
    store: Store, when: datetime
) -> None:
    session = await new_session(store)
    written = await store.add_message(session.id, say("x", created_at=when))
    (stored,) = await store.messages(session.id)
    assert stored.created_at == when
    assert is_utc(stored.created_at)
    assert stored.created_at.microsecond == when.astimezone(UTC).microsecond
    assert written.created_at == when
    assert is_utc(written.created_at)


async def test_event_created_at_round_trips_as_utc(store: Store) -> None:
    session = await new_session(store)
    when = datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=MINUS_7)
    await store.append_event(session.id, event(created_at=when))
    (stored,) = await store.read(session.id)
    assert stored.created_at == when
    assert is_utc(stored.created_at)
    assert stored.created_at.hour == 10


async def test_attachment_and_asset_times_round_trip_as_utc(store: Store) -> None:
    session = await new_session(store)
    when = datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=MINUS_7)
    await store.add_message(
        session.id,
        say("x", attachments=[Attachment("a", "f", created_at=when)], assets=[Asset("b", "g")]),
    )
    (stored,) = await store.messages(session.id)
    assert stored.attachments[0].created_at == when
    assert is_utc(stored.attachments[0].created_at)
    assert is_utc(stored.assets[0].created_at)


async def test_expires_at_round_trips_as_utc(store: Store) -> None:
    when = datetime(2030, 6, 1, 0, 0, 0, 654321, tzinfo=PLUS_0545)
    created = await new_session(store, expires_at=when)
    for session in (created, await store.get_session(created.id)):
        assert session is not None
        assert session.expires_at == when
        assert is_utc(session.expires_at)


async def test_store_assigned_times_are_utc_now_not_local_time(store: Store) -> None:
    before = datetime.now(UTC)
    session = await new_session(store)
    message = await store.add_message(session.id, say("x"))
    other = await store.append_event(session.id, event())
    after = datetime.now(UTC)
    stored = await store.get_session(session.id)
    assert stored is not None
    for value in (
        session.created_at,
        stored.created_at,
        stored.last_activity_at,
        message.created_at,
        other.created_at,
        *(e.created_at for e in await store.read(session.id)),
    ):
        assert is_utc(value)
        assert before <= value <= after


async def test_listings_and_summaries_give_utc_times(store: Store) -> None:
    session = await new_session(store, expires_at=datetime(2100, 1, 1, tzinfo=MINUS_7))
    await store.add_message(session.id, say("x", author=ALICE))
    page = PageRequest(order=SessionOrder.LAST_ACTIVITY)
    (listed,) = (await store.list_sessions(ALICE.id, page)).items
    (summary,) = (await store.list_summaries(ALICE.id, page)).items
    for value in (
        listed.created_at,
        listed.last_activity_at,
        listed.expires_at,
        summary.session.created_at,
        summary.session.last_activity_at,
        summary.session.expires_at,
    ):
        assert is_utc(value)
    assert listed == summary.session == await store.get_session(session.id)


async def test_since_and_until_compare_instants_across_zones(store: Store) -> None:
    session = await new_session(store)
    when = datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    await store.add_message(session.id, say("at", created_at=when))
    same_instant = when.astimezone(MINUS_7)
    found = await store.read(session.id, EventFilter(since=same_instant, until=same_instant))
    assert len(found) == 1
    one_us = timedelta(microseconds=1)
    assert await store.read(session.id, EventFilter(since=(when - one_us).astimezone(PLUS_0545)))
    assert await store.read(session.id, EventFilter(until=(when + one_us).astimezone(MINUS_7)))
    assert not await store.read(session.id, EventFilter(since=(when + one_us).astimezone(MINUS_7)))
    assert not await store.read(
        session.id, EventFilter(until=(when - one_us).astimezone(PLUS_0545))
    )


async def test_naive_datetimes_are_refused_and_write_nothing(store: Store) -> None:
    naive = datetime(2024, 1, 2, 3, 4, 5)
    with pytest.raises(ValueError, match=NAIVE):
        await store.create_session(ALICE, session_id="s-naive", expires_at=naive)
    assert await store.get_session("s-naive") is None
    session = await new_session(store)
    before = await snapshot(store, session.id)
    with pytest.raises(ValueError, match=NAIVE):
        await store.add_message(session.id, say("x", created_at=naive))
    with pytest.raises(ValueError, match=NAIVE):
        await store.append_event(session.id, event(created_at=naive))
    with pytest.raises(ValueError, match=NAIVE):
        await store.append_events(session.id, [say("ok"), say("x", created_at=naive)], 0)
    assert await snapshot(store, session.id) == before


async def test_naive_datetimes_refused_in_attachments(store: Store) -> None:
    session = await new_session(store)
    before = await snapshot(store, session.id)
    naive = datetime(2024, 1, 2, 3, 4, 5)
    with pytest.raises(ValueError, match=NAIVE):
        await store.add_message(session.id, say("x", assets=[Asset("b", "g", created_at=naive)]))
    with pytest.raises(ValueError, match=NAIVE):
        await store.add_message(
            session.id, say("x", attachments=[Attachment("a", "f", created_at=naive)])
        )
    assert await snapshot(store, session.id) == before


async def test_naive_datetimes_refused_in_reads_updates_and_expiry(store: Store) -> None:
    naive = datetime(2024, 1, 2, 3, 4, 5)
    session = await new_session(store)
    with pytest.raises(ValueError, match=NAIVE):
        await store.read(session.id, EventFilter(since=naive))
    with pytest.raises(ValueError, match=NAIVE):
        await store.read(session.id, EventFilter(until=naive))
    with pytest.raises(ValueError, match=NAIVE):
        await store.delete_expired(naive)
    with pytest.raises(ValueError, match=NAIVE):
        await store.update_session(replace(session, expires_at=naive))
    assert await store.get_session(session.id) == session


async def test_messages_read_back_in_seq_order_not_time_order(store: Store) -> None:
    session = await new_session(store)
    await store.add_message(session.id, say("new", created_at=datetime(2030, 1, 1, tzinfo=UTC)))
    await store.add_message(session.id, say("old", created_at=datetime(2001, 1, 1, tzinfo=UTC)))
    stored = await store.read(session.id)
    assert [e.content for e in stored if isinstance(e, Message)] == ["new", "old"]
    assert [e.seq for e in stored] == [1, 2]
