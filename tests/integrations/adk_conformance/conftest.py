"""Google ADK's own session-service contract tests, run against
`ConvostoreSessionService` on every backend.

ADK states what every `BaseSessionService` owes its callers in
``tests/unittests/sessions/test_session_service.py``: each test that takes the
``session_service`` fixture of its ``_conformance.py`` registry. This runner copies those
two files (and the registry's imports) from adk-python at `COMMIT` (ADK 2.7.1, the fork
``CloudEngineHub/adk-python``: google/adk-python's snapshot reachable here predates the
registry), puts its own ``session_service`` fixture in the registry's place (the
service on this test's convostore store; a known failure is a strict-xfail entry in
`DIVERGENCES`), and runs only the tests that take it.

The files come from ``$CONVOSTORE_ADK_PYTHON`` (a checkout or git directory of
adk-python at that commit), else ``.cache/framework-tests/adk-python``, else a
repository snapshot of adk-python brought to ``/work/.mirror``. Without any, the
runner's one test skips and says so. Run: ``pytest tests/integrations/adk_conformance -k sqlite``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from pathlib import Path

import pytest

from convostore import Store
from convostore.integrations.adk import ConvostoreSessionService
from tests.integrations.upstream import CACHE, UpstreamSuite, copy_files, deselect, source

COMMIT = "d9f4d3d288257593471fc708a9ab851779005ca5"
PACKAGE = "adk_upstream"
FILES = (
    "tests/unittests/__init__.py",
    "tests/unittests/sessions/__init__.py",
    "tests/unittests/sessions/_conformance.py",
    "tests/unittests/sessions/test_session_service.py",
    "tests/unittests/integrations/__init__.py",
    "tests/unittests/integrations/redis/__init__.py",
    "tests/unittests/integrations/redis/_fake_redis.py",
)
FIXTURE = "session_service"

# ADK contract test name -> why the adapter fails it today (strict-xfail).
DIVERGENCES: dict[str, str] = {}


def _source() -> tuple[Path, str | None]:
    return source(
        FILES[2],
        variable="CONVOSTORE_ADK_PYTHON",
        cached="adk-python",
        repositories=["CloudEngineHub/adk-python"],
        commit=COMMIT,
    )


class AdkSessionSuite(UpstreamSuite):
    def modules(self) -> list[Path]:
        source, commit = _source()
        target = CACHE / f"adk-python-tests-{COMMIT[:8]}" / PACKAGE
        if not (target / "unittests" / "sessions" / "test_session_service.py").is_file():
            staging = target.with_name(target.name + f".{os.getpid()}")
            copy_files(source, commit, FILES, staging)
            (staging / "tests" / "__init__.py").write_text("")
            target.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):  # another run copied them first
                (staging / "tests").rename(target)
        sys.path.insert(0, str(target.parent))
        registry = importlib.import_module(f"{PACKAGE}.unittests.sessions._conformance")
        # The test module takes its fixture from the registry: give it this runner's.
        setattr(registry, FIXTURE, session_service)
        return [target / "unittests" / "sessions" / "test_session_service.py"]


@pytest.fixture
def session_service(store: Store) -> ConvostoreSessionService:
    """convostore's ADK session service on this test's store, in the registry's place."""
    return ConvostoreSessionService(store)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path != Path(__file__):
        return None
    return AdkSessionSuite.from_parent(parent, name="adk-session-contract")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect(config, items, AdkSessionSuite, _takes_the_fixture)
    for item in items:
        reason = DIVERGENCES.get(getattr(item, "originalname", item.name))
        if reason is not None and FIXTURE in _fixtures(item):
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
    names = {getattr(item, "originalname", item.name) for item in items}
    stale = sorted(name for name in DIVERGENCES if name not in names)
    if stale and any(FIXTURE in _fixtures(item) for item in items) and not config.option.keyword:
        raise pytest.UsageError(f"ADK divergences that name no contract test: {stale}")


def _takes_the_fixture(item: pytest.Item) -> bool:
    # Two tests parametrise ``session_service`` with ADK's InMemorySessionService
    # themselves: they test ADK's service, not a registered one.
    callspec = getattr(item, "callspec", None)
    pinned = callspec is not None and FIXTURE in callspec.params
    return FIXTURE in _fixtures(item) and not pinned


def _fixtures(item: pytest.Item) -> list[str]:
    return list(getattr(item, "fixturenames", ()))
