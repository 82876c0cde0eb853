"""Adapters that make convostore the session store of agent frameworks, and importers
from those frameworks' own stores.

- `convostore.integrations.openai_agents.ConvostoreSession` (extra ``openai-agents``)
- `convostore.integrations.adk.ConvostoreSessionService` (extra ``adk``)
- `convostore.integrations.langchain.ConvostoreChatMessageHistory` (extra ``langchain``)
- `convostore.integrations.langgraph.ConvostoreSaver` (extra ``langgraph``)
- `convostore.integrations.strands.ConvostoreSessionRepository` (extra ``strands``)
- `convostore.integrations.llama_index.ConvostoreChatStore` and `ConvostoreDBChatStore`
  (extra ``llama-index``)
- `convostore.integrations.agent_framework.ConvostoreHistoryProvider` (extra
  ``agent-framework``)
- `convostore.integrations.pydantic_ai.ConvostoreConversationStore`, `ConvostoreHistory`,
  `load_history`, `save_messages` (extra ``pydantic-ai``)
- `convostore.integrations.importers`: ``openai-sqlite``, ``adk-db``, ``langchain-sql``,
  ``strands-files``, ``llamaindex-sql``

Each adapter takes a store of any backend and uses only its public API, so a session
written through one is readable through the store and the other adapters. Nothing here
imports a framework until its module is imported.
"""
