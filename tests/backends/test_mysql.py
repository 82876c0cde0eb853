"""What is the MySQL/MariaDB backend's own: its URLs, utf8mb4 schema and migrations, the
metadata index's 512-character prefix, the FULLTEXT index and its short words, deadlock
and lock-wait retries, a lost connection, a server restarting under writers, stores
racing on separate connections, and oversize input. What every backend does is the
contract suite's (tests/contract)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

import convostore
from convostore import (
    BackendUnavailableError,
    ConflictError,
    EventFilter,
    InvalidArgumentError,
    Message,
    MessageWrite,
    Role,
    SchemaVersionError,
    SessionNotFoundError,
    StaleObjectError,
    Store,
    User,
)
from tests.backends.support import missing_driver, server_unavailable

# Without the driver there is nothing here to test: skipped on a laptop, and under CI
# (which installs every extra) the imports below fail the run.
if skip_reason := missing_driver("asyncmy", "mysql"):
    pytest.skip(skip_reason, allow_module_level=True)

import asyncmy

from convostore.backends.mysql import SCHEMA_VERSION, MySQLBackend, MySQLTarget, parse_mysql_url
from convostore.backends.mysql.connection import DRIVER, fetch_all, fetch_one
from convostore.backends.sql.aio import RollbackAndReturn, in_transaction
from tests.backends.faults import appends_survive_a_restart, the_pool_recovers
from tests.servers.mariadb import (
    MariaDBServer,
    ServerUnavailable,
    TestServer,
)

ADA = User("ada", "Ada")
WRITERS = 8


@pytest.fixture(scope="session")
def server(server_10: TestServer) -> TestServer:
    return server_10


_databases = itertools.count(1)


class Stores:
    """Opens stores on one fresh database and closes them all at teardown."""

    def __init__(self, server: TestServer) -> None:
        self.server = server
        self.database = f"backend_{os.getpid()}_{next(_databases)}"
        self.opened: list[Store] = []

    def url(self, **options: object) -> str:
        query = "&".join(f"{name}={value}" for name, value in options.items())
        return self.server.url(self.database) + (f"?{query}" if query else "")

    async def open(self, **options: Any) -> Store:
        url_options = options.pop("url_options", {})
        store = await convostore.connect(self.url(**url_options), **options)
        assert isinstance(store.backend, MySQLBackend)
        self.opened.append(store)
        return store


def pool(store: Store) -> asyncmy.pool.Pool:
    """The store's connection pool, for work beside the store."""
    assert isinstance(store.backend, MySQLBackend)
    return store.backend.pool


@pytest.fixture
async def stores(server: TestServer) -> AsyncIterator[Stores]:
    opened = Stores(server)
    yield opened
    for store in reversed(opened.opened):
        await store.close()


async def admin(server: TestServer, statement: str, parameters: Any = None) -> list[Any]:
    """Rows of a statement run outside any store, as the test server's root."""
    target = parse_mysql_url(server.url())
    connection = await asyncmy.connect(
        host=target.host,
        port=target.port,
        user=target.user,
        password=target.password or "",
        autocommit=True,
    )
    try:
        return await fetch_all(connection, statement, parameters)
    finally:
        connection.close()


def say(content: str, role: Role = Role.USER) -> MessageWrite:
    return MessageWrite(role, content, author=ADA)


# ------------------------------------------------------------------ URLs


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://u:p%40ss@db.ex:3307/chat", MySQLTarget("db.ex", 3307, "u", "p@ss", "chat")),
        ("mariadb://u@localhost/chat", MySQLTarget("localhost", 3306, "u", None, "chat")),
        (
            "mysql+asyncmy://u@h/chat?pool_min_size=0&pool_max_size=3&pool_timeout=2.5"
            "&connect_timeout=4&ssl=verify_identity&ssl_ca=/ca.pem&deadlock_retries=0",
            MySQLTarget(
                "h", 3306, "u", None, "chat", pool_min_size=0, pool_max_size=3,
                pool_timeout=2.5, connect_timeout=4.0, ssl="verify_identity",
                ssl_ca="/ca.pem", deadlock_retries=0,
            ),
        ),
        (
            "mysql://u@h/chat?unix_socket=/run/mysqld/mysqld.sock&ssl=true",
            MySQLTarget("h", 3306, "u", None, "chat", unix_socket="/run/mysqld/mysqld.sock",
                        ssl="required"),
        ),
        # No user, or an empty one: the driver's default user.
        ("mysql://h/chat?ssl=false", MySQLTarget("h", 3306, None, None, "chat")),
        ("mysql://:s%3Acret@h/chat?ssl=VERIFY_CA",
         MySQLTarget("h", 3306, None, "s:cret", "chat", ssl="verify_ca")),
        ("mysql://u@h/chat?ssl=preferred", MySQLTarget("h", 3306, "u", None, "chat",
                                                        ssl="preferred")),
    ],
)  # fmt: skip
def test_urls_and_their_options(url: str, expected: MySQLTarget) -> None:
    assert parse_mysql_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u@h/",
        "mysql://u@h/chat;drop",
        "mysql://u@h/`chat`",
        "mysql://u@h/" + "d" * 65,
        "mysql://u@h/chat?pool_max_size=0",
        "mysql://u@h/chat?pool_min_size=5&pool_max_size=2",
        "mysql://u@h/chat?pool_timeout=-1",
        "mysql://u@h/chat?ssl=maybe",
        "mysql://u@h/chat?deadlock_retries=101",
        "mysql://u@h/chat?charset=latin1",
        "mysql://u@h/chat?ssl=true&ssl=false",
        "mysql://u@h:99999/chat",
        "mysql://u@h:port/chat",
        "postgresql://u@h/chat",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_mysql_url(url)


def test_messages_name_the_server_never_the_password() -> None:
    target = parse_mysql_url("mysql://u:secret@db.example:3307/chat")
    assert "secret" not in target.where
    with pytest.raises(InvalidArgumentError) as refused:
        parse_mysql_url("mysql://u:secret@db.example/chat?bogus=1")
    assert "secret" not in str(refused.value)


async def test_an_unreachable_server_is_unavailable() -> None:
    with pytest.raises(BackendUnavailableError):
        await convostore.connect("mysql://root@127.0.0.1:1/chat?connect_timeout=2")


async def test_unknown_store_options_are_refused(stores: Stores) -> None:
    with pytest.raises(InvalidArgumentError):
        await stores.open(pool_size=3)


def test_a_missing_driver_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['asyncmy'] = None\n"
        "import asyncio, convostore\n"
        "try:\n"
        "    asyncio.run(convostore.connect('mariadb://u@h/chat'))\n"
        "except convostore.BackendUnavailableError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "pip install 'convostore[mysql]'" in result.stdout


# ------------------------------------------------------------------ schema


async def test_every_table_and_text_column_is_utf8mb4(server: TestServer, stores: Stores) -> None:
    """The test server's own default character set is latin1: convostore names
    utf8mb4 itself, for the database, every table and every text column."""
    store = await stores.open()
    tables = await admin(
        server,
        "SELECT table_name, table_collation FROM information_schema.tables WHERE table_schema = %s",
        (stores.database,),
    )
    assert len(tables) == 11
    assert all(str(collation).startswith("utf8mb4_") for _, collation in tables)
    columns = await admin(
        server,
        "SELECT column_name, character_set_name FROM information_schema.columns"
        " WHERE table_schema = %s AND character_set_name IS NOT NULL",
        (stores.database,),
    )
    assert columns
    assert {charset for _, charset in columns} == {"utf8mb4"}
    text = "emoji 🦜🏳️‍🌈, CJK 漢字, math \U0001d538"
    session = await store.create_session(User("🦜", text), title=text, metadata={"k": text})
    await store.add_message(session.id, MessageWrite(Role.USER, text, author="🦜"))
    [message] = await store.messages(session.id)
    assert message.content == text
    stored = await store.get_session(session.id)
    assert stored is not None
    assert (stored.title, stored.metadata) == (text, {"k": text})
    assert (await store.get_user("🦜")) == User("🦜", text)


async def test_ids_compare_exactly_with_no_padding(stores: Stores) -> None:
    """MySQL's default collations ignore case and trailing spaces; ids must not."""
    store = await stores.open()
    first = await store.create_session(ADA, session_id="abc")
    for other in ("abc ", "ABC", "ábc"):
        created = await store.create_session(ADA, session_id=other)
        assert created.id == other
    assert (await store.get_session("abc")) == first


async def test_migrations_are_recorded(server: TestServer, stores: Stores) -> None:
    await stores.open()
    rows = await admin(server, f"SELECT version FROM `{stores.database}`.convostore_schema")
    assert [row[0] for row in rows] == list(range(1, SCHEMA_VERSION + 1))


async def test_a_newer_schema_is_refused(server: TestServer, stores: Stores) -> None:
    store = await stores.open()
    session = await store.create_session(ADA)
    await admin(
        server,
        f"INSERT INTO `{stores.database}`.convostore_schema VALUES (%s, 0)",
        (SCHEMA_VERSION + 1,),
    )
    with pytest.raises(SchemaVersionError):
        await stores.open()
    assert (await store.get_session(session.id)) == session


async def test_stores_connecting_at_once_migrate_once(server: TestServer, stores: Stores) -> None:
    opened = await asyncio.gather(*(stores.open() for _ in range(WRITERS)))
    rows = await admin(server, f"SELECT count(*) FROM `{stores.database}`.convostore_schema")
    assert rows[0][0] == SCHEMA_VERSION
    session = await opened[0].create_session(ADA)
    assert all([(await store.get_session(session.id)) == session for store in opened])


# ------------------------------------------------------------------ metadata and text


async def test_metadata_values_sharing_their_first_512_characters_are_told_apart(
    stores: Stores,
) -> None:
    store = await stores.open(indexed_metadata=["doc"])
    prefix = "é" * 512
    first = await store.create_session(ADA, metadata={"doc": prefix + "one"})
    second = await store.create_session(ADA, metadata={"doc": prefix + "two"})
    exact = await store.create_session(ADA, metadata={"doc": prefix})
    long = await store.create_session(ADA, metadata={"doc": "x" * 200_000})
    assert await store.find_sessions_by_metadata("doc", prefix + "one") == [first]
    assert await store.find_sessions_by_metadata("doc", prefix + "two") == [second]
    assert await store.find_sessions_by_metadata("doc", prefix) == [exact]
    assert await store.find_sessions_by_metadata("doc", prefix + "thr") == []
    assert await store.find_sessions_by_metadata("doc", "x" * 200_000) == [long]


async def test_short_words_and_stopwords_are_found(server: TestServer, stores: Stores) -> None:
    """InnoDB indexes no word under 3 characters and skips its stopwords by default;
    every backend finds them."""
    store = await stores.open()
    session = await store.create_session(ADA)
    await store.add_message(session.id, say("I am at a PC: is it on?"))
    await store.add_message(session.id, say("the one with a big X"))
    for query, expected in [
        ("a", 2),
        ("i am", 1),
        ("is it on", 1),
        ("the", 1),
        ("x", 1),
        ("pc", 1),
        ("with the", 1),
        ("zz", 0),
    ]:
        hits = await store.search(query, mode="text")
        assert len(hits) == expected, query
    variables = await admin(server, "SELECT @@innodb_ft_min_token_size")
    assert variables[0][0] == 3  # The server's default: the words are lifted above it.


async def test_text_search_walks_the_fulltext_index(stores: Stores) -> None:
    store = await stores.open()
    async with pool(store).acquire() as connection:
        plan = await fetch_all(
            connection,
            "EXPLAIN SELECT row_id FROM events"
            " WHERE MATCH (search_tokens) AGAINST (%s IN BOOLEAN MODE)",
            ("+qzrouter",),
        )
    assert any(row[2] == "events" and row[3] == "fulltext" for row in plan), plan


# ------------------------------------------------------------------ input


@pytest.mark.parametrize(
    "text",
    [
        "'; DROP TABLE sessions; --",
        "\\'; DROP TABLE events; --",
        '" OR 1=1 -- \\',
        "%s %(name)s {0} ?",
        "\\\\\\",
        "x' UNION SELECT id FROM users -- ",
    ],
)
async def test_injection_through_every_string_is_stored_as_written(
    stores: Stores, text: str
) -> None:
    store = await stores.open(indexed_metadata=["k"])
    user = User(text, text, username=text, email=text, metadata={text: text})
    session = await store.create_session(
        user, session_id=text, title=text, kind=text, metadata={"k": text, text: text}
    )
    assert (await store.get_session(text)) == session
    assert await store.find_sessions_by_metadata("k", text) == [session]
    message = await store.add_message(
        text, MessageWrite(Role.USER, text, author=user, id=text + "-m", branch=None)
    )
    assert (await store.get_user(text)) == user
    assert await store.messages(text) == [message]
    assert await store.read(text, EventFilter(text=text)) == [message]
    assert (await store.list_sessions(text, filter=convostore.SessionFilter(kind=text))).items
    await store.search(text, mode="text")
    assert await store.delete_session(text)
    assert await store.get_user(text) == user


async def test_values_longer_than_a_column_are_refused_and_nothing_is_written(
    stores: Stores,
) -> None:
    store = await stores.open()
    with pytest.raises(InvalidArgumentError):
        await store.create_session(ADA, kind="k" * 256)
    assert (await store.list_sessions(ADA.id)).items == []


async def test_a_statement_over_max_allowed_packet_is_refused_before_it_is_sent(
    server: TestServer, stores: Stores
) -> None:
    store = await stores.open()
    (limit,) = (await admin(server, "SELECT @@max_allowed_packet"))[0]
    session = await store.create_session(ADA)
    with pytest.raises(InvalidArgumentError, match="max_allowed_packet"):
        await store.add_message(session.id, say("x" * int(limit)))
    with pytest.raises(InvalidArgumentError, match="max_allowed_packet"):
        await store.set_title(session.id, "t" * int(limit))
    assert await store.version(session.id) == 0
    big = "y" * (int(limit) // 8)
    stored = await store.add_message(session.id, say(big))
    assert (await store.messages(session.id)) == [stored]


# ------------------------------------------------------------------ transactions


async def test_a_lock_wait_timeout_is_retried_then_succeeds(stores: Stores) -> None:
    """A transaction that waited too long for a lock runs again; here the lock holder
    lets go once the first attempt has failed."""
    store = await stores.open()
    session = await store.create_session(ADA)
    attempts = 0
    second_attempt = asyncio.Event()

    async def append_title(connection: asyncmy.connection.Connection) -> int:
        nonlocal attempts
        attempts += 1
        if attempts == 2:
            second_attempt.set()
        await fetch_all(connection, "SET SESSION innodb_lock_wait_timeout = 1")
        row = await fetch_one(
            connection, "SELECT version FROM sessions WHERE id = %s FOR UPDATE", (session.id,)
        )
        return int(row[0])

    async with pool(store).acquire() as holder, pool(store).acquire() as waiter:
        await holder.begin()
        await fetch_one(holder, "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session.id,))
        running = asyncio.create_task(in_transaction(DRIVER, waiter, 3, append_title))
        await second_attempt.wait()
        await holder.rollback()
        assert await running == 0
    assert attempts == 2


async def test_a_lock_wait_timeout_after_the_retries_is_unavailable(stores: Stores) -> None:
    store = await stores.open(url_options={"deadlock_retries": 1})
    session = await store.create_session(ADA)
    async with pool(store).acquire() as holder:
        await fetch_all(holder, "SET SESSION innodb_lock_wait_timeout = 1")
        await holder.begin()
        await fetch_one(holder, "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session.id,))
        try:
            async with pool(store).acquire() as waiter:
                await fetch_all(waiter, "SET SESSION innodb_lock_wait_timeout = 1")
                with pytest.raises(asyncmy.errors.OperationalError) as timed_out:
                    await in_transaction(
                        DRIVER,
                        waiter,
                        1,
                        fetch_one,
                        "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE",
                        (session.id,),
                    )
                assert timed_out.value.args[0] == 1205
        finally:
            await holder.rollback()
    from convostore.backends.mysql.connection import translate_error

    assert isinstance(translate_error(timed_out.value, "here"), BackendUnavailableError)


async def test_a_deadlock_victim_is_run_again(stores: Stores) -> None:
    """Two transactions lock two sessions in opposite orders; InnoDB ends one (the one
    that changed fewer rows), which runs again and succeeds."""
    store = await stores.open()
    one = await store.create_session(ADA)
    two = await store.create_session(ADA)
    attempts = 0
    victim_waits = asyncio.Event()

    async def lock_two_then_one(connection: asyncmy.connection.Connection) -> str:
        nonlocal attempts
        attempts += 1
        await fetch_one(connection, "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (two.id,))
        if attempts == 1:
            victim_waits.set()
        await fetch_one(connection, "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (one.id,))
        return "done"

    async with pool(store).acquire() as holder, pool(store).acquire() as victim:
        await holder.begin()
        # The holder changes rows, so InnoDB keeps it and ends the other.
        await fetch_one(holder, "UPDATE sessions SET title = 'held' WHERE id = %s", (one.id,))
        running = asyncio.create_task(in_transaction(DRIVER, victim, 2, lock_two_then_one))
        await victim_waits.wait()
        await fetch_one(holder, "UPDATE sessions SET title = 'held' WHERE id = %s", (two.id,))
        await holder.commit()
        assert await running == "done"
    assert attempts == 2


async def test_a_deadlock_after_the_retries_is_a_conflict() -> None:
    from convostore.backends.mysql.connection import translate_error

    deadlock = asyncmy.errors.OperationalError(1213, "Deadlock found when trying to get lock")
    error = translate_error(deadlock, "here")
    assert isinstance(error, ConflictError)


async def test_rollback_and_return_writes_nothing(stores: Stores) -> None:
    store = await stores.open()
    session = await store.create_session(ADA)

    async def retitle_then_give_up(connection: asyncmy.connection.Connection) -> str:
        await fetch_one(connection, "UPDATE sessions SET title = 'no' WHERE id = %s", (session.id,))
        raise RollbackAndReturn("given up")

    async with pool(store).acquire() as connection:
        assert await in_transaction(DRIVER, connection, 0, retitle_then_give_up) == "given up"
    assert (await store.get_session(session.id)) == session


async def connection_id(store: Store) -> int:
    """The server's id of the connection the store's one-connection pool holds."""
    async with pool(store).acquire() as connection:
        return int((await fetch_one(connection, "SELECT CONNECTION_ID()"))[0])


async def test_a_refusal_keeps_its_connection_and_a_cancellation_drops_it(
    server: TestServer, stores: Stores
) -> None:
    """convostore's own refusals roll back and give the connection back for reuse; an
    operation cancelled mid-statement leaves its connection in doubt, so it is closed."""
    store = await stores.open(url_options={"pool_min_size": 1, "pool_max_size": 1})
    session = await store.create_session(ADA)
    first = await connection_id(store)
    await store.set_title(session.id, "newer")
    with pytest.raises(StaleObjectError):
        await store.update_session(session)
    with pytest.raises(SessionNotFoundError):
        await store.add_message("no-such-session", say("lost"))
    assert await connection_id(store) == first

    # Another connection holds the session's row lock: the append waits on it.
    target = parse_mysql_url(stores.url())
    holder = await asyncmy.connect(
        host=target.host, port=target.port, user=target.user,
        password=target.password or "", database=target.database,
    )  # fmt: skip
    try:
        await holder.begin()
        locked = "SELECT id FROM sessions WHERE id = %s FOR UPDATE"
        await fetch_one(holder, locked, (session.id,))
        append = asyncio.create_task(store.add_message(session.id, say("waits")))
        # The processlist, not innodb_trx: a locking read of one row by its key runs in
        # the optimizer ("Statistics"), and while it waits there MariaDB lists no
        # transaction for it in innodb_trx (seen under load).
        waiting = "SELECT 1 FROM information_schema.processlist WHERE id = %s"
        waiting += " AND command = 'Query' AND info LIKE %s"
        for _ in range(1000):  # Polled: the server says when the append waits.
            if await admin(server, waiting, (first, "%FROM sessions WHERE id = % FOR UPDATE")):
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the append never waited for the row lock")
        append.cancel()
        with pytest.raises(asyncio.CancelledError):
            await append
        await holder.rollback()
    finally:
        holder.close()
    # Closed by convostore (a cancellation leaves any connection in doubt) and by
    # asyncmy's pool as well (it never reuses one given back inside a transaction).
    assert await connection_id(store) != first
    assert [e.content for e in await store.messages(session.id)] == []
    await store.add_message(session.id, say("lands"))


# ------------------------------------------------------------------ races


async def test_eight_stores_appending_to_one_session_leave_one_gapless_log(
    stores: Stores,
) -> None:
    opened = await asyncio.gather(*(stores.open() for _ in range(WRITERS)))
    session = await opened[0].create_session(ADA)
    rounds = 15

    async def writer(number: int, store: Store) -> int:
        won = 0
        for count in range(rounds):
            await store.add_message(session.id, say(f"{number}-{count}"))
            version = await store.version(session.id)
            batch = [say(f"{number}-{count}-a"), say(f"{number}-{count}-b")]
            won += await store.append_events(session.id, batch, version)
        return won

    batches = sum(await asyncio.gather(*(writer(n, s) for n, s in enumerate(opened))))
    log = await opened[-1].read(session.id)
    assert [event.seq for event in log] == list(range(1, len(log) + 1))
    assert len(log) == WRITERS * rounds + 2 * batches
    assert await opened[3].version(session.id) == WRITERS * rounds + batches
    contents = [event.content for event in log if isinstance(event, Message)]
    pairs = [c for c in contents if c.endswith(("-a", "-b"))]
    assert all(a[:-1] == b[:-1] for a, b in zip(pairs[::2], pairs[1::2], strict=True))


# ------------------------------------------------------------------ a lost server


async def test_killed_connections_are_unavailable_and_the_pool_recovers(
    server: TestServer, stores: Stores
) -> None:
    store = await stores.open(url_options={"pool_min_size": 2, "pool_max_size": 2})

    async def kill_connections() -> int:
        ids = await admin(
            server,
            "SELECT id FROM information_schema.processlist WHERE db = %s",
            (stores.database,),
        )
        for (connection_id,) in ids:
            with contextlib.suppress(asyncmy.errors.MySQLError):
                await admin(server, f"KILL CONNECTION {int(connection_id)}")
        return len(ids)

    await the_pool_recovers(store, kill_connections, (asyncmy.errors.MySQLError, OSError))


async def test_appends_that_returned_survive_a_server_crash() -> None:
    """Writers append while the server is killed and started again
    (`faults.appends_survive_a_restart`)."""
    try:
        own = MariaDBServer(durable=True)
        own.start()
    except ServerUnavailable as why:
        server_unavailable("mariadb", str(why))
    try:
        url = own.url("restart") + "?pool_max_size=4&pool_timeout=20&connect_timeout=5"
        store = await convostore.connect(url)
        try:
            await appends_survive_a_restart(store, functools.partial(own.restart, crash=True))
        finally:
            await store.close()
    finally:
        own.stop()


# ------------------------------------------------------------------ reads


async def test_a_window_read_again_is_the_same_and_sees_every_change(stores: Stores) -> None:
    """Rows read before are not decoded again, but a row another store changed (a new
    stamp) or a log deleted and written again under the same ids reads as it is now."""
    store, other = await stores.open(), await stores.open()
    session = await store.create_session(ADA)
    written = [await store.add_message(session.id, say(f"m{i}")) for i in range(5)]
    first = await store.read(session.id, EventFilter(last=3))
    assert first == written[2:]
    again = await store.read(session.id, EventFilter(last=3))
    assert again == first
    assert all(a is b for a, b in zip(again, first, strict=True))
    assert await other.set_narration(session.id, written[3].id, "told again")
    narrated = await store.read(session.id, EventFilter(last=3))
    assert [m.narration for m in narrated if isinstance(m, Message)] == [None, "told again", None]
    await other.delete_session(session.id)
    await other.create_session(ADA, session_id=session.id)
    write = MessageWrite(Role.ASSISTANT, "another", id=written[4].id)
    rewritten = await other.add_message(session.id, write)
    assert await store.read(session.id, EventFilter(last=3)) == [rewritten]


def test_the_event_cache_keeps_the_most_recently_read_events() -> None:
    from convostore.backends.mysql.statements import DIALECT
    from convostore.backends.sql.event_cache import EventCache

    def row(key: int, stamp: str | None) -> tuple[Any, ...]:
        return (key, "s", key, f"e{key}", "NOTE", 0, None, "{}", None, 0, *(None,) * 13, stamp)

    cache = EventCache(capacity=2)
    one = cache.event(row(1, "a"), DIALECT.rows)
    assert cache.event(row(1, "a"), DIALECT.rows) is one
    assert cache.event(row(1, "b"), DIALECT.rows) is not one  # changed since: read anew
    two = cache.event(row(2, None), DIALECT.rows)
    assert cache.event(row(2, None), DIALECT.rows) is two
    assert cache.event(row(1, "b"), DIALECT.rows) is cache.event(row(1, "b"), DIALECT.rows)
    cache.event(row(3, None), DIALECT.rows)  # drops 2, the least recently read
    assert len(cache) == 2
    assert cache.event(row(2, None), DIALECT.rows) is not two
