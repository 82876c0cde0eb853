"""Every example in the README and in the docstrings runs, on a fresh SQLite file.

README snippets run in order in one namespace, as `python -m asyncio` would run them
(top-level ``await`` on one event loop); a block preceded by an ``<!-- example not run:
... -->`` comment is skipped, with its reason. Docstring examples are doctests, and a
docstring may hold no other code example.
"""

from __future__ import annotations

import ast
import asyncio
import doctest
import importlib
import inspect
import itertools
import pkgutil
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

import convostore

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(
    r"(<!-- example not run: (?P<reason>[^>]+?) -->\n)?```python\n(?P<code>.*?)```", re.S
)


def readme_blocks() -> list[tuple[int, str, str | None]]:
    """(line, code, reason it is not run) for each Python block of the README."""
    text = README.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start("code")) + 1, match["code"], match["reason"])
        for match in BLOCK.finditer(text)
    ]


def module_names() -> list[str]:
    found = [convostore.__name__]
    for info in pkgutil.walk_packages(convostore.__path__, "convostore."):
        if not info.name.endswith(".__main__"):  # importing it runs the command line
            found.append(info.name)
    return sorted(found)


def indented_blocks(docstring: str) -> list[str]:
    """The blocks indented under a docstring's text, each after a blank line, dedented."""
    blocks: list[str] = []
    current: list[str] | None = None
    for before, line in itertools.pairwise(["", *docstring.splitlines()]):
        if current is not None and (line.startswith("    ") or not line.strip()):
            current.append(line)
            continue
        if current:
            blocks.append(textwrap.dedent("\n".join(current)).strip())
        current = [line] if not before.strip() and line.startswith("    ") else None
    if current:
        blocks.append(textwrap.dedent("\n".join(current)).strip())
    return blocks


def is_python_code(block: str) -> bool:
    """True for a block that compiles as Python and does something (a call, an
    assignment, a definition...), not a bare name or literal."""
    try:
        tree = compile(
            block, "<docstring>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
    except SyntaxError:
        return False
    return any(
        not (
            isinstance(statement, ast.Expr)
            and isinstance(statement.value, (ast.Name, ast.Constant))
        )
        for statement in tree.body
    )


def test_indented_python_blocks_are_told_from_diagrams() -> None:
    docstring = (
        "Text.\n\n    store = connect(url)\n    store.close()\n\nMore.\n\n"
        "    (:User {id})-[:OWNER]->(:Session)\n\nThen.\n\n    pip install 'convostore[all]'\n"
    )
    blocks = indented_blocks(docstring)
    assert blocks == [
        "store = connect(url)\nstore.close()",
        "(:User {id})-[:OWNER]->(:Session)",
        "pip install 'convostore[all]'",
    ]
    assert [is_python_code(block) for block in blocks] == [True, False, False]
    assert is_python_code("async with factory.events(s) as stream:\n    pass")


def test_readme_snippets_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = readme_blocks()
    assert len(blocks) >= 5
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    loop = asyncio.new_event_loop()
    try:
        for line, code, reason in blocks:
            if reason is not None:
                continue
            compiled = compile(
                code, f"README.md:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            )
            if compiled.co_flags & inspect.CO_COROUTINE:
                loop.run_until_complete(eval(compiled, namespace))
            else:
                exec(compiled, namespace)
    finally:
        loop.close()
    out = capsys.readouterr().out
    assert "Can we launch in March?" in out
    assert "['Launch plan']" in out
    assert "PERSISTED" in out
    assert namespace["hits"], "the hybrid search found the router messages"
    assert namespace["view"], "the active view holds the conversation"


def test_only_blocks_that_need_a_server_or_a_model_are_not_run() -> None:
    reasons = {reason for _, _, reason in readme_blocks() if reason is not None}
    assert reasons <= {
        "it needs that server",
        "it needs your agent, chain or graph (the module's doctest runs the adapter)",
    }


@pytest.mark.parametrize("name", module_names())
def test_docstring_examples_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


@pytest.mark.parametrize(
    "name", [name for name in module_names() if not name.startswith("convostore.testing")]
)
def test_docstring_code_examples_are_doctests(name: str) -> None:
    """An indented block in a docstring that is Python code is an example, and must be a
    doctest to run (a diagram or a shell command is not Python). `convostore.testing` is
    left out: its examples are pytest conftest files, and tests/contract/conftest.py is
    the one that runs."""
    module = importlib.import_module(name)
    tree = ast.parse(inspect.getsource(module))
    untested: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            for block in indented_blocks(ast.get_docstring(node) or ""):
                if not block.startswith(">>>") and is_python_code(block):
                    untested.append(f"{getattr(node, 'name', name)}: {block.splitlines()[0]}")
    assert untested == []
