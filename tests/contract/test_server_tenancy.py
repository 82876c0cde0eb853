"""Owners apart on one server: each owner's user records, session ids and event ids
are its own (`convostore.server.names`), so no key reads or changes what another
owner's keys wrote, and nothing another owner holds is an existence oracle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from convostore.keys import KeyRing

from .conftest import StoreFactory
from .server_helpers import Api, serving, user_message

ADA: dict[str, Any] = {
    "display_name": "Ada Lovelace",
    "email": "ada@example.org",
    "metadata": {"tier": "gold"},
}


@pytest.fixture
async def api(connect_store: StoreFactory) -> AsyncIterator[Api]:
    async with serving(await connect_store()) as running:
        assert (await running.ada.put("/v1/users/ada", json=ADA)).status_code == 200
        yield running


async def _created(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Any:
    response = await client.post(path, json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def test_another_owners_user_is_never_read_through_a_session(api: Api) -> None:
    sid = (await _created(api.grace, "/v1/sessions", {}))["id"]
    url = f"/v1/sessions/{sid}/events"
    fake = {"id": "ada", "display_name": "Not Ada"}
    await _created(api.grace, url, user_message("hi", author=fake, recipients=["ada"]))
    participants = (await api.grace.get(f"/v1/sessions/{sid}/participants")).json()
    assert participants == [
        {
            "id": "ada",
            "display_name": "Not Ada",
            "username": None,
            "email": None,
            "kind": "human",
            "metadata": {},
        }
    ]
    (summary,) = (await api.grace.get("/v1/sessions")).json()["items"]
    assert summary["started_by"] == participants[0]
    assert (await api.grace.get("/v1/users/ada")).json()["display_name"] == "Not Ada"
    # Ada's own record is untouched, and hers alone.
    mine = (await api.ada.get("/v1/users/ada")).json()
    assert (mine["display_name"], mine["email"], mine["metadata"]) == (
        "Ada Lovelace",
        "ada@example.org",
        {"tier": "gold"},
    )
    assert ADA["email"] not in (await api.grace.get(url)).text


async def test_a_user_named_first_by_another_owner_is_not_squatted(api: Api) -> None:
    sid = (await _created(api.grace, "/v1/sessions", {}))["id"]
    squat = {"id": "carol", "display_name": "Carol (support)", "email": "phish@example.org"}
    await _created(api.grace, f"/v1/sessions/{sid}/events", user_message("x", recipients=[squat]))
    ring: KeyRing = api.app.state.convostore.keys
    key, _ = await ring.create("carol")
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url="http://convostore", headers=headers
    ) as carol:
        own = (await carol.get("/v1/users/carol")).json()
        assert (own["display_name"], own["email"]) == ("carol", None)
        put = await carol.put("/v1/users/carol", json={"display_name": "Carol"})
        assert put.json()["display_name"] == "Carol"
    # Grace's record of her is Grace's, as she wrote it.
    assert (await api.grace.get("/v1/users/carol")).json()["email"] == "phish@example.org"
    # A key writes users of its own namespace only: Ada's user is not Grace's to change.
    changed = await api.grace.put("/v1/users/ada", json={"display_name": "Changed"})
    assert changed.status_code == 200
    assert (await api.ada.get("/v1/users/ada")).json()["display_name"] == "Ada Lovelace"


async def test_unknown_and_foreign_users_answer_alike(api: Api) -> None:
    ada_sid = (await _created(api.ada, "/v1/sessions", {}))["id"]
    await _created(
        api.ada,
        f"/v1/sessions/{ada_sid}/events",
        user_message("x", author={"id": "bot", "display_name": "Bot"}),
    )
    sid = (await _created(api.grace, "/v1/sessions", {}))["id"]
    url = f"/v1/sessions/{sid}/events"
    answers = []
    for name in ("ada", "bot", "nobody", "ädä"):
        response = await api.grace.post(url, json=user_message("x", author=name))
        answers.append((response.status_code, response.json()["detail"].replace(name, "N")))
    assert answers == [answers[-1]] * 4
    assert answers[0][0] == 422
    for name in ("ada", "bot", "nobody"):
        assert (await api.grace.get(f"/v1/users/{name}")).status_code == 404


async def test_ids_another_owner_chose_are_free_for_everyone_else(api: Api) -> None:
    for n, sid in enumerate(("plan-1", "план-1", "0190a000-0000-7000-8000-00000000000z")):
        ada = await _created(api.ada, "/v1/sessions", {"id": sid, "title": "Ada's"})
        grace = await _created(api.grace, "/v1/sessions", {"id": sid, "title": "Grace's"})
        assert ada["id"] == grace["id"] == sid
        assert (await api.ada.get(f"/v1/sessions/{sid}")).json()["title"] == "Ada's"
        assert (await api.grace.get(f"/v1/sessions/{sid}")).json()["title"] == "Grace's"
        again = await api.grace.post("/v1/sessions", json={"id": sid})
        assert again.status_code == 409
        for client, who in ((api.ada, "ada"), (api.grace, "grace")):
            url = f"/v1/sessions/{sid}/events"
            write = user_message(who, id=f"e-{n}", in_reply_to="e-0")
            event = await _created(client, url, write)
            assert (event["id"], event["session_id"]) == (f"e-{n}", sid)
            assert event["in_reply_to"] == "e-0"
            narrated = await client.put(
                f"/v1/sessions/{sid}/messages/e-{n}/narration", json={"narration": who}
            )
            assert narrated.status_code == 204
        items = (await api.ada.get(f"/v1/sessions/{sid}/events")).json()["items"]
        assert [(e["content"], e["narration"]) for e in items] == [("ada", "ada")]
    # Within one owner an id is still one id: another session's event id is 409.
    other = (await _created(api.ada, "/v1/sessions", {}))["id"]
    taken = await api.ada.post(f"/v1/sessions/{other}/events", json=user_message("x", id="e-1"))
    assert taken.status_code == 409
    assert taken.json()["detail"] == "event id 'e-1' is already used by another session"
    # Admin keys see the store's own ids.
    listed = (await api.admin.get("/v1/sessions", params={"owner_id": "grace"})).json()
    assert {s["session"]["id"] for s in listed["items"]} >= {"grace~plan-1", "grace~план-1"}


async def test_an_owner_id_may_not_hold_the_namespace_separator(api: Api) -> None:
    ring: KeyRing = api.app.state.convostore.keys
    with pytest.raises(ValueError, match="may not contain"):
        await ring.create("ada~bot")


async def test_put_user_replaces_the_stored_record_as_documented(api: Api) -> None:
    first = await api.ada.put("/v1/users/bot", json={"display_name": "Bot", "email": "b@x"})
    assert first.json()["display_name"] == "Bot"
    second = await api.ada.put("/v1/users/bot", json={"display_name": "Bot 2"})
    assert (second.json()["display_name"], second.json()["email"]) == ("Bot 2", None)
    assert (await api.ada.get("/v1/users/bot")).json()["display_name"] == "Bot 2"
    document = (await api.ada.get("/openapi.json")).json()
    described = document["paths"]["/v1/users/{user_id}"]["put"]["description"]
    assert "replacing the one stored" in described
