"""What the runners of the frameworks' own test suites share: where the suites' files
come from, and how their modules are collected under a runner's directory.

A framework's tests are never part of this repository. Each runner finds them, in this
order: the directory or git repository an environment variable names, the cache that
``scripts/fetch_framework_tests.sh`` fills (``.cache/framework-tests``, or
``$CONVOSTORE_FRAMEWORK_TESTS``), and, for a GitHub repository, its snapshot under
``/work/.mirror``. It copies the few files it runs into that cache and collects them
from there; where none is found, its one test skips and says why.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

__all__ = ["CACHE", "MIRRORS", "Missing", "UpstreamSuite", "copy_files", "deselect", "missing_item"]

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("CONVOSTORE_FRAMEWORK_TESTS", ROOT / ".cache" / "framework-tests"))
MIRRORS = Path("/work/.mirror")


class Missing(Exception):
    """Why a framework's test files cannot be had here."""


def copy_files(source: Path, commit: str | None, files: Sequence[str], into: Path) -> None:
    """Copy ``files`` (paths relative to the repository root) from ``source``, a checkout
    or a git directory (then at ``commit``), into ``into`` (same relative paths)."""
    if (source / "HEAD").is_file() and (source / "objects").is_dir():
        archive = subprocess.run(
            ["git", "--git-dir", str(source), "archive", "--format=tar", commit or "HEAD", *files],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise Missing(f"git archive in {source}: {archive.stderr.decode().strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(into, filter="data")
        return
    for name in files:
        found = source / name
        if not found.is_file():
            raise Missing(f"{found} is missing")
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found, into / name)


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
