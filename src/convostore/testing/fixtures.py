"""The fixtures that run the contract suite on a set of backends, and its collection.

A runner's conftest names its backends (name -> how to get the URL of a fresh, empty
database for one test), the divergences it knows of, and hands both to `backend_fixture`:

    BACKENDS = {"memory": memory_url, "mine": lambda tmp_path: f"mine:///{tmp_path}/db"}
    DIVERGENCES = [Divergence("mine", "test_search.py::test_x", "no text index yet")]
    backend = backend_fixture(BACKENDS, DIVERGENCES)
    from convostore.testing.fixtures import connect_store, indexed_store, store

    def pytest_collect_file(file_path, parent):
        return collect_contract_suite(file_path, parent, Path(__file__))

    def pytest_collection_modifyitems(config, items):
        mark_divergences(items, DIVERGENCES)

A backend is unavailable (its driver or server is missing) only as its URL function
decides, before any store connects: the URL function returns `Unavailable`. Such a backend
is skipped on a laptop and fails the run under ``CI=true``; a backend named in
``CONVOSTORE_SKIP_BACKENDS`` is skipped by request. An error raised while connecting or
operating is a failure, never a skip.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

import pytest

import convostore
from convostore.store import Store

__all__ = [
    "INDEXED_KEYS",
    "BackendUnderTest",
    "BackendUrl",
    "Divergence",
    "OnServer",
    "ServerCrash",
    "StoreFactory",
    "Unavailable",
    "backend_fixture",
    "backend_missing",
    "collect_contract_suite",
    "connect_store",
    "in_ci",
    "indexed_store",
    "mark_divergences",
    "skipped_backends",
    "store",
]

SUITE_DIRECTORY = Path(__file__).parent / "contract"


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Why a backend cannot run in this environment (its driver or server is missing)."""

    reason: str


BackendUrl = Callable[[Path], "str | Unavailable"]


@dataclass(frozen=True, slots=True)
class ServerCrash:
    """How a runner crashes a backend's server and brings it back: ``kill`` ends it as a
    crash of its machine would (SIGKILL), ``restart`` starts it again from its files on
    the same address; ``url`` is the test's database, with the options that make a store
    give up soon on a server that is gone."""

    kill: Callable[[], None]
    restart: Callable[[], None]
    url: str


@dataclass(frozen=True, slots=True)
class OnServer:
    """A backend whose tests share one server for the whole session: ``server`` names the
    session-scoped fixture that gives it (or `Unavailable`), ``fresh`` the URL of a new,
    empty database on it for one test. ``crash``, where the runner can kill and restart
    that server: the `ServerCrash` for the server and a test's URL (None for a server it
    cannot, such as one it did not start)."""

    server: str
    fresh: Callable[[Any], str]
    crash: Callable[[Any, str], ServerCrash | None] | None = None


@dataclass(frozen=True, slots=True)
class Divergence:
    """A known failure of one backend: ``test`` is ``"test_module.py::test_name"`` (every
    parametrisation of it), ``reason`` why it fails. The test is marked strict-xfail on
    that backend, so the fix has to delete the entry; an entry that names no test is an
    error. ``raises``: the exception (or exceptions) the known failure raises; the test
    failing in any other way then fails the run, so a second breakage (a broken
    migration, a typo) is never taken for the known one. None accepts any failure."""

    backend: str
    test: str
    reason: str
    raises: type[BaseException] | tuple[type[BaseException], ...] | None = None


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


SKIP_VARIABLE = "CONVOSTORE_SKIP_BACKENDS"


def skipped_backends() -> frozenset[str]:
    """The backends a laptop without their server opts out of, by name, in
    ``CONVOSTORE_SKIP_BACKENDS`` (comma-separated): skipped even under ``CI=true``,
    because someone asked, and said so in each skip's reason."""
    names = os.environ.get(SKIP_VARIABLE, "")
    return frozenset(name.strip() for name in names.split(",") if name.strip())


def backend_missing(name: str, reason: str) -> NoReturn:
    """Skip on a laptop; under CI a backend that cannot run is a failure."""
    message = f"backend {name!r} unavailable: {reason}"
    if in_ci():
        pytest.fail(message + " (CI=true requires every backend)")
    pytest.skip(message)


class BackendUnderTest:
    """One backend and the database of one test: ``backend()`` is its URL, the same on
    every call, so a test can open a second store on the same database (when
    ``capabilities.persistent`` / ``cross_process`` say that means something).
    ``crash``: how to crash its server and restart it, where the runner can.

    A server's database is made on the first call, not before: a test that never asks
    for one (the differential test after its first, which keeps its population on the
    database it was given) costs none, and does not empty a server of one database
    (Neo4j Community's) under the population another test keeps there."""

    def __init__(
        self,
        name: str,
        url: str | Callable[[], str],
        crash: Callable[[str], ServerCrash | None] | None = None,
    ) -> None:
        self.name = name
        self._url = url
        self._crash = crash

    @property
    def url(self) -> str:
        if callable(self._url):
            self._url = self._url()
        return self._url

    @property
    def crash(self) -> ServerCrash | None:
        return None if self._crash is None else self._crash(self.url)

    def __call__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"BackendUnderTest({self.name!r})"


def backend_fixture(
    backends: Mapping[str, BackendUrl | OnServer],
    divergences: Sequence[Divergence] = (),
) -> Any:
    """The ``backend`` fixture, parametrised over ``backends`` (assign it to ``backend`` in
    a conftest). ``divergences`` are checked to name known backends."""
    unknown = sorted({d.backend for d in divergences} - set(backends))
    if unknown:
        raise ValueError(f"divergences name unknown backends: {unknown}")
    names = list(backends)
    opted_out = skipped_backends()
    if opted_out - set(names):
        raise ValueError(f"{SKIP_VARIABLE} names unknown backends: {sorted(opted_out)}")

    @pytest.fixture(params=names, ids=names)
    def backend(request: pytest.FixtureRequest, tmp_path: Path) -> BackendUnderTest:
        name: str = request.param
        if name in opted_out:
            pytest.skip(f"backend {name!r} skipped: {SKIP_VARIABLE} names it")
        entry = backends[name]
        if not isinstance(entry, OnServer):
            url = entry(tmp_path)
            if isinstance(url, Unavailable):
                backend_missing(name, url.reason)
            return BackendUnderTest(name, url)
        server = request.getfixturevalue(entry.server)
        if isinstance(server, Unavailable):
            backend_missing(name, server.reason)
        crash = entry.crash
        return BackendUnderTest(
            name,
            functools.partial(entry.fresh, server),
            None if crash is None else functools.partial(crash, server),
        )

    return backend


class StoreFactory(Protocol):
    def __call__(self, **options: Any) -> Awaitable[Store]: ...


@pytest.fixture
async def connect_store(backend: BackendUnderTest) -> AsyncIterator[StoreFactory]:
    """Open stores on this test's database; every one is closed at teardown."""
    opened: list[Store] = []

    async def connect(**options: Any) -> Store:
        opened.append(await convostore.connect(backend(), **options))
        return opened[-1]

    yield connect
    for opened_store in reversed(opened):
        await opened_store.close()


@pytest.fixture
async def store(connect_store: StoreFactory) -> Store:
    """A store on this test's database."""
    return await connect_store()


INDEXED_KEYS = ("tenant", "topic")


@pytest.fixture
async def indexed_store(connect_store: StoreFactory) -> Store:
    """A store on this test's database that indexes the metadata keys `INDEXED_KEYS`."""
    return await connect_store(indexed_metadata=INDEXED_KEYS)


@pytest.fixture(scope="session", autouse=True)
def local_time_zone_off_utc() -> Iterator[None]:
    """Run the suite in Asia/Kathmandu (UTC+05:45, an offset that is not a whole hour), so
    a backend that reads or writes local time, or drops an offset, is off by 5h45m."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Kathmandu"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


class ContractSuite(pytest.Collector):
    """The suite's test modules, collected as children of the runner's directory so its
    conftest's fixtures (``backend`` above all) apply to them."""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        modules: list[pytest.Item | pytest.Collector] = []
        for path in sorted(SUITE_DIRECTORY.glob("test_*.py")):
            modules.append(
                pytest.Module.from_parent(
                    self, path=path, nodeid=f"{self.parent_nodeid}/{path.name}"
                )
            )
        return modules

    @property
    def parent_nodeid(self) -> str:
        assert self.parent is not None
        return self.parent.nodeid


def collect_contract_suite(
    file_path: Path, parent: pytest.Collector, conftest: Path
) -> ContractSuite | None:
    """For a runner conftest's ``pytest_collect_file``: the suite, collected once in the
    conftest's directory (when pytest offers the conftest file itself)."""
    if file_path != conftest:
        return None
    return ContractSuite.from_parent(parent, name="contract-suite")


def mark_divergences(items: Sequence[pytest.Item], divergences: Sequence[Divergence]) -> None:
    """Mark each test a divergence names strict-xfail on its backend; fail collection on
    an entry that names no collected test (a stale entry hides nothing)."""
    wanted = {(d.backend, d.test): d for d in divergences}
    used: set[tuple[str, str]] = set()
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "backend" not in callspec.params:
            continue
        test = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        key = (callspec.params["backend"], test)
        divergence = wanted.get(key)
        if divergence is not None:
            used.add(key)
            mark = pytest.mark.xfail(
                strict=True, reason=divergence.reason, raises=divergence.raises
            )
            item.add_marker(mark)
    stale = sorted(set(wanted) - used)
    if stale and len(items) > 0 and _whole_suite(items):
        raise pytest.UsageError(f"divergences that name no test: {stale}")


def _whole_suite(items: Sequence[pytest.Item]) -> bool:
    # With -k or a node id only part of the suite is collected; stale entries are only
    # judged on a run that collected every module of it.
    names = {item.path.name for item in items}
    return all(path.name in names for path in SUITE_DIRECTORY.glob("test_*.py"))
