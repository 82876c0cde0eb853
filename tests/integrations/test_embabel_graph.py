"""`convostore import embabel-graph`: an Embabel chat store's graph, built here on Neo4j
and on FalkorDB with that store's shape, imported into a store and imported again."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import convostore
from convostore import Role
from convostore.cli import main
from convostore.ids import new_id
from convostore.integrations.importers import ImportSourceError, import_embabel_graph
from tests.backends.support import server_unavailable
from tests.servers.shared import ServerUnavailable

AT = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
IDS = sorted(new_id() for _ in range(4))  # UUIDv7: their order is the messages' order

USERS = (
    "CREATE (:User {id: 'ada', displayName: 'Ada', username: 'ada1', email: 'ada@example.com'}),"
    " (:User {id: 'bot', displayName: 'Planner'})"
)
SESSIONS = (
    "MATCH (ada:User {id: 'ada'}), (bot:User {id: 'bot'})"
    " CREATE (s:ChatSession {sessionId: 'chat-1', title: 'Launch', createdAt: $at,"
    " lastActivityAt: $at})-[:OWNED_BY]->(ada)"
    " CREATE (p:ChatSession {sessionId: 'chat-1-side', kind: 'side', createdAt: $at})"
    " CREATE (p)-[:OWNED_BY]->(ada) CREATE (p)-[:PART_OF]->(s) CREATE (p)-[:WITH]->(bot)"
    # Written in the reverse order: the ids give the order.
    " CREATE (s)-[:HAS_MESSAGE]->(m2:StoredMessage {messageId: $ids[1], role: 'ASSISTANT',"
    " content: 'Checking the calendar.', createdAt: $later, narration: 'Looked it up',"
    " embedding: [0.6, 0.8], embeddingModel: 'tiny-2'})"
    " CREATE (s)-[:HAS_MESSAGE]->(m1:StoredMessage {messageId: $ids[0], role: 'USER',"
    " content: 'Can we launch in March?', createdAt: $at})"
    " CREATE (m1)-[:AUTHORED_BY]->(ada) CREATE (m1)-[:SENT_TO]->(bot)"
    " CREATE (m2)-[:AUTHORED_BY]->(bot) CREATE (m2)-[:SENT_TO]->(ada)"
    " CREATE (m2)-[:HAS_DATA_ATTACHMENT]->(:DataAttachment {id: 'd1', type: 'calendar',"
    " title: 'Free weeks', json: '{\"weeks\": [10, 11]}'})"
    " CREATE (m2)-[:HAS_ASSET]->(:StoredAsset {assetId: 'a1', name: 'plan.pdf',"
    " mimeType: 'application/pdf', sizeBytes: 1024})"
    " CREATE (p)-[:HAS_MESSAGE]->(m3:StoredMessage {messageId: $ids[2], role: 'USER',"
    " content: 'A side question', createdAt: $later})-[:AUTHORED_BY]->(ada)"
)
MALFORMED = (
    "CREATE (:ChatSession {sessionId: 'zz-broken'})-[:HAS_MESSAGE]->"
    "(:StoredMessage {messageId: $id, role: 'WIZARD', content: 'hm'})"
)


def _graph_on(kind: str) -> tuple[str, Any]:
    """The URL of an empty graph on the shared server of ``kind``, and how to run a
    query on it."""
    try:
        if kind == "neo4j":
            import neo4j

            from tests.servers.neo4j import shared_server, wipe

            url = shared_server().url()
            wipe(url)
            parts = urlsplit(url)
            driver = neo4j.GraphDatabase.driver(
                f"bolt://{parts.hostname}:{parts.port}",
                auth=(parts.username or "", parts.password or ""),
            )

            def run_neo4j(query: str, parameters: dict[str, Any]) -> None:
                driver.execute_query(query, parameters, database_="neo4j")

            return url, run_neo4j
        from falkordb import FalkorDB

        from tests.servers.falkordb import shared_server as falkordb_server

        server = falkordb_server()
        url = server.url(f"embabel_{new_id()[-8:]}")
        parts = urlsplit(url)
        client = FalkorDB(host=parts.hostname, port=parts.port)
        graph = client.select_graph(parts.path.lstrip("/"))

        def run_falkordb(query: str, parameters: dict[str, Any]) -> None:
            # FalkorDB keeps times as numbers: epoch milliseconds.
            graph.query(query, {k: _millis(v) for k, v in parameters.items()})

        return url, run_falkordb
    except ServerUnavailable as why:
        server_unavailable(kind, str(why))


def _millis(value: Any) -> Any:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else value


@pytest.mark.parametrize("kind", ["neo4j", "falkordb"])
async def test_an_embabel_graph_is_imported_whole_and_again_adds_nothing(
    kind: str, tmp_path: Path
) -> None:
    source, run = _graph_on(kind)
    run(USERS, {})
    later = AT.replace(minute=31)
    run(SESSIONS, {"at": AT, "later": later, "ids": IDS})
    target = f"sqlite:///{tmp_path / 'imported.db'}"
    seen: list[tuple[int, int, str]] = []
    async with await convostore.connect(target) as store:
        report = await import_embabel_graph(source, store, progress=lambda *a: seen.append(a))
        assert (report.imported, report.events_written) == (["chat-1", "chat-1-side"], 3)
        assert [done for done, _, _ in seen] == [1, 2]
        chat = await store.get_session("chat-1")
        assert chat is not None
        assert (chat.owner_id, chat.title, chat.kind) == ("ada", "Launch", "chat")
        assert chat.metadata["embabel.created_at"] == AT.isoformat()
        side = await store.get_session("chat-1-side")
        assert side is not None
        assert (side.part_of, side.held_with, side.kind) == ("chat-1", "bot", "side")
        first, second = await store.messages("chat-1")
        assert (first.id, first.role, first.author_id, first.recipient_ids) == (
            IDS[0],
            Role.USER,
            "ada",
            ("bot",),
        )
        assert first.created_at == AT
        assert (second.id, second.role, second.created_at) == (IDS[1], Role.ASSISTANT, later)
        assert (second.author_id, second.recipient_ids) == ("bot", ("ada",))
        assert second.narration == "Looked it up"
        assert second.embedding == pytest.approx((0.6, 0.8))
        assert second.embedding_model == "tiny-2"
        [data] = second.data
        assert (data.id, data.type, data.title, data.json) == (
            "d1",
            "calendar",
            "Free weeks",
            {"weeks": [10, 11]},
        )
        [asset] = second.assets
        assert (asset.asset_id, asset.name, asset.mime_type, asset.size_bytes) == (
            "a1",
            "plan.pdf",
            "application/pdf",
            1024,
        )
        ada = await store.get_user("ada")
        assert ada is not None
        assert (ada.display_name, ada.username, ada.email) == ("Ada", "ada1", "ada@example.com")

        again = await import_embabel_graph(source, store)
        assert (again.imported, again.unchanged, again.events_written) == (
            [],
            ["chat-1", "chat-1-side"],
            0,
        )

        run(MALFORMED, {"id": IDS[3]})
        with pytest.raises(ImportSourceError, match="WIZARD") as stopped:
            await import_embabel_graph(source, store)
        assert stopped.value.report is not None
        assert stopped.value.report.failed_session == "zz-broken"
        # Top-level sessions come first (parts after them), each in id order.
        assert stopped.value.report.unchanged == ["chat-1"]
        assert await store.get_session("zz-broken") is None

    # The command line: the same import, its summary at the end, 1 on a stopped import.
    other = f"sqlite:///{tmp_path / 'cli.db'}"
    command = ["import", "embabel-graph", source, "--to", other]
    assert await asyncio.to_thread(main, command) == 1
    async with await convostore.connect(other) as store:
        assert len(await store.messages("chat-1")) == 2
