"""The HTTP API over every backend: the contract through HTTP, keys, errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import convostore
from convostore.embedding import HashingEmbedder
from convostore.keys import KEYS_SESSION_ID
from tests.servers import falkordb as falkordb_servers
from tests.servers import postgresql as postgresql_servers
from tests.servers.shared import ServerProcess, ServerUnavailable

from .conftest import INDEXED_KEYS, StoreFactory, backend_missing
from .server_helpers import PROBLEM, Api, serving, user_message


@pytest.fixture
async def api(connect_store: StoreFactory) -> AsyncIterator[Api]:
    store = await connect_store(indexed_metadata=INDEXED_KEYS, embedder=HashingEmbedder(32))
    async with serving(store, max_body_bytes=20_000) as running:
        yield running


async def _session(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    response = await client.post("/v1/sessions", json=fields)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["title"]
    return body


async def test_requests_without_a_valid_key_are_401(api: Api) -> None:
    response = await api.anonymous.get("/v1/sessions")
    _problem(response, 401)
    assert response.headers["www-authenticate"] == "Bearer"
    wrong = await api.anonymous.get(
        "/v1/sessions", headers={"Authorization": "Bearer cs_0000000000000000_" + "A" * 43}
    )
    _problem(wrong, 401)
    me = await api.ada.get("/v1/me")
    assert me.json()["owner_id"] == "ada"
    assert me.json()["admin"] is False


async def test_revoked_key_is_refused_at_the_next_request(api: Api) -> None:
    assert (await api.grace.get("/v1/me")).status_code == 200
    ring = api.app.state.convostore.keys
    (grace,) = [k for k in await ring.list() if k.owner_id == "grace"]
    assert await ring.revoke(grace.id)
    _problem(await api.grace.get("/v1/me"), 401)


async def test_create_get_and_update_by_etag(api: Api) -> None:
    created = await api.ada.post("/v1/sessions", json={"title": "Plan", "metadata": {"a": 1}})
    assert created.status_code == 201
    session = created.json()
    assert session["owner_id"] == "ada"
    assert session["version"] == 0
    assert created.headers["etag"] == f'"{session["stamp"]}"'
    url = f"/v1/sessions/{session['id']}"
    got = await api.ada.get(url)
    assert got.json() == session
    assert got.headers["etag"] == created.headers["etag"]
    _problem(await api.ada.patch(url, json={"title": "x"}), 428)
    updated = await api.ada.patch(
        url, json={"title": "Plan B"}, headers={"If-Match": got.headers["etag"]}
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["title"] == "Plan B"
    assert updated.json()["metadata"] == {"a": 1}
    stale = await api.ada.patch(
        url, json={"title": "lost"}, headers={"If-Match": got.headers["etag"]}
    )
    _problem(stale, 412)
    assert (await api.ada.get(url)).json()["title"] == "Plan B"
    titled = await api.ada.put(f"{url}/title", json={"title": "T"})
    assert titled.json()["title"] == "T"
    _problem(await api.ada.post("/v1/sessions", json={"id": session["id"]}), 409)
    assert (await api.ada.delete(url)).status_code == 204
    _problem(await api.ada.get(url), 404)


async def test_another_owners_session_is_404_exactly_as_a_missing_one(api: Api) -> None:
    session = await _session(api.ada, id="shared-id-1", title="mine")
    sid = session["id"]
    await api.ada.post(f"/v1/sessions/{sid}/events", json=user_message("hi", id="e-1"))
    missing = "missing-id-1"
    calls: list[tuple[str, str, Any]] = [
        ("GET", "/v1/sessions/{}", None),
        ("PATCH", "/v1/sessions/{}", {"title": "x"}),
        ("PUT", "/v1/sessions/{}/title", {"title": "x"}),
        ("DELETE", "/v1/sessions/{}", None),
        ("GET", "/v1/sessions/{}/events", None),
        ("POST", "/v1/sessions/{}/events", user_message("x")),
        ("POST", "/v1/sessions/{}/events/batch", {"expected_version": 1, "events": []}),
        ("GET", "/v1/sessions/{}/version", None),
        ("GET", "/v1/sessions/{}/parts", None),
        ("POST", "/v1/sessions/{}/parts", {"held_with": "grace"}),
        ("GET", "/v1/sessions/{}/participants", None),
        ("PUT", "/v1/sessions/{}/messages/e-1/narration", {"narration": "x"}),
        (
            "POST",
            "/v1/sessions/{}/compact",
            {"strategy": {"kind": "sliding_window", "keep_last": 0}, "summary": "s"},
        ),
        ("GET", "/v1/sessions/{}/stream", None),
    ]
    for method, path, body in calls:
        theirs = await api.grace.request(method, path.format(sid), json=body)
        absent = await api.grace.request(method, path.format(missing), json=body)
        assert theirs.status_code == absent.status_code == 404, (method, path)
        assert theirs.json()["detail"].replace(sid, missing) == absent.json()["detail"]
    searched = await api.grace.post("/v1/search", json={"query": "hi", "session_id": sid})
    _problem(searched, 404)
    _problem(await api.grace.get("/v1/sessions", params={"owner_id": "ada"}), 403)
    # Admin keys see the store's own ids: an id Ada chose lives in her namespace.
    stored = "ada~shared-id-1"
    assert (await api.admin.get(f"/v1/sessions/{stored}")).status_code == 200
    listed = await api.admin.get("/v1/sessions", params={"owner_id": "ada"})
    assert [s["session"]["id"] for s in listed.json()["items"]] == [stored]
    assert (await api.ada.get(f"/v1/sessions/{sid}/events")).json()["version"] == 1
    # The keys live in a reserved session that no key reaches.
    _problem(await api.admin.get(f"/v1/sessions/{KEYS_SESSION_ID}"), 404)


async def test_listing_pages_in_both_orders(api: Api) -> None:
    ids = [(await _session(api.ada, title=f"s{n}"))["id"] for n in range(5)]
    await api.ada.post(f"/v1/sessions/{ids[0]}/events", json=user_message("wake"))
    for order, expected in (
        ("created", list(reversed(ids))),
        ("last_activity", [ids[0], *reversed(ids[1:])]),
    ):
        seen: list[str] = []
        params: dict[str, Any] = {"order": order, "size": 2}
        while True:
            page = (await api.ada.get("/v1/sessions", params=params)).json()
            seen += [item["session"]["id"] for item in page["items"]]
            if page["next_cursor"] is None:
                break
            params = {"cursor": page["next_cursor"], "size": 2}
        assert seen == expected
    first = (await api.ada.get("/v1/sessions", params={"size": 2})).json()
    assert first["items"][-1]["message_count"] == 0
    crossed = await api.ada.get(
        "/v1/sessions", params={"cursor": first["next_cursor"], "order": "last_activity"}
    )
    _problem(crossed, 422)
    count = await api.ada.get("/v1/sessions-count")
    assert count.json() == {"count": 5}
    assert (await api.grace.get("/v1/sessions-count")).json() == {"count": 0}
    _problem(await api.ada.get("/v1/sessions", params={"size": 0}), 422)
    _problem(await api.ada.get("/v1/sessions", params={"cursor": "nonsense"}), 422)


async def test_append_is_idempotent_and_batches_check_the_version(api: Api) -> None:
    sid = (await _session(api.ada))["id"]
    other = (await _session(api.ada))["id"]
    url = f"/v1/sessions/{sid}/events"
    first = await api.ada.post(
        url,
        json=user_message(
            "hello",
            id="m-1",
            author={"id": "ada", "display_name": "Ada"},
            recipients=[{"id": "bot", "display_name": "Bot", "kind": "agent"}],
            attachments=[{"id": "f1", "filename": "a.txt"}],
            data=[{"id": "d1", "type": "table", "json": {"x": 1}}],
        ),
    )
    assert first.status_code == 201, first.text
    again = await api.ada.post(url, json=user_message("hello", id="m-1"))
    assert again.status_code == 200
    assert again.json()["seq"] == first.json()["seq"]
    assert first.json()["recipient_ids"] == ["bot"]
    assert first.json()["attachments"][0]["filename"] == "a.txt"
    _problem(
        await api.ada.post(f"/v1/sessions/{other}/events", json=user_message("x", id="m-1")), 409
    )
    event = await api.ada.post(url, json={"type": "APP.NOTE", "payload": {"n": 1}})
    assert event.status_code == 201
    assert event.json()["role"] is None
    version = (await api.ada.get(f"{url[:-7]}/version")).json()["version"]
    batch = {"expected_version": version, "events": [user_message("a"), user_message("b")]}
    applied = await api.ada.post(f"{url}/batch", json=batch)
    assert applied.json() == {"version": version + 1}
    _problem(await api.ada.post(f"{url}/batch", json=batch), 409)
    assert len((await api.ada.get(url)).json()["items"]) == 4
    _problem(await api.ada.post(url, json=user_message("x", author="nobody")), 422)
    participants = await api.ada.get(f"/v1/sessions/{sid}/participants")
    assert [u["id"] for u in participants.json()] == ["ada"]


async def test_reads_take_every_filter(api: Api) -> None:
    sid = (await _session(api.ada))["id"]
    url = f"/v1/sessions/{sid}/events"
    writes = [
        user_message("Plan the launch", created_at="2024-01-01T10:00:00+00:00"),
        {"role": "assistant", "content": "Calling", "tool_calls": [{"id": "c", "name": "cal"}]},
        {"role": "tool", "content": "free in March", "tool_call_id": "c", "branch": "a.b"},
        {"type": "APP.NOTE", "payload": 1, "synthetic": True},
        user_message("100% sure?", created_at="2030-01-01T00:00:00+00:00"),
    ]
    for write in writes:
        assert (await api.ada.post(url, json=write)).status_code == 201

    async def seqs(**params: Any) -> list[int]:
        response = await api.ada.get(url, params=params)
        assert response.status_code == 200, response.text
        return [e["seq"] for e in response.json()["items"]]

    assert await seqs() == [1, 2, 3, 4, 5]
    assert await seqs(types=["APP.NOTE"]) == [4]
    assert await seqs(roles=["assistant", "tool"]) == [2, 3]
    assert await seqs(exclude_synthetic="true") == [1, 2, 3, 5]
    assert await seqs(branch="a") == [1, 2, 4, 5]
    assert await seqs(since="2029-01-01T00:00:00Z") == [5]
    assert await seqs(until="2024-01-01T10:00:00+00:00") == [1]
    assert await seqs(text="100%") == [5]
    assert await seqs(after_seq=2, limit=2) == [3, 4]
    assert await seqs(last=1) == [5]
    assert await seqs(last=2, roles=["user", "tool"]) == [1, 3, 5]
    _problem(await api.ada.get(url, params={"limit": 1, "last": 1}), 422)
    _problem(await api.ada.get(url, params={"since": "2024-01-01T00:00:00"}), 422)
    _problem(await api.ada.get(url, params={"types": ["bad type"]}), 422)
    messages = (await api.ada.get(url, params={"types": ["MESSAGE"], "last": 1})).json()
    assert [m["content"] for m in messages["items"]] == ["100% sure?"]


async def test_compaction_and_the_active_view(api: Api) -> None:
    sid = (await _session(api.ada))["id"]
    url = f"/v1/sessions/{sid}"
    for n in range(3):
        await api.ada.post(f"{url}/events", json=user_message(f"q{n}"))
        await api.ada.post(f"{url}/events", json={"role": "assistant", "content": f"a{n}"})
    body = {"strategy": {"kind": "turn_window", "keep_turns": 1}, "summary": "earlier: q0, q1"}
    result = await api.ada.post(f"{url}/compact", json=body)
    assert result.status_code == 200, result.text
    assert result.json()["compacted"] is True
    assert len(result.json()["compacted_event_ids"]) == 4
    view = (await api.ada.get(f"{url}/events", params={"active_view": "true"})).json()
    assert [e["content"] for e in view["items"]] == ["earlier: q0, q1", "q2", "a2"]
    again = await api.ada.post(f"{url}/compact", json=body)
    assert again.json()["compacted"] is False
    full = (await api.ada.get(f"{url}/events")).json()
    assert len(full["items"]) == 8
    no_summary = {"strategy": {"kind": "sliding_window", "keep_last": 1}}
    _problem(await api.ada.post(f"{url}/compact", json=no_summary), 422)
    _problem(
        await api.ada.post(
            f"{url}/compact", json={"strategy": {"kind": "token_budget"}, "summary": "s"}
        ),
        422,
    )


async def test_search_stays_within_the_keys_owner(api: Api) -> None:
    mine = (await _session(api.ada))["id"]
    theirs = (await _session(api.grace))["id"]
    await api.ada.post(f"/v1/sessions/{mine}/events", json=user_message("router firmware"))
    await api.grace.post(f"/v1/sessions/{theirs}/events", json=user_message("router reset"))
    for mode in ("text", "vector", "hybrid"):
        hits = await api.ada.post("/v1/search", json={"query": "router", "mode": mode})
        assert hits.status_code == 200, hits.text
        assert {h["message"]["session_id"] for h in hits.json()["items"]} == {mine}
    everyone = await api.admin.post("/v1/search", json={"query": "router", "mode": "text"})
    assert {h["message"]["session_id"] for h in everyone.json()["items"]} == {mine, theirs}
    _problem(await api.ada.post("/v1/search", json={"query": "x", "owner_id": "grace"}), 403)
    _problem(await api.ada.post("/v1/search", json={"vector": [1.0, 0.0]}), 422)
    _problem(await api.ada.post("/v1/search", json={"query": "x", "k": 0}), 422)


async def test_bad_bodies_get_fitting_problems_and_write_nothing(api: Api) -> None:
    sid = (await _session(api.ada))["id"]
    url = f"/v1/sessions/{sid}/events"
    headers = {"Content-Type": "application/json"}
    _problem(await api.ada.post(url, content=b"{not json", headers=headers), 400)
    _problem(await api.ada.post(url, json={"role": "user", "content": 5}), 422)
    _problem(await api.ada.post(url, json={"role": "user"}), 422)
    _problem(await api.ada.post(url, json={"role": "user", "content": "a\u0000b"}), 422)
    _problem(await api.ada.post(url, json={"type": "lower", "payload": 1}), 422)
    _problem(await api.ada.post(url, json=user_message("x" * 30_000)), 413)

    async def chunks() -> AsyncIterator[bytes]:
        yield json.dumps(user_message("y" * 15_000)).encode()[:-2]
        yield b"y" * 15_000 + b'"}'

    _problem(await api.ada.post(url, content=chunks(), headers=headers), 413)
    _problem(await api.ada.get("/v1/no-such-path"), 404)
    assert (await api.ada.get(url)).json()["items"] == []


async def test_parts_lookup_expiry_users_and_narration(api: Api) -> None:
    thread = await _session(api.ada, metadata={"tenant": "t-9"}, expires_at="2000-01-01T00:00:00Z")
    sid = thread["id"]
    part = await api.ada.post(
        f"/v1/sessions/{sid}/parts", json={"held_with": {"id": "bot", "display_name": "Bot"}}
    )
    assert part.json()["part_of"] == sid
    assert part.json()["owner_id"] == "ada"
    parts = (await api.ada.get(f"/v1/sessions/{sid}/parts")).json()
    assert [p["session"]["id"] for p in parts] == [part.json()["id"]]
    found = await api.ada.get("/v1/sessions-lookup", params={"name": "tenant", "value": "t-9"})
    assert [s["id"] for s in found.json()] == [sid]
    assert (
        await api.grace.get("/v1/sessions-lookup", params={"name": "tenant", "value": "t-9"})
    ).json() == []
    _problem(await api.ada.get("/v1/sessions-lookup", params={"name": "other", "value": "x"}), 422)
    message = await api.ada.post(f"/v1/sessions/{sid}/events", json=user_message("hi"))
    narrated = await api.ada.put(
        f"/v1/sessions/{sid}/messages/{message.json()['id']}/narration", json={"narration": "n"}
    )
    assert narrated.status_code == 204
    events = (await api.ada.get(f"/v1/sessions/{sid}/events")).json()["items"]
    assert events[0]["narration"] == "n"
    _problem(
        await api.ada.put(f"/v1/sessions/{sid}/messages/zzz/narration", json={"narration": "n"}),
        404,
    )
    user = await api.ada.put("/v1/users/ada", json={"display_name": "Ada L."})
    assert user.json()["id"] == "ada"
    assert (await api.ada.get("/v1/users/ada")).json()["display_name"] == user.json()[
        "display_name"
    ]
    assert (await api.ada.get("/v1/users/bot")).json()["display_name"] == "Bot"
    _problem(await api.grace.get("/v1/users/bot"), 404)
    assert (await api.admin.get("/v1/users/ada~bot")).json()["id"] == "ada~bot"
    _problem(await api.admin.get("/v1/users/bot"), 404)
    _problem(await api.ada.post("/v1/sessions-expired/delete"), 403)
    deleted = await api.admin.post("/v1/sessions-expired/delete")
    assert deleted.json() == {"deleted": 1}
    _problem(await api.ada.get(f"/v1/sessions/{sid}"), 404)


async def test_reembed_runs_as_a_job_with_progress(api: Api) -> None:
    sid = (await _session(api.ada))["id"]
    old = {"embedding": [1.0] + [0.0] * 31, "embedding_model": "old-model"}
    for n in range(5):
        written = await api.ada.post(
            f"/v1/sessions/{sid}/events", json=user_message(f"note {n}", **old)
        )
        assert written.status_code == 201, written.text
    _problem(await api.ada.post("/v1/jobs/reembed"), 403)
    started = await api.admin.post("/v1/jobs/reembed")
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    await asyncio.wait_for(api.app.state.convostore.jobs[job_id].task, 60)
    job = (await api.admin.get(f"/v1/jobs/{job_id}")).json()
    assert job["state"] == "done", job
    assert job["messages"] == 5
    assert job["done"] == job["total"] == 5
    events = (await api.ada.get(f"/v1/sessions/{sid}/events", params={"vectors": "true"})).json()
    assert {e["embedding_model"] for e in events["items"]} == {"hashing-embedder-32"}
    _problem(await api.admin.get("/v1/jobs/unknown"), 404)


def _parent_pid(stat: Path) -> int | None:
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1])


def _killable(name: str) -> tuple[ServerProcess, Callable[[], str], Callable[[], None]]:
    """A private server of backend ``name``: the server, its URL, and how to kill it."""
    if name == "falkordb":
        falkordb = falkordb_servers.FalkorDBServer()
        return falkordb, falkordb.url, falkordb.kill
    postgresql = postgresql_servers.PostgresServer()

    def kill() -> None:
        # As a crash of the machine: the postmaster and every backend get SIGKILL.
        pid = int((postgresql.data / "postmaster.pid").read_text().split()[0])
        children = [
            int(stat.parent.name)
            for stat in Path("/proc").glob("[0-9]*/stat")
            if _parent_pid(stat) == pid
        ]
        for process in (pid, *children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process, signal.SIGKILL)

    # A dead server is found when no connection can be had: in pool_timeout seconds.
    return postgresql, lambda: postgresql.url() + "?pool_timeout=3", kill


@pytest.mark.parametrize("name", ["postgresql", "falkordb"])
async def test_a_backend_whose_server_is_down_is_503(name: str) -> None:
    server, url, kill = _killable(name)
    try:
        server.start()
    except ServerUnavailable as why:
        backend_missing(name, str(why))
    try:
        store = await convostore.connect(url())
        async with serving(store) as api:
            sid = (await _session(api.ada))["id"]
            assert (await api.ada.get(f"/v1/sessions/{sid}")).status_code == 200
            kill()
            started = time.monotonic()
            for path in (f"/v1/sessions/{sid}", f"/v1/sessions/{sid}/events", "/v1/me"):
                body = _problem(await api.ada.get(path, timeout=60), 503)
                assert "internal" not in body["detail"]
            assert time.monotonic() - started < 30
            _problem(await api.anonymous.get("/readyz", timeout=60), 503)
            assert (await api.anonymous.get("/healthz")).status_code == 200
        with contextlib.suppress(Exception):
            await store.close()
    finally:
        server.stop()


async def test_a_log_is_read_in_pages_of_a_bounded_size(api: Api) -> None:
    sid = (await _session(api.ada))["id"]
    url = f"/v1/sessions/{sid}/events"
    for start in range(0, 450, 150):
        batch = [user_message(f"m{n}") for n in range(start, start + 150)]
        version = (await api.ada.get(f"/v1/sessions/{sid}/version")).json()["version"]
        written = await api.ada.post(
            f"{url}/batch", json={"expected_version": version, "events": batch}
        )
        assert written.status_code == 200, written.text
    first = (await api.ada.get(url)).json()
    assert [e["seq"] for e in first["items"]] == list(range(1, 201))
    assert first["next_after_seq"] == 200
    seen = [e["seq"] for e in first["items"]]
    after = first["next_after_seq"]
    while after is not None:
        page = (await api.ada.get(url, params={"after_seq": after, "limit": 120})).json()
        seen += [e["seq"] for e in page["items"]]
        after = page["next_after_seq"]
    assert seen == list(range(1, 451))
    _problem(await api.ada.get(url, params={"limit": 1001}), 422)
    _problem(await api.ada.get(url, params={"last": 1001}), 422)
    window = (await api.ada.get(url, params={"last": 5})).json()
    assert ([e["seq"] for e in window["items"]], window["next_after_seq"]) == (
        [446, 447, 448, 449, 450],
        None,
    )
