"""Strands Agents' own session tests, run against `ConvostoreSessionRepository` on
every backend.

Strands' sdist ships its tests. This runner copies them from the sdist of the installed
``strands-agents`` version (``$CONVOSTORE_STRANDS_SDIST``, else
``.cache/framework-tests/strands_agents-<version>.tar.gz``, which
``scripts/fetch_framework_tests.sh`` downloads with ``pip download --no-deps
--no-binary :all:``), and runs the tests that use a session store generically: every
test of the repository session manager's module (written against
`MockedSessionRepository`), of `FileSessionManager`'s and of `S3SessionManager`'s but
those that look at files, paths or S3 objects themselves (`STORAGE_OWN`), and each test
elsewhere (agents, swarms, graphs) that uses one of the three. In each, the three names
are replaced by the adapter on this test's convostore store (through a
`convostore.sync` store, as a Strands app would hold it), so Strands' own assertions
judge the adapter. A known failure is a strict-xfail entry in `DIVERGENCES`.

Without the sdist, the runner's one test skips and says so. Run:
``pytest tests/integrations/strands_suite -k sqlite``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import inspect
import os
import re
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import convostore.sync
from convostore.integrations.strands import ConvostoreSessionManager, ConvostoreSessionRepository
from convostore.testing.fixtures import BackendUnderTest
from tests.integrations.upstream import CACHE, Missing, UpstreamSuite, deselect

PACKAGE = "strands_upstream"
VERSION = importlib.metadata.version("strands-agents")
SESSION_MODULES = (
    "strands/session/test_repository_session_manager.py",
    "strands/session/test_file_session_manager.py",
    "strands/session/test_s3_session_manager.py",
)
OTHER_MODULES = (
    "strands/agent/test_agent.py",
    "strands/agent/test_agent_as_tool.py",
    "strands/agent/test_agent_delegation.py",
    "strands/multiagent/test_swarm.py",
    "strands/multiagent/test_graph.py",
    "strands/test_tracking_id_history_invariant.py",
)
REPLACED = ("MockedSessionRepository", "FileSessionManager", "S3SessionManager")
_IMPORTS = re.compile(r"^(\s*)(from|import) tests([.\s])", re.MULTILINE)

# Tests of how Strands' file and S3 managers lay out their own storage (paths, files,
# S3 keys and clients), not of what a session repository does: left out.
_LAYOUT = {
    "test_create_session",
    "test_delete_session",
    "test_create_agent",
    "test_create_message",
    "test_create_multi_agent",
    "test_corrupted_json_file",
    "test__get_session_path_invalid_session_id",
    "test__get_agent_path_invalid_agent_id",
    "test__get_message_path_invalid_message_id",
}
STORAGE_OWN = {
    "test_file_session_manager.py": _LAYOUT
    | {
        "test_message_durable_id_persists",
        "test_create_session_multi_agent_directory_structure",
    },
    "test_s3_session_manager.py": _LAYOUT
    | {
        "test_init_s3_session_manager",
        "test_init_s3_session_manager_with_config",
        "test_init_s3_session_manager_with_existing_user_agent",
        "test_init_s3_session_manager_with_endpoint_url",
        "test__get_session_path_prefix_normalization",
    },
    # Simulates a crash by copying the storage directory mid-run.
    "test_swarm.py": {"test_swarm_crash_restart_handoff_via_file_session_on_disk"},
}

# "test_module.py::test_name" -> why the adapter fails it today (strict-xfail).
DIVERGENCES: dict[str, str] = {}


def _sdist() -> Path:
    named = os.environ.get("CONVOSTORE_STRANDS_SDIST")
    candidates = [Path(named)] if named else []
    candidates.append(CACHE / f"strands_agents-{VERSION}.tar.gz")
    for candidate in candidates:
        if candidate.is_file() or (candidate / "tests").is_dir():
            return candidate
    raise Missing(
        f"the strands-agents {VERSION} sdist was not found (run "
        "scripts/fetch_framework_tests.sh, or set CONVOSTORE_STRANDS_SDIST to it)"
    )


def _unpacked() -> Path:
    """The sdist's tests as the package `PACKAGE` (its ``tests.`` imports renamed)."""
    target = CACHE / f"strands-tests-{VERSION}" / PACKAGE
    if (target / "conftest.py").is_file():
        return target
    source = _sdist()
    staging = target.with_name(f"{PACKAGE}.{os.getpid()}")
    if source.is_file():
        with tarfile.open(source) as tar:
            members = [m for m in tar.getmembers() if m.name.split("/")[1:2] == ["tests"]]
            tar.extractall(staging, members=members, filter="data")
        tests = next(staging.glob("*/tests"))
    else:
        tests = source / "tests"
    for path in tests.rglob("*.py"):
        path.write_text(_IMPORTS.sub(rf"\1\2 {PACKAGE}\3", path.read_text()))
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # another run unpacked them first
        tests.rename(target)
    return target


class StrandsSessionSuite(UpstreamSuite):
    def modules(self) -> list[Path]:
        root = _unpacked()
        if str(root.parent) not in sys.path:
            sys.path.insert(0, str(root.parent))
        plugin = importlib.import_module(f"{PACKAGE}.conftest")
        if not self.config.pluginmanager.is_registered(plugin):
            self.config.pluginmanager.register(plugin, f"{PACKAGE}-conftest")
        return [root / name for name in (*SESSION_MODULES, *OTHER_MODULES)]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path != Path(__file__):
        return None
    return StrandsSessionSuite.from_parent(parent, name="strands-session-tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect(config, items, StrandsSessionSuite, _selected)
    seen: set[str] = set()
    for item in items:
        if not any(isinstance(node, StrandsSessionSuite) for node in item.listchain()):
            continue
        name = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        seen.add(name)
        reason = DIVERGENCES.get(name)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
    stale = sorted(set(DIVERGENCES) - seen)
    if stale and seen and not config.option.keyword:
        raise pytest.UsageError(f"Strands divergences that name no test: {stale}")


def _selected(item: pytest.Item) -> bool:
    if getattr(item, "originalname", item.name) in STORAGE_OWN.get(item.path.name, set()):
        return False
    return item.path.name in {Path(m).name for m in SESSION_MODULES} or _uses_a_store(item)


def _uses_a_store(item: pytest.Item) -> bool:
    """Whether the test, or a fixture it takes, names one of the replaced stores."""
    functions: list[Any] = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for definitions in info.name2fixturedefs.values() if info else ():
        functions += [d.func for d in definitions if d.func.__module__.startswith(PACKAGE)]
    for function in functions:
        try:
            source = inspect.getsource(function)
        except (OSError, TypeError):
            continue
        if any(name in source for name in REPLACED):
            return True
    return False


@pytest.fixture(autouse=True)
def convostore_in_place(
    request: pytest.FixtureRequest, backend: BackendUnderTest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Strands' stores, in the test's module, replaced by the adapter on this test's
    database (one database per test, as the tests' stores share one directory)."""
    opened: list[convostore.sync.SyncStore] = []

    def store() -> convostore.sync.SyncStore:
        if not opened:
            opened.append(convostore.sync.connect(backend()))
        return opened[0]

    class StoreRepository(ConvostoreSessionRepository):
        def __init__(self) -> None:
            super().__init__(store())

    class StoreManager(ConvostoreSessionManager):
        def __init__(self, session_id: str, **ignored: Any) -> None:
            super().__init__(session_id, store())

    stand_ins: dict[str, type] = {
        "MockedSessionRepository": StoreRepository,
        "FileSessionManager": StoreManager,
        "S3SessionManager": StoreManager,
    }
    module = request.module
    for name, stand_in in stand_ins.items():
        if hasattr(module, name):
            monkeypatch.setattr(module, name, stand_in)
    yield
    for opened_store in opened:
        opened_store.close()
