"""Import the OpenAI Agents SDK's `SQLiteSession` files (extra ``openai-agents``)."""

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
    parse_sqlite_time,
    require_tables,
    stable_id,
    with_id_and_time,
)
from convostore.integrations.openai_agents import item_to_write
from convostore.store import Store

__all__ = ["FORMAT", "import_openai_sqlite"]

FORMAT = "openai-sqlite"
_WHAT = "an OpenAI Agents SQLiteSession file"
# The SDK's default table names; SQLiteSession lets an app choose others.
SESSIONS_TABLE = "agent_sessions"
MESSAGES_TABLE = "agent_messages"


async def import_openai_sqlite(
    source: str | Path,
    store: Store,
    *,
    sessions_table: str = SESSIONS_TABLE,
    messages_table: str = MESSAGES_TABLE,
    progress: Progress | None = None,
) -> ImportReport:
    """Copy every session of a `SQLiteSession` file into ``store``: same session ids,
    items in the file's order with its times, each item as the adapter writes it (so
    `ConvostoreSession` reads them back equal). A rerun writes nothing new."""
    report = ImportReport(FORMAT, str(source))
    with open_readonly(source, _WHAT) as connection:
        require_tables(
            connection,
            source,
            _WHAT,
            {
                sessions_table: {"session_id"},
                messages_table: {"id", "session_id", "message_data", "created_at"},
            },
        )
        # Table names come from the caller and are checked above against the file's own.
        session_ids = [
            row[0]
            for row in connection.execute(
                f'SELECT session_id FROM "{sessions_table}" UNION '
                f'SELECT DISTINCT session_id FROM "{messages_table}" ORDER BY 1'
            )
        ]
        messages_sql = (
            f'SELECT id, message_data, created_at FROM "{messages_table}" '
            "WHERE session_id = ? ORDER BY id"
        )

        async def read(session_id: str) -> AsyncIterator[SourceSession]:
            writes = []
            for row_id, data, created_at in connection.execute(messages_sql, (session_id,)):
                try:
                    item = json.loads(data)
                except (TypeError, json.JSONDecodeError) as error:
                    raise ValueError(f"row {row_id} holds no JSON item: {error}") from error
                writes.append(
                    with_id_and_time(
                        item_to_write(item),
                        stable_id(FORMAT, session_id, str(row_id)),
                        parse_sqlite_time(created_at),
                    )
                )
            yield SourceSession(session_id, None, "chat", {"framework": "openai-agents"}, writes)

        return await import_sessions(store, report, session_ids, read, progress)
