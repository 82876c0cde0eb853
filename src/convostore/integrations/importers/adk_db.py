"""Import Google ADK's `DatabaseSessionService` databases from an SQLite file (extra
``adk``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from convostore.integrations._common import AnyWrite
from convostore.integrations.adk import (
    KEY,
    ConvostoreSessionService,
    adk_event_to_write,
    app_holder_id,
    session_kind,
    session_state_write,
    store_session_id,
    user_holder_id,
)
from convostore.integrations.importers._engine import (
    ImportReport,
    Progress,
    SourceSession,
    import_sessions,
    open_readonly,
    parse_sqlite_time,
    require_tables,
)
from convostore.model import User
from convostore.store import Store

try:
    from google.adk.events.event import Event as AdkEvent
except ImportError as error:  # pragma: no cover - depends on the environment
    from convostore.integrations._common import missing_framework

    raise missing_framework("google-adk", "adk") from error

__all__ = ["FORMAT", "import_adk_db"]

FORMAT = "adk-db"
_WHAT = "an ADK DatabaseSessionService database"
_SESSIONS_SQL = "SELECT app_name, user_id, id, state FROM sessions ORDER BY create_time, id"
_EVENTS_SQL = (
    "SELECT id, invocation_id, timestamp, event_data FROM events "
    "WHERE app_name = ? AND user_id = ? AND session_id = ? ORDER BY timestamp, id"
)


async def import_adk_db(
    source: str | Path, store: Store, *, progress: Progress | None = None
) -> ImportReport:
    """Copy every session of an ADK database (its current JSON schema) into ``store``:
    same users and apps, the session ids `ConvostoreSessionService` gives them
    (`store_session_id`), events in ADK's order with their times, each as the adapter
    writes it (so the service reads them back equal), the session's state and update
    time, and the app and user state. A rerun writes nothing new; the report lists
    convostore's session ids."""
    report = ImportReport(FORMAT, str(source))
    service = ConvostoreSessionService(store)
    with open_readonly(source, _WHAT) as connection:
        require_tables(
            connection,
            source,
            _WHAT,
            {
                "sessions": {"app_name", "user_id", "id", "state", "create_time"},
                "events": {"id", "app_name", "user_id", "session_id", "timestamp", "event_data"},
            },
        )
        rows = connection.execute(_SESSIONS_SQL).fetchall()
        by_id = {store_session_id(row[0], row[1], row[2]): row for row in rows}

        async def read(stored_id: str) -> AsyncIterator[SourceSession]:
            app_name, user_id, session_id, state = by_id[stored_id]
            writes: list[AnyWrite] = []
            events: list[AdkEvent] = []
            for event_id, invocation_id, timestamp, data in connection.execute(
                _EVENTS_SQL, (app_name, user_id, session_id)
            ):
                stored = json.loads(data) if data else {}
                if not isinstance(stored, dict):
                    raise ValueError(f"event {event_id} holds no JSON object")
                moment = stored.get("timestamp")
                if moment is None:
                    parsed = parse_sqlite_time(timestamp)
                    moment = parsed.timestamp() if parsed else 0.0
                event = AdkEvent.model_validate(
                    {**stored, "id": event_id, "invocation_id": invocation_id, "timestamp": moment}
                )
                events.append(event)
                writes.append(adk_event_to_write(stored_id, event))
            form = {"app_name": app_name, "user_id": user_id, "session_id": session_id}
            metadata = {KEY: {**form, "state": _json(state)}}
            if events:
                # ADK's update time is its newest event's timestamp.
                last = events[-1]
                writes.append(session_state_write(writes[-1].id, _json(state), last.timestamp))
            yield SourceSession(
                stored_id, User(user_id, user_id), session_kind(app_name), metadata, writes
            )
            await service.add_user(app_name, user_id)

        await import_sessions(store, report, list(by_id), read, progress)
        for app_name, state in _states(connection, "SELECT app_name, state FROM app_states"):
            await service.add_holder_delta(app_holder_id(app_name), _json(state), _origin(state))
        for app_name, user_id, state in _states(
            connection, "SELECT app_name, user_id, state FROM user_states"
        ):
            holder = user_holder_id(app_name, user_id)
            await service.add_holder_delta(holder, _json(state), _origin(state))
    return report


def _origin(state: Any) -> str:
    # The same state imported again is the same write, so a rerun adds nothing.
    return "import\0" + json.dumps(_json(state), sort_keys=True)


def _json(value: Any) -> dict[str, Any]:
    loaded = json.loads(value) if isinstance(value, str | bytes) else value
    return dict(loaded) if isinstance(loaded, dict) else {}


def _states(connection: Any, sql: str) -> list[Any]:
    import sqlite3

    try:
        return list(connection.execute(sql).fetchall())
    except sqlite3.OperationalError:
        return []
