"""Conversations: messages routed in a 1-1 chat, persisted in the background in order,
with lifecycle events and titles.

A factory makes conversations on a store. ``conversation.add(message)`` returns the new
message's id at once: the message is in ``conversation.messages``, ``ADDED`` has been
published, and its write is queued. One writer per conversation drains that queue in
order, so writes never overtake one another; each write carries the id `add` assigned,
so a retried write is idempotent. Closing the store (or the factory) flushes every
conversation first.

Everything runs on the event loop the conversation was made on. `add` may be called from
another thread (the sync facade does): it then runs on that loop and returns when ADDED
has been published there. Listeners always run on that loop.
"""

from convostore.conversation.events import (
    DEFAULT_MAX_PENDING_EVENTS,
    ConversationEvent,
    EventStream,
    Listener,
    MessageEvent,
    MessagePersisted,
    MessageStatus,
)
from convostore.conversation.factory import (
    BaseConversationFactory,
    ConversationFactory,
    InMemoryConversationFactory,
)
from convostore.conversation.messages import (
    AssistantMessage,
    ConversationMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from convostore.conversation.stored import InMemoryConversation, StoredConversation
from convostore.conversation.titles import INTERIM_TITLE_LENGTH, TitleGenerator
from convostore.embedding import EmbeddingFailed

__all__ = [
    "DEFAULT_MAX_PENDING_EVENTS",
    "INTERIM_TITLE_LENGTH",
    "AssistantMessage",
    "BaseConversationFactory",
    "ConversationEvent",
    "ConversationFactory",
    "ConversationMessage",
    "EmbeddingFailed",
    "EventStream",
    "InMemoryConversation",
    "InMemoryConversationFactory",
    "Listener",
    "MessageEvent",
    "MessagePersisted",
    "MessageStatus",
    "StoredConversation",
    "SystemMessage",
    "TitleGenerator",
    "ToolMessage",
    "UserMessage",
]
