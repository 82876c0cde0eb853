"""A throwaway 3-node MariaDB Galera cluster on loopback, from Debian's ``mariadb-server``
and ``galera-4`` packages.

`GaleraCluster` runs three `GaleraNode`s (each a `MariaDBServer` with wsrep on, in its
own temporary directory): the first bootstraps the cluster (``--wsrep-new-cluster``),
the two others join it through a state transfer (``rsync``, or ``mariabackup`` where
that is installed and rsync is not), one after the other. It returns once every node
reports ``wsrep_cluster_size`` 3, ``wsrep_ready`` ON and the state Synced. A node can be
killed (SIGKILL) and started again; the cluster's URL lists every node
(``mysql://root@127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/db``), `GaleraCluster.node_url` one.

`shared_cluster` is what the test session uses (started on first use, stopped at the
end); ``CONVOSTORE_TEST_GALERA_URL`` names an existing cluster instead (a URL listing
its nodes, whose user may create and drop databases).

    with GaleraCluster() as cluster:
        print(cluster.url("chat"))
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from tests.servers.mariadb import MariaDBServer
from tests.servers.shared import (
    ExternalServer,
    ServerProcess,
    ServerUnavailable,
    SharedServer,
    free_port,
)

__all__ = [
    "CLUSTER_URL_VARIABLE",
    "GALERA_PROVIDER",
    "GaleraCluster",
    "GaleraNode",
    "TestCluster",
    "node_urls",
    "rotated",
    "shared_cluster",
    "stop_shared_cluster",
]

CLUSTER_URL_VARIABLE: Final = "CONVOSTORE_TEST_GALERA_URL"
GALERA_PROVIDER: Final = Path("/usr/lib/galera/libgalera_smm.so")
CLUSTER_NAME: Final = "convostore-test"
NODES: Final = 3
# What Galera needs of every node (row events, no table locks on auto-increment),
# and a smaller buffer pool than a lone test server's: three run at once.
WSREP_SETTINGS: Final = {
    "wsrep-on": "ON",
    "wsrep-provider": str(GALERA_PROVIDER),
    "wsrep-cluster-name": CLUSTER_NAME,
    "binlog-format": "ROW",
    "default-storage-engine": "InnoDB",
    "innodb-autoinc-lock-mode": "2",
    "innodb-buffer-pool-size": "128M",
    "wsrep-slave-threads": "2",
}
# A node that stops answering is declared dead within about 3 s (Galera's defaults take
# 5 to 15 s): the fault tests are bounded. The group's keepalives run every 0.5 s.
_FAST_EVICTION: Final = (
    "evs.keepalive_period=PT0.5S;evs.suspect_timeout=PT2S;evs.inactive_timeout=PT3S;"
    "evs.inactive_check_period=PT0.5S;evs.install_timeout=PT3S;gcache.size=64M"
)
_SYNC_TIMEOUT_S: Final = 90.0
_QUERY_TIMEOUT_S: Final = 10.0


def _sst_method() -> str:
    """The state transfer a joiner can use here: rsync (needs the rsync program) or
    mariabackup (its package and socat)."""
    if shutil.which("rsync"):
        return "rsync"
    if shutil.which("mariabackup") and shutil.which("socat"):
        return "mariabackup"
    raise ServerUnavailable(
        "a Galera node cannot join without a state transfer: apt-get install rsync "
        "(scripts/setup.sh does)"
    )


class GaleraNode(MariaDBServer):
    """One MariaDB server with wsrep on, one of ``members`` (the loopback group ports of
    the cluster's nodes), listening on ``group_port`` and taking state transfers on
    ``ist_port`` and ``sst_port``. ``bootstrap``: the node starts a new cluster."""

    def __init__(
        self,
        name: str,
        members: list[int],
        group_port: int,
        ist_port: int,
        sst_port: int,
        *,
        bootstrap: bool,
    ) -> None:
        cluster_address = "gcomm://" + ",".join(f"127.0.0.1:{port}" for port in members)
        settings = {
            **WSREP_SETTINGS,
            "wsrep-node-name": name,
            "wsrep-cluster-address": cluster_address,
            "wsrep-node-address": f"127.0.0.1:{group_port}",
            "wsrep-provider-options": (
                f"gmcast.listen_addr=tcp://127.0.0.1:{group_port};"
                f"ist.recv_addr=127.0.0.1:{ist_port};{_FAST_EVICTION}"
            ),
            "wsrep-sst-receive-address": f"127.0.0.1:{sst_port}",
            "wsrep-sst-method": _sst_method(),
        }
        if bootstrap:
            # Only its first start: started again, it rejoins the cluster it made.
            settings["wsrep-new-cluster"] = "1"
        super().__init__(settings=settings)
        self.node_name = name
        # Set when the node may start its server (its data directory is made before).
        self.may_launch = threading.Event()
        self.may_launch.set()

    def _launch(self) -> None:
        # A node starts its server only once the node before it is up (its data
        # directory is made at once with the others').
        if not self.may_launch.wait(_SYNC_TIMEOUT_S):
            raise ServerUnavailable(f"{self.node_name}: the node before it did not start")
        super()._launch()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL the node (its data stays, for `rejoin`)."""
        self._kill()

    def rejoin(self) -> None:
        """Start the killed node again on its port and data: it rejoins the cluster."""
        self.settings.pop("wsrep-new-cluster", None)
        self._launch()

    def status(self) -> dict[str, str]:
        """The node's ``wsrep_%`` status variables (empty if it does not answer)."""
        return self.query("SHOW GLOBAL STATUS LIKE 'wsrep_%'")

    def query(self, statement: str) -> dict[str, str]:
        """Rows of two columns as a dict, through the ``mariadb`` client on the node's
        socket (empty if it does not answer)."""
        client = shutil.which("mariadb") or "/usr/bin/mariadb"
        try:
            done = subprocess.run(
                [client, "--no-defaults", f"--socket={self.socket_path}", "--user=root",
                 "--batch", "--skip-column-names", "--execute", statement],
                capture_output=True, text=True, timeout=_QUERY_TIMEOUT_S, check=False,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return {}
        rows = (line.split("\t", 1) for line in done.stdout.splitlines())
        return {row[0]: row[1] for row in rows if len(row) == 2}

    def synced(self, size: int) -> bool:
        """Whether the node is in a primary component of ``size`` nodes, ready and
        Synced."""
        status = self.status()
        return (
            status.get("wsrep_cluster_size") == str(size)
            and status.get("wsrep_ready") == "ON"
            and status.get("wsrep_local_state_comment") == "Synced"
            and status.get("wsrep_cluster_status") == "Primary"
        )


class GaleraCluster(ServerProcess):
    """Three `GaleraNode`s on loopback ports, each in its own temporary directory."""

    def __init__(self) -> None:
        self.nodes: list[GaleraNode] = []

    def start(self) -> None:
        if self.nodes:
            return
        if not GALERA_PROVIDER.exists():
            raise ServerUnavailable(
                f"no Galera provider at {GALERA_PROVIDER}: apt-get install galera-4 "
                "(scripts/setup.sh does)"
            )
        ports = [(free_port(), free_port(), free_port()) for _ in range(NODES)]
        members = [group for group, _, _ in ports]
        self.nodes = [
            GaleraNode(f"node{i + 1}", members, *node_ports, bootstrap=i == 0)
            for i, node_ports in enumerate(ports)
        ]
        # Every node makes its data directory at once (the slow part of a start); each
        # joiner then starts once the node before it is Synced, so one donor serves one
        # state transfer at a time.
        for node in self.nodes[1:]:
            node.may_launch.clear()
        failures: list[BaseException] = []

        def start(index: int) -> None:
            try:
                self.nodes[index].start()
                self.wait_until_synced(self.nodes[: index + 1])
            except BaseException as failure:
                failures.append(failure)
            finally:
                if index + 1 < len(self.nodes):
                    self.nodes[index + 1].may_launch.set()

        starting = [threading.Thread(target=start, args=(i,)) for i in range(NODES)]
        for thread in starting:
            thread.start()
        for thread in starting:
            thread.join()
        if failures:
            self.stop()
            raise failures[0]
        self.directory = self.nodes[0].directory

    def stop(self) -> None:
        """Stop every node and delete its directory. Stopping twice is harmless."""
        nodes, self.nodes = self.nodes, []
        # Killed, not shut down: their data goes with them, and a node leaving the
        # cluster in order takes seconds.
        for node in nodes:
            node.kill()
            node.stop()
        self.directory = None

    def wait_until_synced(
        self, nodes: list[GaleraNode] | None = None, timeout: float = _SYNC_TIMEOUT_S
    ) -> None:
        """Wait until each of ``nodes`` (every running one by default) is Synced in a
        primary component of exactly that many nodes."""
        nodes = [node for node in self.nodes if node.running] if nodes is None else nodes
        deadline = time.monotonic() + timeout
        while not all(node.synced(len(nodes)) for node in nodes):
            if time.monotonic() > deadline:
                states = {
                    node.node_name: node.status().get("wsrep_local_state_comment") for node in nodes
                }
                raise ServerUnavailable(f"the Galera cluster did not sync in time: {states}")
            time.sleep(0.2)

    def url(self, database: str = "mysql", user: str = "root") -> str:
        """The URL of ``database`` listing every node, in their order."""
        assert self.nodes, "the cluster is not started"
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"mysql://{user}@{hosts}/{database}"

    def node_url(self, index: int, database: str = "mysql", user: str = "root") -> str:
        """The URL of ``database`` on node ``index`` alone."""
        return self.nodes[index].url(database, user)


def node_urls(url: str) -> list[str]:
    """Each node of a URL listing several (``mysql://u@h1:p1,h2:p2/db``) as a URL of its
    own, in the URL's order."""
    parts = urlsplit(url)
    credentials, at, hosts = parts.netloc.rpartition("@")
    return [
        urlunsplit(parts._replace(netloc=f"{credentials}{at}{host}")) for host in hosts.split(",")
    ]


def rotated(url: str, first: int) -> str:
    """``url`` (listing several nodes) with its node ``first`` listed first, the others
    after it in their order."""
    parts = urlsplit(url)
    credentials, at, hosts = parts.netloc.rpartition("@")
    nodes = hosts.split(",")
    first %= len(nodes)
    order = ",".join(nodes[first:] + nodes[:first])
    return urlunsplit(parts._replace(netloc=f"{credentials}{at}{order}"))


TestCluster = GaleraCluster | ExternalServer

_shared = SharedServer(CLUSTER_URL_VARIABLE, GaleraCluster)

# The session's cluster (see `SharedServer`): the URL in ``CLUSTER_URL_VARIABLE`` if set,
# else one cluster of this module started on first call, and stopped by the second.
shared_cluster = _shared.get
stop_shared_cluster = _shared.stop
