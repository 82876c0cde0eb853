"""Running a framework's own tests against a convostore adapter.

The tests come from a snapshot of the framework's repository that the `fetch` tool left
in ``/work/.mirror`` (``CONVOSTORE_MIRRORS`` names another folder); where the snapshot is
absent the runner skips, saying so. The selected files are copied out of the snapshot
and run by pytest in a child process with a plugin of ours (``tests/integrations/
suite_plugins``) that puts the adapter where the framework's own store was. The plugin
gets the backend's URL and opens a fresh database for every test. A known difference is
a strict xfail in the plugin, naming its exception, so the run fails if it is fixed or
fails otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from convostore.testing.fixtures import BackendUnderTest

ROOT = Path(__file__).resolve().parents[2]
MIRRORS = Path(os.environ.get("CONVOSTORE_MIRRORS", "/work/.mirror"))
# The framework suites run on these backends (the adapters' own tests run on all).
SUITE_BACKENDS = frozenset(
    os.environ.get("CONVOSTORE_SUITE_BACKENDS", "memory,sqlite,postgresql").split(",")
)
URL_VARIABLE = "CONVOSTORE_SUITE_URL"


@dataclass
class SuiteResult:
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


def snapshot(repository: str) -> Path:
    """The bare git directory of a fetched snapshot, or a skip saying it is absent."""
    git_dir = MIRRORS / repository.replace("/", "+") / "repo"
    if not (git_dir / "HEAD").exists():
        pytest.skip(
            f"no snapshot of {repository} in {MIRRORS}: fetch github:{repository} to run "
            "its own tests against the adapter"
        )
    return git_dir


def extract(
    git_dir: Path, paths: Sequence[str], into: Path, relocate: tuple[str, str] = ("", "")
) -> Path:
    """Copy the files under ``paths`` of the snapshot's newest commit under ``into``
    (file by file: a snapshot may lack blobs the selection does not need), each path's
    prefix ``relocate[0]`` replaced by ``relocate[1]`` (a package named ``tests`` would
    shadow this project's)."""
    listing = subprocess.run(
        ["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", "HEAD", "--", *paths],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in listing:
        blob = subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"HEAD:{name}"],
            check=True,
            capture_output=True,
        ).stdout
        target = into / (relocate[1] + name.removeprefix(relocate[0]))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
    if not listing:
        raise AssertionError(f"the snapshot {git_dir} holds none of {list(paths)}")
    return into


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
    completed = subprocess.run(
        [
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
        ],
        cwd=tests,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1200,
    )
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
