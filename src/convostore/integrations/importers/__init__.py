"""Importers from the agent frameworks' own stores, as a Python API and as
``convostore import FORMAT SOURCE --to URL``.

- ``openai-sqlite``: the OpenAI Agents SDK's `SQLiteSession` files
  (`import_openai_sqlite`, extra ``openai-agents``);
- ``adk-db``: Google ADK's `DatabaseSessionService` SQLite databases
  (`import_adk_db`, extra ``adk``);
- ``langchain-sql``: LangChain's `SQLChatMessageHistory` tables in SQLite
  (`import_langchain_sql`, extra ``langchain``);
- ``strands-files``: Strands Agents' `FileSessionManager` directories
  (`import_strands_files`, extra ``strands``);
- ``llamaindex-sql``: LlamaIndex's `SQLAlchemyChatStore` tables in SQLite (what
  `Memory` keeps its queue in; `import_llamaindex_sql`, extra ``llama-index``);
- ``embabel-graph``: an Embabel chat store's graph on Neo4j or FalkorDB, named by its
  URL (`import_embabel_graph`, extra ``neo4j`` or ``falkordb``).

Each reads the peer's file read-only and writes its sessions with their original ids,
order and times (where the peer keeps them), as the matching adapter writes them, one
session at a time and each whole or not at all. A rerun writes nothing new. A missing,
corrupt or foreign file stops the import with `ImportSourceError`, whose ``report`` lists
the sessions imported before it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from convostore.integrations.importers._engine import (
    ImportReport,
    ImportSourceError,
    Progress,
)
from convostore.store import Store

__all__ = [
    "FORMATS",
    "ImportReport",
    "ImportSourceError",
    "Progress",
    "import_adk_db",
    "import_embabel_graph",
    "import_langchain_sql",
    "import_llamaindex_sql",
    "import_openai_sqlite",
    "import_source",
    "import_strands_files",
]

FORMATS = (
    "openai-sqlite",
    "adk-db",
    "langchain-sql",
    "strands-files",
    "llamaindex-sql",
    "embabel-graph",
)


async def import_openai_sqlite(
    source: str | Path, store: Store, *, progress: Progress | None = None, **options: Any
) -> ImportReport:
    """See `convostore.integrations.importers.openai_sqlite.import_openai_sqlite`."""
    from convostore.integrations.importers.openai_sqlite import import_openai_sqlite as run

    return await run(source, store, progress=progress, **options)


async def import_adk_db(
    source: str | Path, store: Store, *, progress: Progress | None = None
) -> ImportReport:
    """See `convostore.integrations.importers.adk_db.import_adk_db`."""
    from convostore.integrations.importers.adk_db import import_adk_db as run

    return await run(source, store, progress=progress)


async def import_langchain_sql(
    source: str | Path, store: Store, *, progress: Progress | None = None, **options: Any
) -> ImportReport:
    """See `convostore.integrations.importers.langchain_sql.import_langchain_sql`."""
    from convostore.integrations.importers.langchain_sql import import_langchain_sql as run

    return await run(source, store, progress=progress, **options)


async def import_strands_files(
    source: str | Path, store: Store, *, progress: Progress | None = None
) -> ImportReport:
    """See `convostore.integrations.importers.strands_files.import_strands_files`."""
    from convostore.integrations.importers.strands_files import import_strands_files as run

    return await run(source, store, progress=progress)


async def import_llamaindex_sql(
    source: str | Path, store: Store, *, progress: Progress | None = None, **options: Any
) -> ImportReport:
    """See `convostore.integrations.importers.llamaindex_sql.import_llamaindex_sql`."""
    from convostore.integrations.importers.llamaindex_sql import import_llamaindex_sql as run

    return await run(source, store, progress=progress, **options)


async def import_embabel_graph(
    source: str | Path, store: Store, *, progress: Progress | None = None
) -> ImportReport:
    """See `convostore.integrations.importers.embabel_graph.import_embabel_graph`."""
    from convostore.integrations.importers.embabel_graph import import_embabel_graph as run

    return await run(str(source), store, progress=progress)


_IMPORTERS: dict[str, Callable[..., Awaitable[ImportReport]]] = {
    "openai-sqlite": import_openai_sqlite,
    "adk-db": import_adk_db,
    "langchain-sql": import_langchain_sql,
    "strands-files": import_strands_files,
    "llamaindex-sql": import_llamaindex_sql,
    "embabel-graph": import_embabel_graph,
}


async def import_source(
    format_name: str, source: str | Path, store: Store, *, progress: Progress | None = None
) -> ImportReport:
    """Import ``source`` of the named format (one of `FORMATS`) into ``store``."""
    importer = _IMPORTERS.get(format_name)
    if importer is None:
        raise ImportSourceError(
            f"unknown import format {format_name!r}: expected one of {', '.join(FORMATS)}"
        )
    return await importer(source, store, progress=progress)
