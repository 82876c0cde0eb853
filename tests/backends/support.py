"""What the tests of one backend share: skipping a module whose driver is missing, and
a server that cannot run (skipped on a laptop, a failure under ``CI=true``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from typing import NoReturn, TypeVar

from convostore.testing.fixtures import backend_missing, in_ci
from tests.servers.shared import ServerUnavailable

__all__ = ["in_ci", "missing_driver", "served", "server_unavailable"]

Server = TypeVar("Server")


def missing_driver(module: str, extra: str) -> str | None:
    """Why the calling test module is skipped: its driver ``module`` is not installed
    (None when it is, and always under CI, which installs every extra: the module's
    imports then fail the run)."""
    if importlib.util.find_spec(module) is None and not in_ci():
        return f"the {extra} extra is not installed: pip install 'convostore[{extra}]'"
    return None


def server_unavailable(backend: str, reason: str) -> NoReturn:
    """The backend's server cannot run here: skipped on a laptop, a failure in CI."""
    backend_missing(backend, reason)


def served(backend: str, start: Callable[[], Server], stop: Callable[[], None]) -> Iterator[Server]:
    """The body of a session fixture: the server ``start`` gives (unavailable: skipped
    on a laptop, a failure in CI), stopped by ``stop`` at the end of the session."""
    try:
        started = start()
    except ServerUnavailable as why:
        server_unavailable(backend, str(why))
    yield started
    stop()
