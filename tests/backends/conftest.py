"""Fixtures the backend tests of several databases share."""

from __future__ import annotations

from typing import Any

import pytest

from convostore.backends.sql import vector_cache


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the tables the vector caches build (one per store, unless something
    rebuilds): a change applied in place builds nothing."""
    counted: list[int] = []
    build = vector_cache.build

    def counting(*arguments: Any) -> Any:
        counted.append(1)
        return build(*arguments)

    monkeypatch.setattr(vector_cache, "build", counting)
    return counted
