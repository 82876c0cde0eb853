"""Import an Embabel chat store's graph, on Neo4j or FalkorDB (the ``neo4j`` or
``falkordb`` extra).

The graph it reads (read only):

    (:ChatSession {sessionId, title, kind, createdAt, lastActivityAt})
    (:ChatSession)-[:OWNED_BY]->(:User {id, displayName, username, email})
    (:ChatSession)-[:PART_OF]->(:ChatSession)   (:ChatSession)-[:WITH]->(:User)
    (:ChatSession)-[:HAS_MESSAGE]->(:StoredMessage {messageId, role, content,
        createdAt, narration, embedding, embeddingModel})
    (:StoredMessage)-[:AUTHORED_BY]->(:User)    (:StoredMessage)-[:SENT_TO]->(:User)
    (:StoredMessage)-[:HAS_ASSET]->(:StoredAsset {...})
    (:StoredMessage)-[:HAS_DATA_ATTACHMENT]->(:DataAttachment {id, type, title, json})

Sessions and messages keep their ids; messages are ordered by id (UUIDv7, so by
time) and keep their times, authors, recipients, data attachments, asset metadata,
narration and vectors with their model. A session without ``kind`` is a ``chat``; its
own creation time is kept in its metadata (``embabel.created_at``). Parts are written
after the sessions that hold them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit

from convostore.backends.registry import scheme_of
from convostore.backends.urls import redacted
from convostore.integrations.importers._engine import (
    ImportReport,
    ImportSourceError,
    Progress,
    SourceSession,
    import_sessions,
)
from convostore.model import Asset, DataAttachment, MessageWrite, Role, User
from convostore.store import Store

__all__ = ["FORMAT", "import_embabel_graph"]

FORMAT = "embabel-graph"
Rows = list[list[Any]]
Query = Callable[[str, dict[str, Any]], Awaitable[Rows]]

# Parents first (a part needs its session), each in id order.
SESSION_IDS = (
    "MATCH (s:ChatSession) OPTIONAL MATCH (s)-[:PART_OF]->(p:ChatSession)"
    " RETURN s.sessionId, p IS NOT NULL AS is_part ORDER BY is_part, s.sessionId"
)
SESSION = (
    "MATCH (s:ChatSession {sessionId: $id})"
    " OPTIONAL MATCH (s)-[:OWNED_BY]->(o:User)"
    " OPTIONAL MATCH (s)-[:PART_OF]->(p:ChatSession)"
    " OPTIONAL MATCH (s)-[:WITH]->(w:User)"
    " RETURN s.title, s.kind, s.createdAt, o.id, o.displayName, o.username, o.email,"
    " p.sessionId, w.id, w.displayName, w.username, w.email LIMIT 1"
)
MESSAGES = (
    "MATCH (:ChatSession {sessionId: $id})-[:HAS_MESSAGE]->(m:StoredMessage)"
    " OPTIONAL MATCH (m)-[:AUTHORED_BY]->(a:User)"
    " WITH m, a OPTIONAL MATCH (m)-[:SENT_TO]->(r:User)"
    " WITH m, a, collect([r.id, r.displayName, r.username, r.email]) AS recipients"
    " OPTIONAL MATCH (m)-[:HAS_DATA_ATTACHMENT]->(d:DataAttachment)"
    " WITH m, a, recipients, collect([d.id, d.type, d.title, d.json]) AS data"
    " OPTIONAL MATCH (m)-[:HAS_ASSET]->(x:StoredAsset)"
    " WITH m, a, recipients, data, collect(properties(x)) AS assets"
    " RETURN m.messageId, m.role, m.content, m.createdAt, m.narration, m.embedding,"
    " m.embeddingModel, a.id, a.displayName, a.username, a.email, recipients, data, assets"
    " ORDER BY m.messageId"
)


async def import_embabel_graph(
    source: str, store: Store, *, progress: Progress | None = None
) -> ImportReport:
    """Copy every chat session of the Embabel graph at ``source`` (a ``neo4j://``,
    ``neo4j+s://``, ``bolt://``, ``bolt+s://``, ``falkordb://`` or ``falkordbs://``
    URL) into ``store``. A rerun writes nothing new; a malformed node stops the import
    with `ImportSourceError` after the sessions before it."""
    report = ImportReport(FORMAT, _redacted(source))
    async with _reader(source) as query:
        session_ids = [str(row[0]) for row in await query(SESSION_IDS, {}) if row[0] is not None]

        async def read(session_id: str) -> AsyncIterator[SourceSession]:
            [session] = await query(SESSION, {"id": session_id})
            messages = await query(MESSAGES, {"id": session_id})
            yield _session(session_id, session, messages)

        return await import_sessions(store, report, session_ids, read, progress)


def _session(session_id: str, row: Sequence[Any], messages: Rows) -> SourceSession:
    title, kind, created_at, *owner_row = row[:7]
    part_of, *with_row = row[7:]
    created = _time(created_at, "createdAt")
    metadata = {"framework": "embabel"}
    if created is not None:
        metadata["embabel.created_at"] = created.isoformat()
    writes = [_message(message) for message in messages]
    return SourceSession(
        session_id,
        _user(owner_row),
        str(kind) if kind else "chat",
        metadata,
        writes,
        title=None if title is None else str(title),
        part_of=None if part_of is None else str(part_of),
        held_with=_user(with_row),
        narrations={
            str(message[0]): str(message[4]) for message in messages if message[4] is not None
        },
    )


def _message(row: Sequence[Any]) -> MessageWrite:
    message_id, role, content, created_at, _, embedding, model = row[:7]
    author = _user(row[7:11])
    recipients, data, assets = row[11:14]
    if not isinstance(message_id, str) or not message_id:
        raise ValueError(f"a StoredMessage has no messageId: {message_id!r}")
    try:
        checked = Role(str(role).lower())
    except ValueError:
        raise ValueError(f"message {message_id}: unknown role {role!r}") from None
    if not isinstance(content, str):
        raise ValueError(f"message {message_id}: content is not text: {content!r}")
    vector = None if embedding is None else [float(value) for value in embedding]
    return MessageWrite(
        checked,
        content,
        id=message_id,
        created_at=_time(created_at, f"message {message_id} createdAt"),
        author=author,
        recipients=[user for r in recipients if (user := _user(r)) is not None],
        data=[_data(d) for d in data if d[0] is not None],
        assets=[_asset(message_id, a) for a in assets if a],
        embedding=vector,
        embedding_model=None if vector is None or model is None else str(model),
    )


def _user(row: Sequence[Any]) -> User | None:
    user_id, display_name, username, email = row[:4]
    if user_id is None:
        return None
    return User(
        str(user_id),
        str(display_name) if display_name else str(user_id),
        username=None if username is None else str(username),
        email=None if email is None else str(email),
    )


def _data(row: Sequence[Any]) -> DataAttachment:
    attachment_id, kind, title, text = row[:4]
    value = json.loads(text) if isinstance(text, str) else text
    return DataAttachment(str(attachment_id), str(kind or "json"), title, value)


def _asset(message_id: str, values: Mapping[str, Any]) -> Asset:
    asset_id = values.get("assetId", values.get("id"))
    if asset_id is None:
        raise ValueError(f"message {message_id}: a StoredAsset has no id")
    size = values.get("sizeBytes", values.get("size"))
    return Asset(
        str(asset_id),
        str(values.get("name") or asset_id),
        mime_type=str(values.get("mimeType") or "application/octet-stream"),
        size_bytes=None if size is None else int(size),
        content_hash=values.get("contentHash"),
        storage_uri=values.get("storageUri", values.get("uri")),
        created_at=_time(values.get("createdAt"), f"message {message_id} asset createdAt"),
    )


def _time(value: Any, what: str) -> datetime | None:
    """A time as the graph keeps it: a temporal value, epoch milliseconds, or ISO text."""
    if value is None:
        return None
    to_native = getattr(value, "to_native", None)
    if to_native is not None:
        value = to_native()
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, UTC)
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    raise ValueError(f"{what} is not a time: {value!r}")


def _redacted(source: str) -> str:
    return redacted(source)


class _reader:
    """The graph's read-only queries, on the driver the URL's scheme names."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.scheme = scheme_of(source).partition("+")[0]
        self._close: Callable[[], Awaitable[None]] | None = None

    async def __aenter__(self) -> Query:
        if self.scheme in ("neo4j", "bolt"):
            return await self._neo4j()
        if self.scheme in ("falkordb", "falkordbs"):
            return await self._falkordb()
        raise ImportSourceError(
            f"{FORMAT}: give a neo4j://, bolt:// or falkordb:// URL, not {_redacted(self.source)!r}"
        )

    async def __aexit__(self, *exc: object) -> None:
        if self._close is not None:
            await self._close()

    def _parts(self) -> tuple[str, int | None, str | None, str | None, str | None]:
        """Host, port, user, password and the path's name (database or graph)."""
        parts = urlsplit(self.source)
        try:
            port = parts.port
        except ValueError as error:
            raise ImportSourceError(f"{FORMAT}: bad port in the source URL: {error}") from None
        user = unquote(parts.username) if parts.username else None
        password = None if parts.password is None else unquote(parts.password)
        name = unquote(parts.path.lstrip("/")) or None
        return parts.hostname or "localhost", port, user, password, name

    async def _neo4j(self) -> Query:
        import neo4j

        host, port, user, password, database = self._parts()
        scheme = urlsplit(self.source).scheme.lower()
        driver = neo4j.AsyncGraphDatabase.driver(
            f"{scheme}://{host}:{port or 7687}",
            auth=None if user is None else (user, password or ""),
            notifications_min_severity="OFF",
        )
        self._close = driver.close

        async def query(text: str, parameters: dict[str, Any]) -> Rows:
            async with driver.session(
                database=database, default_access_mode=neo4j.READ_ACCESS
            ) as session:
                result = await session.run(text, parameters)
                rows: Rows = await result.values()
                return rows

        return query

    async def _falkordb(self) -> Query:
        from falkordb.asyncio import FalkorDB

        host, port, user, password, name = self._parts()
        if name is None:
            raise ImportSourceError(f"{FORMAT}: name the graph in the URL's path")
        # The client probes the server (cluster or not) synchronously: off the loop.
        client = await asyncio.to_thread(
            FalkorDB,
            host=host,
            port=port or 6379,
            username=user,
            password=password,
            ssl=self.scheme == "falkordbs",
        )
        graph = client.select_graph(name)

        async def close() -> None:
            await client.connection.aclose()

        self._close = close

        async def query(text: str, parameters: dict[str, Any]) -> Rows:
            result = await graph.ro_query(text, parameters)
            rows: Rows = result.result_set
            return rows

        return query
