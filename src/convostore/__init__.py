"""convostore: the conversation store for AI agents.

Open a store with `connect` (async) or `convostore.sync.connect` (blocking); every
public name is importable from here. Importing the package is cheap: each name's module
is imported when the name is first used, and a backend when a URL names it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from convostore.backends import (
        DEFAULT_URL,
    )
    from convostore.compaction import (
        AnyOf,
        CompactionResult,
        CompactionStrategy,
        CompactionTrigger,
        SlidingWindow,
        TokenBudget,
        TokenCount,
        TurnCount,
        TurnWindow,
    )
    from convostore.conversation import (
        AssistantMessage,
        BaseConversationFactory,
        ConversationEvent,
        ConversationFactory,
        ConversationMessage,
        EventStream,
        InMemoryConversation,
        InMemoryConversationFactory,
        MessageEvent,
        MessagePersisted,
        MessageStatus,
        StoredConversation,
        SystemMessage,
        ToolMessage,
        UserMessage,
    )
    from convostore.cursors import (
        decode_cursor,
        encode_cursor,
    )
    from convostore.embedding import (
        Embedder,
        EmbeddingFailed,
        HashingEmbedder,
        ReembedReport,
        RoleFilteringEmbedder,
        SentenceTransformerEmbedder,
    )
    from convostore.errors import (
        BackendUnavailableError,
        ConflictError,
        EventIdConflictError,
        InvalidArgumentError,
        InvalidCursorError,
        NotFoundError,
        NotIndexedError,
        ReembedIncompleteError,
        SchemaVersionError,
        SessionExistsError,
        SessionNotFoundError,
        StaleObjectError,
        StoreClosedError,
        StoreError,
        UnknownUserError,
    )
    from convostore.filters import (
        EventFilter,
    )
    from convostore.ids import (
        new_id,
    )
    from convostore.model import (
        COMPACTION,
        MESSAGE,
        Appended,
        Asset,
        Attachment,
        DataAttachment,
        Event,
        EventWrite,
        Message,
        MessageWrite,
        Page,
        PageRequest,
        Role,
        SearchHit,
        Session,
        SessionFilter,
        SessionOrder,
        SessionSummary,
        ToolCall,
        User,
    )
    from convostore.store import (
        Capabilities,
        Store,
    )

# Public name -> the module that defines it, imported at first use.
_LAZY: dict[str, str] = {
    "DEFAULT_URL": "convostore.backends",
    "AnyOf": "convostore.compaction",
    "CompactionResult": "convostore.compaction",
    "CompactionStrategy": "convostore.compaction",
    "CompactionTrigger": "convostore.compaction",
    "SlidingWindow": "convostore.compaction",
    "TokenBudget": "convostore.compaction",
    "TokenCount": "convostore.compaction",
    "TurnCount": "convostore.compaction",
    "TurnWindow": "convostore.compaction",
    "AssistantMessage": "convostore.conversation",
    "BaseConversationFactory": "convostore.conversation",
    "ConversationEvent": "convostore.conversation",
    "ConversationFactory": "convostore.conversation",
    "ConversationMessage": "convostore.conversation",
    "EventStream": "convostore.conversation",
    "InMemoryConversation": "convostore.conversation",
    "InMemoryConversationFactory": "convostore.conversation",
    "MessageEvent": "convostore.conversation",
    "MessagePersisted": "convostore.conversation",
    "MessageStatus": "convostore.conversation",
    "StoredConversation": "convostore.conversation",
    "SystemMessage": "convostore.conversation",
    "ToolMessage": "convostore.conversation",
    "UserMessage": "convostore.conversation",
    "decode_cursor": "convostore.cursors",
    "encode_cursor": "convostore.cursors",
    "Embedder": "convostore.embedding",
    "EmbeddingFailed": "convostore.embedding",
    "HashingEmbedder": "convostore.embedding",
    "ReembedReport": "convostore.embedding",
    "RoleFilteringEmbedder": "convostore.embedding",
    "SentenceTransformerEmbedder": "convostore.embedding",
    "BackendUnavailableError": "convostore.errors",
    "ConflictError": "convostore.errors",
    "EventIdConflictError": "convostore.errors",
    "InvalidArgumentError": "convostore.errors",
    "InvalidCursorError": "convostore.errors",
    "NotFoundError": "convostore.errors",
    "NotIndexedError": "convostore.errors",
    "ReembedIncompleteError": "convostore.errors",
    "SchemaVersionError": "convostore.errors",
    "SessionExistsError": "convostore.errors",
    "SessionNotFoundError": "convostore.errors",
    "StaleObjectError": "convostore.errors",
    "StoreClosedError": "convostore.errors",
    "StoreError": "convostore.errors",
    "UnknownUserError": "convostore.errors",
    "EventFilter": "convostore.filters",
    "new_id": "convostore.ids",
    "COMPACTION": "convostore.model",
    "MESSAGE": "convostore.model",
    "Appended": "convostore.model",
    "Asset": "convostore.model",
    "Attachment": "convostore.model",
    "DataAttachment": "convostore.model",
    "Event": "convostore.model",
    "EventWrite": "convostore.model",
    "Message": "convostore.model",
    "MessageWrite": "convostore.model",
    "Page": "convostore.model",
    "PageRequest": "convostore.model",
    "Role": "convostore.model",
    "SearchHit": "convostore.model",
    "Session": "convostore.model",
    "SessionFilter": "convostore.model",
    "SessionOrder": "convostore.model",
    "SessionSummary": "convostore.model",
    "ToolCall": "convostore.model",
    "User": "convostore.model",
    "Capabilities": "convostore.store",
    "Store": "convostore.store",
}

__all__ = [
    "COMPACTION",
    "DEFAULT_URL",
    "MESSAGE",
    "AnyOf",
    "Appended",
    "Asset",
    "AssistantMessage",
    "Attachment",
    "BackendUnavailableError",
    "BaseConversationFactory",
    "Capabilities",
    "CompactionResult",
    "CompactionStrategy",
    "CompactionTrigger",
    "ConflictError",
    "ConversationEvent",
    "ConversationFactory",
    "ConversationMessage",
    "DataAttachment",
    "Embedder",
    "EmbeddingFailed",
    "Event",
    "EventFilter",
    "EventIdConflictError",
    "EventStream",
    "EventWrite",
    "HashingEmbedder",
    "InMemoryConversation",
    "InMemoryConversationFactory",
    "InvalidArgumentError",
    "InvalidCursorError",
    "Message",
    "MessageEvent",
    "MessagePersisted",
    "MessageStatus",
    "MessageWrite",
    "NotFoundError",
    "NotIndexedError",
    "Page",
    "PageRequest",
    "ReembedIncompleteError",
    "ReembedReport",
    "Role",
    "RoleFilteringEmbedder",
    "SchemaVersionError",
    "SearchHit",
    "SentenceTransformerEmbedder",
    "Session",
    "SessionExistsError",
    "SessionFilter",
    "SessionNotFoundError",
    "SessionOrder",
    "SessionSummary",
    "SlidingWindow",
    "StaleObjectError",
    "Store",
    "StoreClosedError",
    "StoreError",
    "StoredConversation",
    "SystemMessage",
    "TokenBudget",
    "TokenCount",
    "ToolCall",
    "ToolMessage",
    "TurnCount",
    "TurnWindow",
    "UnknownUserError",
    "User",
    "UserMessage",
    "connect",
    "decode_cursor",
    "encode_cursor",
    "new_id",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'convostore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


async def connect(
    url: str = "sqlite:///convostore.db",
    *,
    embedder: Embedder | None = None,
    indexed_metadata: Iterable[str] = (),
    **options: Any,
) -> Store:
    """Open a store. ``memory://`` keeps everything in this process;
    ``sqlite:///path.db`` (the default, ``./convostore.db``) is the embedded database.
    ``embedder`` embeds each message as it is added and declares the vector index;
    ``indexed_metadata`` names the session metadata keys `Store.find_sessions_by_metadata`
    can search."""
    from convostore.store.lifecycle import open_store

    return await open_store(url, indexed_metadata=indexed_metadata, embedder=embedder, **options)
