"""Generate src/convostore/sync.py, the typed sync facade, from the async source.

Only the async classes are edited; this script writes their blocking twins: every public
coroutine method becomes a plain method that runs it on the facade's loop thread, with
the same signature, defaults and docstring; properties and plain methods pass through;
a returned conversation is wrapped, an async iterator becomes a plain one.

    python scripts/generate_sync.py          # rewrite src/convostore/sync.py
    python scripts/generate_sync.py --check  # exit 1 if it is not current

The output is formatted with ruff (found beside this interpreter, or on PATH).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src"
TARGET = SOURCE / "convostore" / "sync.py"


@dataclass(frozen=True)
class Facade:
    """One async class and the sync class generated for it."""

    module: str
    name: str
    sync_name: str
    base: str
    doc: str
    attributes: dict[str, str | None] = field(default_factory=dict)
    """Public instance attributes, read through: name -> type (None: from the class)."""
    exclude: frozenset[str] = frozenset()
    returns: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Return annotation -> (sync annotation, wrapping expression around ``{}``)."""
    docs: dict[str, str] = field(default_factory=dict)
    """Docstrings that differ from the async method's: name -> docstring."""
    extra: str = ""
    """Methods only the sync class has, written out (they end the class)."""

    @property
    def path(self) -> Path:
        return module_path(self.module)


def module_path(module: str) -> Path:
    """The source file of ``module``, a module or a package."""
    base = SOURCE.joinpath(*module.split("."))
    package = base / "__init__.py"
    return package if package.exists() else base.with_suffix(".py")


CONVERSATION = ("SyncConversation", "SyncConversation({}, self._loop_thread)")
EVENTS = ("Iterator[ConversationEvent]", "self._loop_thread.iterate({})")

FACADES = (
    Facade(
        module="convostore.store",
        name="Store",
        sync_name="SyncStore",
        base="SyncStoreBase",
        doc="A `Store` with plain blocking methods; use it as a context manager or call "
        "`close`. Work after `close` raises `StoreError`; closing twice is harmless.",
        attributes={
            "indexed_metadata": None,
            "embedder": None,
            "vector_index": None,
            "vector_index_drift": None,
        },
        exclude=frozenset({"close", "before_close"}),
        extra='''\
    def blocking_factory(
        self, factory: BaseConversationFactory[Any]
    ) -> SyncConversationFactory:
        """``factory``, made on this store's `target`, with plain blocking methods run on
        this store's loop thread (`ConversationFactory.for_sync_store` calls this)."""
        return SyncConversationFactory(factory, self._loop_thread)
''',
    ),
    Facade(
        module="convostore.conversation.factory",
        name="BaseConversationFactory",
        sync_name="SyncConversationFactory",
        base="SyncProxy[BaseConversationFactory[Any]]",
        doc="A conversation factory with plain blocking methods "
        "(`ConversationFactory.for_sync_store` makes one). Listeners run on the "
        "facade's loop thread; `events` gives a plain iterator.",
        attributes={"title_generator": "TitleGenerator | None", "title_every": "int"},
        exclude=frozenset({"store"}),
        returns={"C": CONVERSATION, "EventStream": EVENTS},
        docs={
            "events": "The events of one session from now on, as a plain iterator "
            "(bounded: the oldest are dropped for a reader more than ``max_pending`` "
            "behind). Each step waits for the next event."
        },
    ),
    Facade(
        module="convostore.conversation.stored",
        name="StoredConversation",
        sync_name="SyncConversation",
        base="SyncProxy[StoredConversation]",
        doc="A conversation with plain blocking methods; `add` returns at once, as it "
        "does on the async conversation.",
    ),
)

CONNECT_MODULE = "convostore"
CONNECT_PATH = SOURCE / "convostore" / "__init__.py"
CONNECT_DOC = (
    "Open a store, as `convostore.connect` does, with plain blocking methods. The "
    "store's event loop runs in a thread of its own until `SyncStore.close`."
)

HEADER = '''\
"""The sync facade: the async API with plain blocking methods, for scripts.

    >>> import convostore.sync
    >>> with convostore.sync.connect("sqlite:///chat.db") as store:
    ...     session = store.create_session(User("ada", "Ada Lovelace"), title="Plans")
    ...     [s.title for s in store.list_sessions("ada").items]
    ['Plans']

One event loop runs in a background thread for each facade; every method runs the async
method of the same name there and waits for it. Conversations made through a sync store
(`ConversationFactory.for_sync_store`) share that loop.

Generated by scripts/generate_sync.py from the async classes: do not edit, edit the
async source and run the script (a test checks this file is current).
"""

# Generated by scripts/generate_sync.py. Do not edit.

from __future__ import annotations

'''


class Imports:
    """The names an annotation or default uses, and the module each comes from."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def add(self, name: str, module: str) -> None:
        known = self.names.setdefault(name, module)
        if known != module:
            raise SystemExit(f"{name} is imported from both {known} and {module}")

    def render(self) -> str:
        by_module: dict[str, list[str]] = {}
        for name, module in self.names.items():
            by_module.setdefault(module, []).append(name)
        return "\n".join(
            f"from {module} import {', '.join(sorted(names))}"
            for module, names in sorted(by_module.items())
        )


class SourceModule:
    """A parsed module: where each top-level name comes from."""

    def __init__(self, module: str, path: Path) -> None:
        self.module = module
        self.tree = ast.parse(path.read_text(encoding="utf-8"))
        self.origin: dict[str, str] = {}
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    source = ".".join([*base, source] if source else base)
                for alias in node.names:
                    self.origin[alias.asname or alias.name] = source
        for node in self.tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                self.origin[node.name] = module
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                self.origin[node.target.id] = module
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.origin[target.id] = module

    def find_class(self, name: str) -> ast.ClassDef:
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        raise SystemExit(f"no class {name} in {self.module}")

    def find_function(self, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node
        raise SystemExit(f"no function {name} in {self.module}")

    def use(
        self, source: str, imports: Imports, local: frozenset[str], annotation: bool = True
    ) -> None:
        """Record the imports the expression ``source`` needs (in an annotation, a string
        is a forward reference)."""
        for node in ast.walk(ast.parse(source, mode="eval")):
            if annotation and isinstance(node, ast.Constant) and isinstance(node.value, str):
                self.use(node.value, imports, local)
            if not isinstance(node, ast.Name) or node.id in local:
                continue
            if node.id in self.origin:
                imports.add(node.id, self.origin[node.id])
            elif not hasattr(builtins, node.id):
                raise SystemExit(f"{self.module}: cannot tell where {node.id} comes from")


def _docstring(node: ast.AST, indent: str, override: str | None = None) -> str:
    doc = _wrap(override, indent) if override else ast.get_docstring(node)  # type: ignore[arg-type]
    if not doc:
        return ""
    body = doc.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return textwrap.indent(f'"""{body}"""', indent).lstrip() + "\n"


def _wrap(text: str, indent: str = "    ") -> str:
    """``text`` as docstring lines that fit beside ``indent``."""
    return "\n".join(textwrap.wrap(text, 88 - len(indent)))


def _call_arguments(arguments: ast.arguments) -> str:
    parts = [arg.arg for arg in [*arguments.posonlyargs, *arguments.args][1:]]
    if arguments.vararg:
        parts.append(f"*{arguments.vararg.arg}")
    parts += [f"{arg.arg}={arg.arg}" for arg in arguments.kwonlyargs]
    if arguments.kwarg:
        parts.append(f"**{arguments.kwarg.arg}")
    return ", ".join(parts)


def _use_arguments(
    source: SourceModule, arguments: ast.arguments, imports: Imports, local: frozenset[str]
) -> None:
    """Record the imports a signature's annotations and defaults need."""
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    if arguments.vararg:
        every.append(arguments.vararg)
    if arguments.kwarg:
        every.append(arguments.kwarg)
    for arg in every:
        if arg.annotation is not None:
            source.use(ast.unparse(arg.annotation), imports, local)
    for default in [*arguments.defaults, *arguments.kw_defaults]:
        if default is not None:
            source.use(ast.unparse(default), imports, local, annotation=False)


def _is_property(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)


def _attribute_types(cls: ast.ClassDef) -> dict[str, str]:
    types: dict[str, str] = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.AnnAssign):
            target = node.target
            if isinstance(target, ast.Name):
                types[target.id] = ast.unparse(node.annotation)
            elif (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                types[target.attr] = ast.unparse(node.annotation)
    return types


def class_chain(source: SourceModule, name: str) -> list[tuple[SourceModule, ast.ClassDef]]:
    """The class ``name`` of ``source`` after its bases written in convostore, each once,
    bases first (in the order the class names them), so a subclass's method wins."""
    chain: list[tuple[SourceModule, ast.ClassDef]] = []
    seen: set[tuple[str, str]] = set()

    def visit(module: SourceModule, class_name: str) -> None:
        if (module.module, class_name) in seen:
            return
        seen.add((module.module, class_name))
        cls = module.find_class(class_name)
        for base in cls.bases:
            if not isinstance(base, ast.Name):
                continue
            origin = module.origin.get(base.id)
            if origin is None or not origin.startswith("convostore"):
                continue
            visit(module if origin == module.module else _parsed(origin), base.id)
        chain.append((module, cls))

    visit(source, name)
    return chain


def _parsed(module: str) -> SourceModule:
    return SourceModule(module, module_path(module))


def generate_class(facade: Facade, imports: Imports) -> str:
    chain = class_chain(SourceModule(facade.module, facade.path), facade.name)
    source, cls = chain[-1]
    typevars = frozenset(facade.returns)
    imports.add(facade.name, facade.module)
    lines = [f"class {facade.sync_name}({facade.base}):"]
    lines += [f"    {_docstring(cls, '    ', facade.doc)}".rstrip(), ""]
    known: dict[str, tuple[SourceModule, str]] = {}
    members: dict[str, tuple[SourceModule, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    for module, part in chain:
        known.update((name, (module, text)) for name, text in _attribute_types(part).items())
        for node in part.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                members[node.name] = (module, node)
    for name, declared in facade.attributes.items():
        owner, annotation = (source, declared) if declared else known.get(name, (source, None))
        if annotation is None:
            raise SystemExit(f"{facade.name}.{name}: no annotated attribute")
        owner.use(annotation, imports, typevars)
        lines += [
            "    @property",
            f"    def {name}(self) -> {annotation}:",
            f"        return self._target.{name}",
            "",
        ]
    has_context = False
    for module, node in members.values():
        if node.name == "__aexit__":
            has_context = True
        if node.name.startswith("_") or node.name in facade.exclude:
            continue
        if any(
            isinstance(d, ast.Name) and d.id in ("classmethod", "staticmethod")
            for d in node.decorator_list
        ):
            continue
        _use_arguments(module, node.args, imports, typevars)
        returned = ast.unparse(node.returns) if node.returns is not None else "None"
        sync_returned, wrap = facade.returns.get(returned, (returned, "{}"))
        if sync_returned == returned:
            module.use(returned, imports, typevars)
        doc = _docstring(node, "        ", facade.docs.get(node.name))
        if _is_property(node):
            lines += ["    @property", f"    def {node.name}(self) -> {sync_returned}:"]
            if doc:
                lines.append(f"        {doc.rstrip()}")
            lines += [f"        return {wrap.format(f'self._target.{node.name}')}", ""]
            continue
        signature = ast.unparse(node.args)
        call = f"self._target.{node.name}({_call_arguments(node.args)})"
        if isinstance(node, ast.AsyncFunctionDef):
            call = f"self._run({call})"
        lines.append(f"    def {node.name}({signature}) -> {sync_returned}:")
        if doc:
            lines.append(f"        {doc.rstrip()}")
        value = wrap.format(call)
        lines += [f"        {value}" if returned == "None" else f"        return {value}", ""]
    if facade.extra:
        lines += [facade.extra]
    if has_context and facade.base.startswith("SyncProxy"):
        imports.add("TracebackType", "types")
        imports.add("Self", "typing")
        lines += [
            "    def __enter__(self) -> Self:",
            "        return self",
            "",
            "    def __exit__(",
            "        self,",
            "        exc_type: type[BaseException] | None,",
            "        exc: BaseException | None,",
            "        tb: TracebackType | None,",
            "    ) -> None:",
            "        self.close()",
            "",
        ]
    return "\n".join(lines)


def generate_connect(imports: Imports) -> str:
    source = SourceModule(CONNECT_MODULE, CONNECT_PATH)
    node = source.find_function("connect")
    _use_arguments(source, node.args, imports, frozenset())
    imports.add("LoopThread", "convostore._sync")
    call = f"_async_connect({_call_arguments_function(node.args)})"
    return "\n".join(
        [
            f"def connect({ast.unparse(node.args)}) -> SyncStore:",
            f"    {_docstring(node, '    ', CONNECT_DOC)}".rstrip(),
            "    loop_thread = LoopThread()",
            "    try:",
            f"        store = loop_thread.run({call})",
            "    except BaseException:",
            "        loop_thread.stop()",
            "        raise",
            "    return SyncStore(store, loop_thread)",
            "",
        ]
    )


def _call_arguments_function(arguments: ast.arguments) -> str:
    parts = [arg.arg for arg in [*arguments.posonlyargs, *arguments.args]]
    if arguments.vararg:
        parts.append(f"*{arguments.vararg.arg}")
    parts += [f"{arg.arg}={arg.arg}" for arg in arguments.kwonlyargs]
    if arguments.kwarg:
        parts.append(f"**{arguments.kwarg.arg}")
    return ", ".join(parts)


def generate() -> str:
    imports = Imports()
    imports.add("Any", "typing")
    imports.add("Iterator", "collections.abc")
    imports.add("ConversationEvent", "convostore.conversation.events")
    imports.add("User", "convostore.model")
    imports.add("SyncProxy", "convostore._sync")
    imports.add("SyncStoreBase", "convostore._sync")
    classes = [generate_class(facade, imports) for facade in FACADES]
    connect = generate_connect(imports)
    body = "\n\n".join([*classes, connect])
    text = (
        HEADER
        + imports.render()
        + "\n\nfrom convostore import connect as _async_connect\n\n"
        + '__all__ = ["SyncConversation", "SyncConversationFactory", "SyncProxy", '
        + '"SyncStore", "connect"]\n\n\n'
        + body
    )
    return _format(text)


def _format(text: str) -> str:
    ruff = Path(sys.executable).parent / "ruff"
    command = str(ruff) if ruff.exists() else shutil.which("ruff")
    if command is None:
        raise SystemExit("ruff is needed to format the generated file")
    for arguments in (
        ["check", "--fix-only", "--quiet", "--stdin-filename", str(TARGET), "-"],
        ["format", "--quiet", "--stdin-filename", str(TARGET), "-"],
    ):
        result = subprocess.run(
            [command, *arguments], input=text, capture_output=True, text=True, cwd=ROOT
        )
        if result.returncode != 0:
            raise SystemExit(f"ruff {arguments[0]} failed:\n{result.stderr}")
        text = result.stdout
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="fail if sync.py is not current")
    options = parser.parse_args()
    text = generate()
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
    if options.check:
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is not current: run scripts/generate_sync.py")
            return 1
        return 0
    if current != text:
        TARGET.write_text(text, encoding="utf-8")
        print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
