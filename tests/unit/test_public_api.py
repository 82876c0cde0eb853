"""The public names of DESIGN.md, importable from the package, and the exception tree."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest

import convostore
from convostore import errors

# Every public name DESIGN.md gives, by the module it names (sections 1-5).
NAMES_BY_MODULE = {
    "convostore.model": [
        "User",
        "Session",
        "Event",
        "Message",
        "ToolCall",
        "Attachment",
        "DataAttachment",
        "Asset",
        "Role",
        "MessageWrite",
        "EventWrite",
        "PageRequest",
        "SessionOrder",
        "SessionFilter",
        "Page",
        "SessionSummary",
        "SearchHit",
        "Appended",
        "MESSAGE",
        "COMPACTION",
    ],
    "convostore.filters": ["EventFilter"],
    "convostore.store": ["Store", "Capabilities"],
    "convostore.conversation": [
        "UserMessage",
        "AssistantMessage",
        "SystemMessage",
        "ToolMessage",
        "ConversationFactory",
        "InMemoryConversationFactory",
        "StoredConversation",
        "InMemoryConversation",
        "MessageEvent",
        "MessageStatus",
        "MessagePersisted",
        "EmbeddingFailed",
    ],
    "convostore.embedding": [
        "Embedder",
        "RoleFilteringEmbedder",
        "HashingEmbedder",
        "SentenceTransformerEmbedder",
        "ReembedReport",
        "EmbeddingFailed",
    ],
    "convostore.compaction": [
        "SlidingWindow",
        "TurnWindow",
        "TokenBudget",
        "TurnCount",
        "TokenCount",
        "AnyOf",
        "CompactionResult",
    ],
    "convostore.errors": [
        "StoreError",
        "NotFoundError",
        "ConflictError",
        "InvalidArgumentError",
        "SessionNotFoundError",
        "SessionExistsError",
        "StaleObjectError",
        "EventIdConflictError",
        "UnknownUserError",
        "ReembedIncompleteError",
        "InvalidCursorError",
        "NotIndexedError",
        "SchemaVersionError",
        "BackendUnavailableError",
    ],
}


@pytest.mark.parametrize(
    ("module", "name"),
    [(m, n) for m, names in NAMES_BY_MODULE.items() for n in names],
)
def test_public_names_are_importable_from_the_package_and_their_module(
    module: str, name: str
) -> None:
    value = getattr(importlib.import_module(module), name)
    assert getattr(convostore, name) is value
    assert name in convostore.__all__
    assert name in dir(convostore)


def test_every_name_in_all_resolves() -> None:
    for name in convostore.__all__:
        assert getattr(convostore, name) is not None, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = convostore.no_such_name


def test_importing_the_package_loads_no_numpy_and_no_backend() -> None:
    probe = textwrap.dedent(
        """
        import sys
        def loaded(prefix):
            return sorted(m for m in sys.modules if m == "numpy" or m.startswith(prefix))
        import convostore
        print(loaded("convostore"))
        import convostore.conversation
        print(loaded("convostore.backends."))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    after_package, after_conversation = result.stdout.splitlines()
    assert after_package == "['convostore']"
    # The store's contract needs the backend interface and the types it exchanges with
    # backends, never a backend (nor the registry, until a URL is opened).
    assert after_conversation == "['convostore.backends.interface', 'convostore.backends.spi']"


def test_connect_entry_points_exist() -> None:
    assert callable(convostore.connect)
    sync = importlib.import_module("convostore.sync")
    assert callable(sync.connect)


@pytest.mark.parametrize(
    "name",
    [
        "SessionNotFoundError",
        "SessionExistsError",
        "StaleObjectError",
        "EventIdConflictError",
        "UnknownUserError",
        "ReembedIncompleteError",
        "InvalidCursorError",
        "NotIndexedError",
        "SchemaVersionError",
        "BackendUnavailableError",
    ],
)
def test_every_error_derives_from_store_error(name: str) -> None:
    assert issubclass(getattr(errors, name), errors.StoreError)


def test_not_found_errors_are_lookup_errors() -> None:
    assert issubclass(errors.SessionNotFoundError, LookupError)
    assert issubclass(errors.UnknownUserError, LookupError)


def test_bad_argument_errors_are_value_errors() -> None:
    for error in (
        errors.InvalidArgumentError,
        errors.InvalidCursorError,
        errors.NotIndexedError,
        errors.UnknownUserError,
    ):
        assert issubclass(error, ValueError), error


def test_conflicts_are_not_value_or_lookup_errors() -> None:
    for error in (errors.SessionExistsError, errors.StaleObjectError, errors.EventIdConflictError):
        assert not issubclass(error, (ValueError, LookupError)), error


def test_invalid_cursor_error_message() -> None:
    assert str(errors.InvalidCursorError()) == "invalid session cursor"


async def test_unknown_url_scheme_is_refused() -> None:
    for url in ("nosuchdb://x", "", "   "):
        with pytest.raises(errors.InvalidArgumentError):
            await convostore.connect(url)


def test_default_url_is_the_embedded_database() -> None:
    assert convostore.DEFAULT_URL == "sqlite:///convostore.db"


def _first_names() -> list[str]:
    """One public name of each module the package loads lazily."""
    lazy: dict[str, str] = convostore._LAZY
    return sorted({module: name for name, module in lazy.items()}.values())


@pytest.mark.parametrize("name", _first_names())
def test_each_lazy_module_imports_first_in_a_fresh_interpreter(name: str) -> None:
    """Whichever public name a program uses first, its module's imports resolve."""
    subprocess.run(
        [sys.executable, "-c", f"from convostore import {name}"],
        capture_output=True,
        text=True,
        check=True,
    )
