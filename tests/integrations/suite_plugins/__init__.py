"""Plugins that run a framework's own tests against its convostore adapter in a child
process (see `tests.integrations.upstream.run_suite`): each puts the adapter where the
framework's store was."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import convostore.sync
from convostore.sync import SyncStore

URL_VARIABLE = "CONVOSTORE_SUITE_URL"
_numbers = itertools.count(1)


def fresh_url(tmp_path: Path) -> str:
    """A fresh, empty database on the backend the runner named, for one test."""
    base = os.environ[URL_VARIABLE]
    number = next(_numbers)
    if base.startswith("sqlite:"):
        return f"sqlite:///{tmp_path / 'suite.db'}"
    if "schema=" in base:
        return re.sub(r"schema=([^&]+)", lambda m: f"schema={m.group(1)}_{number}", base)
    if base.startswith(("mysql:", "mariadb:", "falkordb:")):
        head, _, query = base.partition("?")
        return f"{head}_{number}" + (f"?{query}" if query else "")
    return base


@pytest.fixture
def suite_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyncStore]:
    # Not in the test's tmp_path: some tests list what their folder holds.
    with convostore.sync.connect(fresh_url(tmp_path_factory.mktemp("convostore"))) as store:
        yield store


@dataclass(frozen=True)
class Known:
    """A known difference: the test fails with ``raises``, for ``reason``."""

    reason: str
    raises: type[BaseException] | tuple[type[BaseException], ...]


def mark_known(items: Sequence[pytest.Item], known: Mapping[str, Known]) -> None:
    """Make each test named in ``known`` (``file::test`` or ``file::Class::test``, the
    node id's tail) a strict xfail raising its exception."""
    for item in items:
        node = item.nodeid.split("[")[0]
        for name, entry in known.items():
            if node == name or node.endswith("/" + name) or item.nodeid.endswith("/" + name):
                item.add_marker(
                    pytest.mark.xfail(reason=entry.reason, raises=entry.raises, strict=True)
                )
