"""URL schemes to backends: built-in, reserved, registered in-process, and entry points."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import convostore
from convostore import BackendUnavailableError, InvalidArgumentError
from convostore.backends import registry
from convostore.backends.interface import Backend
from convostore.backends.memory import MemoryBackend
from convostore.backends.sqlite import SQLiteBackend

SOURCE = Path(convostore.__file__).parent


class ThirdPartyBackend(MemoryBackend):
    """A backend of someone else's: the reference, under another scheme."""


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("memory://", MemoryBackend),
        ("MEMORY://", MemoryBackend),
        ("sqlite:///x.db", SQLiteBackend),
        ("x.db", SQLiteBackend),
    ],
)
def test_built_in_schemes(url: str, expected: type[Backend]) -> None:
    assert registry.backend_for(url) is expected


@pytest.mark.parametrize(
    "url",
    [
        "redis://h",
        "rediss://h",
        "redis+cluster://h:7000,g:7000",
        "rediss+cluster://h:7000",
        "valkey://h",
        "valkeys://h",
        "valkey+cluster://h:7000",
        "valkeys+cluster://h:7000",
    ],
)
def test_redis_and_valkey_schemes_name_one_backend(url: str) -> None:
    from convostore.backends.redis import RedisBackend

    assert registry.backend_for(url) is RedisBackend


def test_postgresql_schemes_name_one_backend() -> None:
    pytest.importorskip("psycopg")
    from convostore.backends.postgresql import PostgreSQLBackend

    for scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        assert registry.backend_for(f"{scheme}://host/db") is PostgreSQLBackend


def test_a_reserved_scheme_without_its_backend_is_unavailable() -> None:
    with pytest.raises(BackendUnavailableError, match="'memgraph' backend is not in this"):
        registry.backend_for("memgraph://localhost:7687")


@pytest.mark.parametrize("url", ["nosuch://x", "  ", ""])
def test_an_unknown_or_blank_url_is_refused(url: str) -> None:
    with pytest.raises(InvalidArgumentError):
        registry.backend_for(url)


def test_every_reserved_scheme_names_a_backend_class() -> None:
    for scheme, target in registry.BUILTIN.items():
        module, _, attribute = target.partition(":")
        assert module.startswith("convostore.backends."), scheme
        assert attribute.endswith("Backend"), scheme


async def test_a_backend_registered_in_process_serves_its_scheme(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "_registered", {})
    registry.register_backend("Mine", ThirdPartyBackend)
    async with await convostore.connect("mine://") as store:
        assert type(store.backend) is ThirdPartyBackend
        assert await store.version("nothing") == 0
    with pytest.raises(InvalidArgumentError):
        registry.register_backend("bad", dict)  # type: ignore[arg-type]


def test_an_entry_point_serves_its_scheme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An installed distribution's metadata, as pip would leave it.
    info = tmp_path / "thirdparty_backend-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: thirdparty-backend\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(
        "[convostore.backends]\n"
        "thirdparty = tests.unit.test_registry:ThirdPartyBackend\n"
        "broken = tests.unit.test_registry:SOURCE\n"
        "missing = no_such_module_anywhere:Backend\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert registry.backend_for("thirdparty://db") is ThirdPartyBackend
    with pytest.raises(BackendUnavailableError, match="not a Backend subclass"):
        registry.backend_for("broken://db")
    with pytest.raises(BackendUnavailableError, match="cannot import"):
        registry.backend_for("missing://db")


def test_no_upper_layer_imports_a_concrete_backend() -> None:
    concrete = {target.partition(":")[0] for target in registry.BUILTIN.values()} | {
        "convostore.backends.sql"
    }
    offenders = []
    for path in SOURCE.rglob("*.py"):
        relative = path.relative_to(SOURCE)
        if relative.parts[0] in ("backends", "testing"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            offenders += [
                f"{relative}: {name}"
                for name in names
                if any(name == c or name.startswith(c + ".") for c in concrete)
            ]
    assert offenders == []
