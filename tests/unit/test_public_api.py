"""The public names of DESIGN.md sections 1, 2, 3 and 5, and the exception tree."""

from __future__ import annotations

import importlib

import pytest

import convostore
from convostore import errors

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
        "MESSAGE",
        "COMPACTION",
    ],
    "convostore.filters": ["EventFilter"],
    "convostore.store": ["Store", "Capabilities"],
    "convostore.errors": [
        "StoreError",
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
