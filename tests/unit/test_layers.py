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


PACKAGE = BACKENDS.parent


def _module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    names: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


MODULES = _module_names()


def _known(name: str) -> str | None:
    """The innermost module of the package that importing ``name`` runs."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node that can run: top-level and inside functions, leaving out only the
    bodies of ``if TYPE_CHECKING:`` (the type checker's, never imported)."""
    found: list[ast.AST] = []
    pending = list(ast.iter_child_nodes(tree))
    while pending:
        node = pending.pop()
        found.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node):
            pending.extend(node.orelse)
        else:
            pending.extend(ast.iter_child_nodes(node))
    return found


def _imports_of(module: str, path: Path) -> set[str]:
    """The package's modules ``module`` imports when it runs: its import statements
    (top-level and function-local, relative ones resolved), the packages each runs on
    the way (a module's own enclosing packages excepted, they are already running), and
    the ``"convostore.x"`` strings of a package face that imports its names lazily
    through importlib. The backend registry's table of schemes is not counted: it finds a
    backend by URL at run time, as an entry point finds a third party's."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    nodes = _runtime_nodes(tree)
    named: set[str] = set()
    explicit: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                target = f"{base}.{alias.name}"
                named.add(target if target in MODULES else base)
                if target not in MODULES:
                    explicit.add(base)
    if path.name == "__init__.py" and "importlib" in named:
        named.update(
            node.value.partition(":")[0]
            for node in nodes
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("convostore.")
        )
    found: set[str] = set()
    own = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    for name in named:
        runs = _known(name)
        if runs is None or runs == module:
            continue
        parts = runs.split(".")
        for i in range(1, len(parts) + 1):
            step = ".".join(parts[:i])
            if step in MODULES and step != module and (step not in own or step in explicit):
                found.add(step)
    return found


def _import_graph() -> dict[str, set[str]]:
    return {module: _imports_of(module, path) for module, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_import_graph_is_read() -> None:
    graph = _import_graph()
    assert "convostore.store" in graph["convostore.store.lifecycle"]
    assert "convostore.conversation.factory" in graph["convostore.sync"]
    # a function-local import counts, and so does a lazy face's map
    assert "convostore.store.lifecycle" in graph["convostore"]
    assert "convostore.model" in graph["convostore"]


def test_there_is_no_import_circle() -> None:
    """No module of the package imports, however late (function-local, lazy face,
    registry string), a module that imports it back."""
    graph = _import_graph()
    circles = [
        [f"{module} -> {', '.join(sorted(graph[module] & set(circle)))}" for module in circle]
        for circle in _cycles(graph)
    ]
    assert circles == []


def test_the_conversation_factories_stand_below_the_faces() -> None:
    """The factories never import the sync facade or the package face, even to type."""
    tree = ast.parse(MODULES["convostore.conversation.factory"].read_text(encoding="utf-8"))
    imported = _imported_modules(tree)
    assert {"convostore", "convostore.sync"} & imported == set()


def test_no_backend_reaches_the_store_above_it() -> None:
    """Nor through a module it imports: what a backend imports, however deep, stays
    below the store (`_vectors`, say, takes `Metric` from the exchanged types)."""
    graph = _import_graph()
    reached: dict[str, set[str]] = {}
    for module in graph:
        if not module.startswith("convostore.backends."):
            continue
        seen: set[str] = set()
        pending = [module]
        while pending:
            for target in graph[pending.pop()] - seen:
                seen.add(target)
                pending.append(target)
        bad = {m for m in seen if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)}
        if bad:
            reached[module] = bad
    assert reached == {}
