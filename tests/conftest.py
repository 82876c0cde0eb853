"""Settings for the whole suite.

The suite runs in a non-UTC local time zone (Asia/Kathmandu, UTC+05:45, an offset that
is not a whole hour) so that a backend or helper that reads or writes local time, or
drops an offset, shows up as a wrong instant instead of passing by luck on a UTC box.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from convostore.testing.fixtures import SKIP_VARIABLE, skipped_backends

os.environ["TZ"] = "Asia/Kathmandu"
time.tzset()


def pytest_report_header() -> str | None:
    opted_out = skipped_backends()
    if not opted_out:
        return None
    return f"backends skipped by {SKIP_VARIABLE}: {', '.join(sorted(opted_out))}"


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    """A backend's own tests (tests/backends/test_NAME.py, or the package
    tests/backends/NAME/) are left out, as its contract cases are skipped, when
    ``CONVOSTORE_SKIP_BACKENDS`` names it."""
    if collection_path.parent.name == "backends" and (
        collection_path.name.startswith("test_") or collection_path.is_dir()
    ):
        return collection_path.stem.removeprefix("test_") in skipped_backends() or None
    return None
