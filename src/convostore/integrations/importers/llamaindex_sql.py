"""Import LlamaIndex's `SQLAlchemyChatStore` tables (what `Memory` keeps its queue in)
from an SQLite file (extra ``llama-index``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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
from convostore.integrations.llama_index import (
    KEY,
    SESSION_KIND,
    archive_boundary,
    chat_message_to_write,
    owner_for,
    session_id_for,
)
from convostore.store import Store

try:
    from llama_index.core.base.llms.types import ChatMessage
except ImportError as error:  # pragma: no cover - depends on the environment
    from convostore.integrations._common import missing_framework

    raise missing_framework("llama-index-core", "llama-index") from error

__all__ = ["FORMAT", "import_llamaindex_sql"]

FORMAT = "llamaindex-sql"
_WHAT = "a LlamaIndex SQLAlchemyChatStore database"
TABLE = "llama_index_memory"
_ARCHIVED = "archived"


async def import_llamaindex_sql(
    source: str | Path,
    store: Store,
    *,
    table: str = TABLE,
    progress: Progress | None = None,
) -> ImportReport:
    """Copy every key of a `SQLAlchemyChatStore` table into ``store`` as
    `ConvostoreDBChatStore(store, table_name=table)` holds it: a session per key, its
    messages in the table's order with their times, the ``archived`` ones out of the
    active view (in the full log). A rerun writes nothing new; rows added since are
    appended."""
    report = ImportReport(FORMAT, str(source))
    with open_readonly(source, _WHAT) as connection:
        require_tables(
            connection, source, _WHAT, {table: {"id", "key", "timestamp", "status", "data"}}
        )
        # The table name comes from the caller and is checked above against the file's.
        keys = [
            row[0]
            for row in connection.execute(
                f'SELECT key FROM "{table}" GROUP BY key ORDER BY MIN(timestamp), MIN(id)'
            )
        ]
        rows_sql = (
            f'SELECT id, timestamp, status, data FROM "{table}" WHERE key = ? '
            "ORDER BY timestamp, id"
        )
        owner = owner_for(table)

        async def read(key: str) -> AsyncIterator[SourceSession]:
            session_id = session_id_for(table, key)
            writes = []
            archived: list[str] = []
            active: list[str] = []
            for row_id, timestamp, status, data in connection.execute(rows_sql, (key,)):
                try:
                    message = ChatMessage.model_validate(json.loads(data))
                except ValueError as error:
                    raise ValueError(
                        f"row {row_id} holds no LlamaIndex message: {error}"
                    ) from error
                event_id = stable_id(FORMAT, session_id, str(row_id))
                at = _time(timestamp)
                writes.append(with_id_and_time(chat_message_to_write(message), event_id, at))
                (archived if status == _ARCHIVED else active).append(event_id)
            if archived:
                marker = stable_id(FORMAT, session_id, "archived:" + ",".join(archived))
                writes.append(archive_boundary(marker, active))
            metadata = {KEY: {"namespace": table, "key": key}}
            yield SourceSession(session_id, owner, SESSION_KIND, metadata, writes)

        return await import_sessions(store, report, keys, read, progress)


def _time(nanoseconds: Any) -> datetime | None:
    """The table's ``time.time_ns()`` stamp as a time, to the microsecond."""
    if not isinstance(nanoseconds, int) or nanoseconds <= 0:
        return None
    seconds, rest = divmod(nanoseconds, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=rest // 1000)
