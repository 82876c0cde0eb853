"""convostore: the conversation store for AI agents.

Open a store with `connect` (async) or `convostore.sync.connect` (blocking); every
public name is importable from here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from convostore.backends import DEFAULT_URL, open_store
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
from convostore.cursors import decode_cursor, encode_cursor
from convostore.embedding import Embedder, EmbeddingFailed
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
from convostore.filters import EventFilter
from convostore.ids import new_id
from convostore.model import (
    COMPACTION,
    MESSAGE,
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
    Session,
    SessionFilter,
    SessionOrder,
    SessionSummary,
    ToolCall,
    User,
)
from convostore.store import Capabilities, Store

__all__ = [
    "COMPACTION",
    "DEFAULT_URL",
    "MESSAGE",
    "Asset",
    "AssistantMessage",
    "Attachment",
    "BackendUnavailableError",
    "BaseConversationFactory",
    "Capabilities",
    "ConflictError",
    "ConversationEvent",
    "ConversationFactory",
    "ConversationMessage",
    "DataAttachment",
    "EmbeddingFailed",
    "Event",
    "EventFilter",
    "EventIdConflictError",
    "EventStream",
    "EventWrite",
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
    "Role",
    "SchemaVersionError",
    "Session",
    "SessionExistsError",
    "SessionFilter",
    "SessionNotFoundError",
    "SessionOrder",
    "SessionSummary",
    "StaleObjectError",
    "Store",
    "StoreClosedError",
    "StoreError",
    "StoredConversation",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "UnknownUserError",
    "User",
    "UserMessage",
    "connect",
    "decode_cursor",
    "encode_cursor",
    "new_id",
]


async def connect(
    url: str = DEFAULT_URL,
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
    return await open_store(url, indexed_metadata=indexed_metadata, embedder=embedder, **options)
