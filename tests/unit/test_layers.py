"""What the backends may reach: the exchanged types, never the store above them; and
the stamps the store makes, never their own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BACKENDS = Path(__file__).resolve().parents[2] / "src" / "convostore" / "backends"


def _backend_modules() -> list[Path]:
    return sorted(BACKENDS.rglob("*.py"))


def _calls(tree: ast.AST, name: str) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == name)
            or (isinstance(node.func, ast.Attribute) and node.func.attr == name)
        )
    ]


def test_there_are_backend_modules() -> None:
    assert len(_backend_modules()) > 20


@pytest.mark.parametrize("path", _backend_modules(), ids=lambda p: str(p.relative_to(BACKENDS)))
def test_no_backend_makes_a_stamp(path: Path) -> None:
    """The store gives every stamp a backend writes (`convostore.ids.new_stamp`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert _calls(tree, "new_stamp") == []


FORBIDDEN = ("convostore.prepare", "convostore.embedding", "convostore.store")


def _imported_modules(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("path", _backend_modules(), ids=lambda p: str(p.relative_to(BACKENDS)))
def test_no_backend_imports_the_store_above_it(path: Path) -> None:
    """A backend stands on `convostore.backends.spi`, the interface, the model and the
    errors: never on the modules of the store that calls it (``backends/__init__``
    names the store's lifecycle for the type checker only, and imports it lazily)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if path == BACKENDS / "__init__.py":
        assert not any(
            isinstance(node, ast.ImportFrom) and node.module in FORBIDDEN for node in tree.body
        )
        return
    bad = sorted(
        module
        for module in _imported_modules(tree)
        if any(module == name or module.startswith(name + ".") for name in FORBIDDEN)
    )
    assert bad == []


def test_the_errors_import_nothing_above_them() -> None:
    errors = BACKENDS.parent / "errors.py"
    imported = _imported_modules(ast.parse(errors.read_text(encoding="utf-8")))
    assert {m for m in imported if m.startswith("convostore")} <= {"convostore.model"}
