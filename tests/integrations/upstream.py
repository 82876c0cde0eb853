"""How a framework's own test suite is fetched, found and run against our adapter.

A framework's tests are never part of this repository. `source` finds them, in this
order: the directory or git repository an environment variable names, the cache that
``scripts/fetch_framework_tests.sh`` fills (``.cache/framework-tests``, or
``$CONVOSTORE_FRAMEWORK_TESTS``), and a repository snapshot that the `fetch` tool left
in ``/work/.mirror`` (``$CONVOSTORE_MIRRORS``); `copy_files` copies the files a runner
runs out of it. Where none is found, the runner's one test skips and says why.

A suite runs in one of two ways, by what it replaces:

- collected here (`UpstreamSuite`), as children of its runner's directory, so the
  runner's conftest fixtures (the backend, the store) apply to its tests: for a suite
  that takes the store through a fixture (ADK's registry) or whose stand-ins are put in
  place per test (Strands);
- in a child process (`run_suite`), with a plugin of ``tests/integrations/suite_plugins``
  loaded before the framework's modules: for a suite whose stand-ins replace the
  framework's own classes at import, which must not leak into this process (LlamaIndex,
  Agent Framework). The plugin opens a fresh database for every test, on the URL it is
  given. The outcome counts come back through a JUnit report.

A known difference is a strict xfail (in the runner's conftest or the plugin), naming
its exception, so the run fails if it is fixed or fails otherwise.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from convostore.testing.fixtures import BackendUnderTest

__all__ = [
    "CACHE",
    "MIRRORS",
    "Missing",
    "SuiteResult",
    "UpstreamSuite",
    "copy_files",
    "deselect",
    "missing_item",
    "run_snapshot_suite",
    "run_suite",
    "source",
]

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("CONVOSTORE_FRAMEWORK_TESTS", ROOT / ".cache" / "framework-tests"))
MIRRORS = Path(os.environ.get("CONVOSTORE_MIRRORS", "/work/.mirror"))
# The suites run in a child process run on these backends (the adapters' own tests, and
# the suites collected here, run on all).
SUITE_BACKENDS = frozenset(
    os.environ.get("CONVOSTORE_SUITE_BACKENDS", "memory,sqlite,postgresql").split(",")
)
URL_VARIABLE = "CONVOSTORE_SUITE_URL"
# How long a framework's suite may run in its child process: within the per-test
# timeout (pyproject.toml), so a suite that hangs fails with its own output. Measured:
# 10 to 26 s for each suite on each backend.
SUITE_TIMEOUT_S = 240


class Missing(Exception):
    """Why a framework's test files cannot be had here."""


def source(
    probe: str,
    *,
    variable: str | None = None,
    cached: str | None = None,
    repositories: Sequence[str] = (),
    commit: str | None = None,
) -> tuple[Path, str | None]:
    """Where a framework's test files are: the checkout or git directory ``variable``
    names, else ``CACHE / cached``, else the snapshot of the first of ``repositories``
    (``owner/name``) under `MIRRORS`; with the commit to read a git directory at
    (``commit``, else its newest). ``probe`` is a path every source holds (a checkout
    must hold it as a file). Raises `Missing` naming where it looked."""
    candidates = [Path(os.environ[variable])] if variable and os.environ.get(variable) else []
    if cached is not None:
        candidates.append(CACHE / cached)
    candidates += [MIRRORS / name.replace("/", "+") / "repo" for name in repositories]
    for candidate in candidates:
        if (candidate / probe).is_file():
            return candidate, None
        if (candidate / "HEAD").is_file():
            return candidate, commit
    raise Missing(
        f"{probe} was found in none of {', '.join(map(str, candidates))}"
        + (f" (set {variable}, or run scripts/fetch_framework_tests.sh" if variable else "")
        + (f", or fetch github:{repositories[0]}" if repositories else "")
        + (")" if variable else "")
    )


def copy_files(
    source: Path,
    commit: str | None,
    files: Sequence[str],
    into: Path,
    relocate: tuple[str, str] = ("", ""),
) -> Path:
    """Copy ``files`` (paths relative to the repository root; in a git directory, folders
    too) from ``source``, a checkout or a git directory (then at ``commit``), into
    ``into``, each path's prefix ``relocate[0]`` replaced by ``relocate[1]`` (a package
    named ``tests`` would shadow this project's). Returns ``into``."""

    def target(name: str) -> str:
        return relocate[1] + name.removeprefix(relocate[0])

    if (source / "HEAD").is_file() and (source / "objects").is_dir():
        archive = subprocess.run(
            ["git", "--git-dir", str(source), "archive", "--format=tar", commit or "HEAD", *files],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise Missing(f"git archive in {source}: {archive.stderr.decode().strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            members = tar.getmembers()
            for member in members:
                member.name = target(member.name)
            tar.extractall(into, members=members, filter="data")
        return into
    for name in files:
        found = source / name
        if not found.is_file():
            raise Missing(f"{found} is missing")
        (into / target(name)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found, into / target(name))
    return into


class _Skipped(pytest.Item):
    def __init__(self, *, reason: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.reason = reason

    def runtest(self) -> None:
        pytest.skip(self.reason)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, self.name


def missing_item(parent: pytest.Collector, name: str, reason: str) -> pytest.Item:
    """One test that skips with ``reason``: what a runner collects without its files."""
    return _Skipped.from_parent(parent, name=name, reason=reason)


class UpstreamSuite(pytest.Collector):
    """A framework's test modules, collected as children of the runner's directory so the
    runner's conftest fixtures apply to them. ``modules`` gives their paths, or raises
    `Missing`."""

    def modules(self) -> list[Path]:
        raise NotImplementedError

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        try:
            paths = self.modules()
        except Missing as why:
            return [missing_item(self, "suite_unavailable", f"{self.name} not run: {why}")]
        assert self.parent is not None
        return [
            pytest.Module.from_parent(self, path=path, nodeid=f"{self.parent.nodeid}/{path.name}")
            for path in paths
        ]


def deselect(
    config: pytest.Config,
    items: list[pytest.Item],
    suite: type[UpstreamSuite],
    keep: Callable[[pytest.Item], bool],
) -> None:
    """Leave out (as deselected) the tests of ``suite`` that ``keep`` refuses."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        inside = any(isinstance(node, suite) for node in item.listchain())
        leave_out = inside and isinstance(item, pytest.Function) and not keep(item)
        (dropped if leave_out else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@dataclass
class SuiteResult:
    """What a suite run in a child process did, test by test."""

    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    xfailed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    output: str = ""

    def summary(self) -> str:
        return (
            f"{len(self.passed)} passed, {len(self.failed)} failed, "
            f"{len(self.xfailed)} xfailed (known divergences), {len(self.skipped)} skipped"
        )


def run_suite(
    backend: BackendUnderTest,
    tests: Path,
    plugin: str,
    arguments: Sequence[str] = (),
) -> SuiteResult:
    """Run pytest on ``tests`` in a child process with ``plugin`` (a module of
    ``tests.integrations.suite_plugins``), on ``backend``'s server."""
    if backend.name not in SUITE_BACKENDS:
        pytest.skip(
            f"the framework's own suite runs on {', '.join(sorted(SUITE_BACKENDS))} "
            "(CONVOSTORE_SUITE_BACKENDS); the adapter's own tests run on every backend"
        )
    report = tests / "report.xml"
    environment = {
        **os.environ,
        URL_VARIABLE: backend(),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(tests),
        "-p",
        f"tests.integrations.suite_plugins.{plugin}",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tests),
        "--confcutdir",
        str(tests),
        "-q",
        "-o",
        "asyncio_mode=auto",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
        "-W",
        "ignore::DeprecationWarning",
        f"--junitxml={report}",
        *arguments,
    ]
    try:
        completed = subprocess.run(
            command,
            cwd=tests,
            env=environment,
            capture_output=True,
            text=True,
            timeout=SUITE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout or ""
        if isinstance(output, bytes):
            output = output.decode(errors="replace")
        raise AssertionError(
            f"the suite ran past {SUITE_TIMEOUT_S} s:\n{output[-20000:]}"
        ) from expired
    result = SuiteResult(output=completed.stdout[-20000:] + completed.stderr[-5000:])
    if not report.exists():
        raise AssertionError(f"the suite did not run:\n{result.output}")
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = {child.tag: child for child in case}
        skipped = outcome.get("skipped")
        if "failure" in outcome or "error" in outcome:
            result.failed.append(name)
        elif skipped is not None and skipped.get("type") == "pytest.xfail":
            result.xfailed.append(name)
        elif skipped is not None:
            result.skipped.append(name)
        else:
            result.passed.append(name)
    print(f"{tests.name} on {backend.name}: {result.summary()}")
    return result


def run_snapshot_suite(
    backend: BackendUnderTest,
    repository: str,
    paths: Sequence[str],
    plugin: str,
    relocate: tuple[str, str] = ("", ""),
) -> SuiteResult:
    """`run_suite` on ``paths`` of a repository's snapshot (see `source`), copied to a
    temporary folder; skips, saying why, where there is no snapshot."""
    try:
        found, commit = source(paths[0], repositories=[repository])
    except Missing as why:
        pytest.skip(f"{repository}'s own tests not run: {why}")
    with tempfile.TemporaryDirectory() as folder:
        tests = copy_files(found, commit, paths, Path(folder), relocate)
        return run_suite(backend, tests, plugin)
