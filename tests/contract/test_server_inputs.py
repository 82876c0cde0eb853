"""Every input out of range is 422 (or 400 for what is not JSON), never a 500."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from convostore.embedding import HashingEmbedder

from .conftest import StoreFactory
from .server_helpers import Api, serving, user_message

OVERFLOWING_TIMES = (
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "0001-01-01T00:30:00+00:45",
)
BEYOND_INT64 = 2**63


@pytest.fixture
async def api(connect_store: StoreFactory) -> AsyncIterator[Api]:
    store = await connect_store(embedder=HashingEmbedder(8))
    async with serving(store) as running:
        yield running


async def _refused(api: Api, method: str, path: str, **request: Any) -> None:
    response = await api.ada.request(method, path, **request)
    assert response.status_code == 422, (method, path, request, response.text)
    assert response.json()["status"] == 422


async def test_times_that_overflow_in_utc_are_422(api: Api) -> None:
    sid = (await api.ada.post("/v1/sessions", json={})).json()["id"]
    url = f"/v1/sessions/{sid}"
    etag = (await api.ada.get(url)).headers["etag"]
    for time in OVERFLOWING_TIMES:
        await _refused(api, "GET", f"{url}/events", params={"since": time})
        await _refused(api, "GET", f"{url}/events", params={"until": time})
        await _refused(api, "POST", "/v1/sessions", json={"expires_at": time})
        await _refused(api, "PATCH", url, json={"expires_at": time}, headers={"If-Match": etag})
        await _refused(api, "POST", f"{url}/events", json=user_message("x", created_at=time))
        attachment = {"id": "a", "filename": "f", "created_at": time}
        await _refused(
            api, "POST", f"{url}/events", json=user_message("x", attachments=[attachment])
        )
        asset = {"asset_id": "a", "name": "n", "created_at": time}
        await _refused(
            api,
            "POST",
            f"{url}/events",
            json={"role": "assistant", "content": "", "assets": [asset]},
        )
        batch = {"expected_version": 0, "events": [user_message("x", created_at=time)]}
        await _refused(api, "POST", f"{url}/events/batch", json=batch)
        response = await api.admin.post("/v1/sessions-expired/delete", params={"before": time})
        assert response.status_code == 422, response.text
    assert (await api.ada.get(f"{url}/events")).json()["items"] == []


async def test_numbers_out_of_range_are_422(api: Api) -> None:
    sid = (await api.ada.post("/v1/sessions", json={})).json()["id"]
    url = f"/v1/sessions/{sid}"
    for huge in (BEYOND_INT64, -1, 10**400):
        await _refused(
            api, "POST", f"{url}/events/batch", json={"expected_version": huge, "events": []}
        )
        await _refused(api, "GET", f"{url}/events", params={"after_seq": huge})
        await _refused(api, "GET", f"{url}/stream", params={"after_seq": huge})
        attachment = {"id": "a", "filename": "f", "size_bytes": huge}
        await _refused(
            api, "POST", f"{url}/events", json=user_message("x", attachments=[attachment])
        )
    for header in ("²", "٣", "1" * 5000, str(BEYOND_INT64), "-1", "1e3"):
        value = header.encode("utf-8")
        await _refused(api, "GET", f"{url}/stream", headers={"Last-Event-ID": value})
    for raw in (
        b'{"role":"user","content":"x","embedding":[NaN]}',
        b'{"role":"user","content":"x","embedding":[Infinity]}',
    ):
        headers = {"Content-Type": "application/json"}
        await _refused(api, "POST", f"{url}/events", content=raw, headers=headers)
    vector = b'{"vector":[NaN,1,1,1,1,1,1,1]}'
    headers = {"Content-Type": "application/json"}
    await _refused(api, "POST", "/v1/search", content=vector, headers=headers)
    assert (await api.ada.get(f"{url}/events")).json()["items"] == []


async def test_a_refusal_names_a_few_ids_and_counts_them_all(api: Api) -> None:
    sid = (await api.ada.post("/v1/sessions", json={})).json()["id"]
    recipients = [f"u{n}" for n in range(40_000)]
    response = await api.ada.post(
        f"/v1/sessions/{sid}/events",
        json=user_message("x", recipients=recipients),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text[:300]
    assert len(response.content) < 2_000
    detail = response.json()["detail"]
    assert "'u0'" in detail
    assert "40000 in all" in detail
    shapes = await api.ada.post(
        f"/v1/sessions/{sid}/events", json=user_message("x", recipients=[{"id": 1}] * 5000)
    )
    assert shapes.status_code == 422
    assert len(shapes.content) < 6_000
    assert "errors, the first 20 listed" in shapes.json()["detail"]
