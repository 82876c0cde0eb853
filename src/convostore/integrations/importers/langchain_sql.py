"""Import LangChain's `SQLChatMessageHistory` tables from an SQLite file (extra
``langchain``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

from convostore.integrations.importers._engine import (
    ImportReport,
    Progress,
    SourceSession,
    import_sessions,
    open_readonly,
    require_tables,
    stable_id,
    with_id_and_time,
)
from convostore.integrations.langchain import message_to_write
from convostore.store import Store

try:
    from langchain_core.messages import messages_from_dict
except ImportError as error:  # pragma: no cover - depends on the environment
    from convostore.integrations._common import missing_framework

    raise missing_framework("langchain-core", "langchain") from error

__all__ = ["FORMAT", "import_langchain_sql"]

FORMAT = "langchain-sql"
_WHAT = "a LangChain SQLChatMessageHistory database"
TABLE = "message_store"


async def import_langchain_sql(
    source: str | Path,
    store: Store,
    *,
    table: str = TABLE,
    progress: Progress | None = None,
) -> ImportReport:
    """Copy every session of a `SQLChatMessageHistory` table into ``store``: same session
    ids, messages in the table's order, each as the adapter writes it. The table keeps
    no times, so messages take the time of their import. A rerun writes nothing new."""
    report = ImportReport(FORMAT, str(source))
    with open_readonly(source, _WHAT) as connection:
        require_tables(connection, source, _WHAT, {table: {"id", "session_id", "message"}})
        # The table name comes from the caller and is checked above against the file's.
        session_ids = [
            row[0]
            for row in connection.execute(
                f'SELECT session_id FROM "{table}" GROUP BY session_id ORDER BY MIN(id)'
            )
        ]
        messages_sql = f'SELECT id, message FROM "{table}" WHERE session_id = ? ORDER BY id'

        async def read(session_id: str) -> AsyncIterator[SourceSession]:
            writes = []
            for row_id, data in connection.execute(messages_sql, (session_id,)):
                try:
                    message = messages_from_dict([json.loads(data)])[0]
                except (TypeError, KeyError, ValueError) as error:
                    raise ValueError(f"row {row_id} holds no LangChain message: {error}") from error
                writes.append(
                    with_id_and_time(
                        message_to_write(message), stable_id(FORMAT, session_id, str(row_id)), None
                    )
                )
            yield SourceSession(session_id, None, "chat", {"framework": "langchain"}, writes)

        return await import_sessions(store, report, session_ids, read, progress)
