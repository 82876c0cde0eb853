"""MySQL/MariaDB backend: the store against asyncmy running the same statements by hand.

Starts its own MariaDB (Debian's mariadb-server, durable settings) on a loopback port
and prints, in one run:

1. appends, one conversation: messages/s through the store and through asyncmy alone
   running the same statements (transaction, session row lock, user check, insert,
   session update) with the same parameters; the ratio (target >= 0.8);
2. the last-20 window of a 1,000-message log: reads/s, store vs the same statement
   (the store warm, as a window read again is, and cold);
3. writers: 8 conversations at once against 1, through one store;
4. listing pages: an owner's first page and a page deep in 5,000 sessions (keyset, so
   both should cost the same).

    .venv/bin/python benchmarks/mysql.py [--messages 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import asyncmy

import convostore
from convostore import EventFilter, MessageWrite, PageRequest, Role
from convostore._time import to_micros, utc_now
from convostore.ids import new_id
from convostore.prepare import new_stamp
from workload import AUTHOR, CONTENT, store_appends


def _connect_options(url: str) -> dict[str, Any]:
    from convostore.backends.mysql import parse_mysql_url
    from convostore.backends.mysql.connection import connect_options, server_facts, session_setup

    target = parse_mysql_url(url)
    options = connect_options(target, target.database)
    options["init_command"] = session_setup(server_facts("MariaDB", 16 << 20))
    return options


async def raw_appends(url: str, count: int) -> float:
    """Messages per second for the store's append statements run by hand on one
    connection, with the parameters the store would send."""
    from convostore.backends.mysql import statements as sql
    from convostore.backends.mysql.statements import search_tokens

    store = await convostore.connect(url)  # Creates the database and the session.
    await store.put_user(AUTHOR)
    session = await store.create_session(AUTHOR)
    await store.close()
    connection = await asyncmy.connect(**_connect_options(url))
    insert = sql.APPENDS.insert_events(1)
    tokens = search_tokens(CONTENT)
    folded = CONTENT.lower()
    try:
        async with connection.cursor() as cursor:
            started = time.perf_counter()
            for _ in range(count):
                now = to_micros(utc_now())
                await connection.begin()
                await cursor.execute(sql.APPENDS.lock_session, (session.id,))
                _, last_seq = await cursor.fetchone()
                await cursor.execute(sql.WRITES.missing_users, ('["ada"]',))
                await cursor.fetchall()
                row = (
                    session.id, last_seq + 1, new_id(), "MESSAGE", now, None, "{}", None, 0,
                    "user", CONTENT, AUTHOR.id, "[]", None, "[]", None, "[]", "[]", "[]",
                    None, None, None, new_stamp(), folded, tokens,
                )  # fmt: skip
                await cursor.execute(insert, row)
                await cursor.execute(
                    sql.APPENDS.advance, (1, new_stamp(), now, 1, AUTHOR.id, session.id)
                )
                await connection.commit()
            return count / (time.perf_counter() - started)
    finally:
        connection.close()


WARM, COLD, RAW = range(3)


async def windows(url: str, reads: int) -> tuple[float, float, float]:
    """Reads per second of the last 20 events of a 1,000-message log: through the store
    (its rows read before, as a window read again and again is), through the store with
    its event cache cleared before every read, and the store's statement run by hand on
    a connection of the store's pool (rows fetched, not made into events). The three
    take turns read by read, so the machine's load falls on each alike."""
    from convostore.backends.mysql import MySQLBackend
    from convostore.backends.mysql import statements as sql

    store = await convostore.connect(url)
    backend = store.backend
    assert isinstance(backend, MySQLBackend)
    connection = await backend.pool.acquire()
    try:
        session = await store.create_session(AUTHOR)
        writes = [MessageWrite(Role.USER, f"{CONTENT} {i}", author=AUTHOR) for i in range(100)]
        for _ in range(10):
            await store.append_events(session.id, writes, await store.version(session.id))
        window = EventFilter(last=20)
        statement = sql.READS.events("newest", sql.READS.flags(window))
        parameters = {"session_id": session.id, "last": 20}
        await store.read(session.id, window)
        spent = [0.0, 0.0, 0.0]
        async with connection.cursor() as cursor:
            for _ in range(reads):
                for kind in (WARM, COLD, RAW):
                    if kind == COLD:
                        backend.event_cache.clear()
                    started = time.perf_counter()
                    if kind == RAW:
                        await cursor.execute(statement, parameters)
                        await cursor.fetchall()
                    else:
                        await store.read(session.id, window)
                    spent[kind] += time.perf_counter() - started
        through_store, cold_store, by_hand = (reads / seconds for seconds in spent)
        return through_store, cold_store, by_hand
    finally:
        backend.pool.release(connection)
        await store.close()


async def listing_pages(url: str, sessions: int, pages: int) -> tuple[float, float]:
    """Milliseconds per page: the first page, and the page after ``sessions - 100``."""
    store = await convostore.connect(url)
    try:
        for start in range(0, sessions, 500):
            await asyncio.gather(
                *(store.create_session(AUTHOR) for _ in range(min(500, sessions - start)))
            )
        first = await store.list_sessions(AUTHOR.id, PageRequest(size=20))
        deep = first
        for _ in range((sessions - 100) // 100):
            deep = await store.list_sessions(
                AUTHOR.id, PageRequest(size=100, cursor=deep.next_cursor)
            )
        cursor = deep.next_cursor
        timings = {}
        for name, page in (("first", PageRequest(size=20)), ("deep", PageRequest(20, cursor))):
            started = time.perf_counter()
            for _ in range(pages):
                await store.list_sessions(AUTHOR.id, page)
            timings[name] = (time.perf_counter() - started) / pages * 1000
        return timings["first"], timings["deep"]
    finally:
        await store.close()


async def run(arguments: argparse.Namespace) -> None:
    from tests.servers.mariadb import MariaDBServer

    with MariaDBServer(durable=True) as server:
        print(f"MariaDB server: {server.url()} (durable: innodb_flush_log_at_trx_commit=1)")
        names = iter(range(1_000_000))

        def url(extra: str = "") -> str:
            return server.url(f"bench_{next(names)}") + extra

        print("\n1. appends, one conversation: store vs raw asyncmy, same statements")
        store_rates: list[float] = []
        raw_rates: list[float] = []
        for _ in range(arguments.rounds):
            store_rates.append(await store_appends(url(), arguments.messages, 1))
            raw_rates.append(await raw_appends(url(), arguments.messages))
        store_rate, raw_rate = statistics.median(store_rates), statistics.median(raw_rates)
        print(f"   store {store_rate:,.0f} msg/s, raw {raw_rate:,.0f} msg/s: "
              f"ratio {store_rate / raw_rate:.2f}")  # fmt: skip

        print("\n2. the last 20 events of a 1,000-message log")
        pairs = [await windows(url(), arguments.messages) for _ in range(arguments.rounds)]
        read_store = statistics.median(p[0] for p in pairs)
        read_cold = statistics.median(p[1] for p in pairs)
        read_raw = statistics.median(p[2] for p in pairs)
        print(f"   store {read_store:,.0f} reads/s (cold: {read_cold:,.0f}), raw "
              f"{read_raw:,.0f} reads/s: ratio {read_store / read_raw:.2f} "
              f"(cold: {read_cold / read_raw:.2f})")  # fmt: skip

        print("\n3. writers: 8 conversations at once vs 1, through one store")
        one: list[float] = []
        eight: list[float] = []
        for _ in range(arguments.rounds):
            one.append(await store_appends(url(), arguments.messages // 4, 1))
            eight.append(await store_appends(url("?pool_max_size=8"), arguments.messages, 8))
        print(f"   1 writer {statistics.median(one):,.0f} msg/s, 8 writers "
              f"{statistics.median(eight):,.0f} msg/s: "
              f"x{statistics.median(eight) / statistics.median(one):.2f}")  # fmt: skip

        print("\n4. listing pages of 20 among 5,000 sessions")
        first, deep = await listing_pages(url(), 5000, 200)
        print(f"   first page {first:.2f} ms, page after 4,900 sessions {deep:.2f} ms")


def main() -> None:
    # The test servers live beside the suite, at the repository's root.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="appends per figure")
    parser.add_argument("--rounds", type=int, default=3, help="runs per figure (median)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
