"""Live streams: Server-Sent Events per session, resumable with Last-Event-ID."""

from __future__ import annotations

import asyncio

import httpx

from convostore import MessageWrite, Role, Store
from convostore.keys import KeyRing

from .server_helpers import Frames, on_loopback, serving, user_message


async def test_stream_is_live_resumable_and_ends_with_the_session(store: Store) -> None:
    async with serving(store, poll_interval=0.2) as api, on_loopback(api.app) as base:
        headers = {"Authorization": f"Bearer {api.keys['ada']}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as ada:
            sid = (await ada.post("/v1/sessions", json={"title": "Live"})).json()["id"]
            url = f"/v1/sessions/{sid}"
            await ada.post(f"{url}/events", json=user_message("before"))
            async with ada.stream("GET", f"{url}/stream") as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                frames = Frames(response)
                await ada.post(f"{url}/events", json=user_message("after"))
                frame = await frames.next()
                assert (frame.id, frame.event, frame.data["content"]) == ("2", "message", "after")
                await ada.post(f"{url}/events", json={"type": "APP.STEP", "payload": {"n": 1}})
                frame = await frames.next()
                assert (frame.id, frame.event, frame.data["payload"]) == ("3", "event", {"n": 1})
                await ada.put(f"{url}/title", json={"title": "Renamed"})
                frame = await frames.next()
                assert (frame.event, frame.data["title"]) == ("session", "Renamed")
                # A write that does not pass through this server is found by polling.
                await store.add_message(sid, MessageWrite(Role.ASSISTANT, "direct"))
                frame = await frames.next()
                assert (frame.id, frame.data["content"]) == ("4", "direct")
            await ada.post(f"{url}/events", json=user_message("while away"))
            resumed = {"Last-Event-ID": "2"}
            async with ada.stream("GET", f"{url}/stream", headers=resumed) as response:
                frames = Frames(response)
                seen = [(await frames.next()).id for _ in range(3)]
                assert seen == ["3", "4", "5"]
                await ada.delete(url)
                frame = await frames.next()
                assert (frame.event, frame.data) == ("deleted", {"id": sid})
                assert await frames.rest() == []


async def test_after_seq_replays_from_a_position(store: Store) -> None:
    async with serving(store, poll_interval=0.2) as api, on_loopback(api.app) as base:
        headers = {"Authorization": f"Bearer {api.keys['ada']}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as ada:
            sid = (await ada.post("/v1/sessions", json={})).json()["id"]
            for n in range(3):
                await ada.post(f"/v1/sessions/{sid}/events", json=user_message(f"m{n}"))
            stream = ada.stream("GET", f"/v1/sessions/{sid}/stream", params={"after_seq": 0})
            async with stream as response:
                frames = Frames(response)
                assert [(await frames.next()).data["content"] for _ in range(3)] == [
                    "m0",
                    "m1",
                    "m2",
                ]


async def test_a_revoked_keys_stream_ends_within_seconds(store: Store) -> None:
    async with serving(store, poll_interval=0.2) as api, on_loopback(api.app) as base:
        headers = {"Authorization": f"Bearer {api.keys['ada']}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as ada:
            sid = (await ada.post("/v1/sessions", json={})).json()["id"]
            async with ada.stream("GET", f"/v1/sessions/{sid}/stream") as response:
                frames = Frames(response)
                await ada.post(f"/v1/sessions/{sid}/events", json=user_message("seen"))
                assert (await frames.next()).data["content"] == "seen"
                # Revoked by another process (its own key ring on the same database).
                (record,) = [k for k in await KeyRing(store).list() if k.owner_id == "ada"]
                assert await KeyRing(store).revoke(record.id)
                async with asyncio.timeout(5):
                    frame = await frames.next()
                    assert (frame.event, frame.data) == ("revoked", {"id": sid})
                    assert await frames.rest() == []


async def _opened(response: httpx.Response) -> Frames:
    frames = Frames(response)
    # The stream's first look is done once the server has had a moment.
    await asyncio.sleep(0.5)
    return frames


async def test_streams_end_with_deleted_however_the_session_goes(store: Store) -> None:
    async with serving(store, poll_interval=0.2) as api, on_loopback(api.app) as base:
        headers = {"Authorization": f"Bearer {api.keys['ada']}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as ada:
            thread = (await ada.post("/v1/sessions", json={})).json()["id"]
            part = await ada.post(f"/v1/sessions/{thread}/parts", json={"held_with": "ada"})
            direct = (await ada.post("/v1/sessions", json={})).json()["id"]
            expiring = await ada.post("/v1/sessions", json={"expires_at": "2001-01-01T00:00:00Z"})
            for sid, delete in (
                (part.json()["id"], lambda: ada.delete(f"/v1/sessions/{thread}")),
                (direct, lambda: store.delete_session(direct)),
                (expiring.json()["id"], lambda: store.delete_expired()),
            ):
                async with ada.stream("GET", f"/v1/sessions/{sid}/stream") as response:
                    frames = await _opened(response)
                    await delete()
                    async with asyncio.timeout(5):
                        frame = await frames.next()
                        assert (frame.event, frame.data) == ("deleted", {"id": sid})
                        assert await frames.rest() == []


async def test_a_stream_never_shows_the_session_that_reuses_its_id(store: Store) -> None:
    # A long poll: the session expires, is deleted and recreated by another owner
    # between two of the stream's looks, and no one tells the stream.
    async with serving(store, poll_interval=3) as api, on_loopback(api.app) as base:
        headers = {"Authorization": f"Bearer {api.keys['admin']}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as admin:
            body = {"id": "reuse-1", "owner_id": "grace", "expires_at": "2001-01-01T00:00:00Z"}
            assert (await admin.post("/v1/sessions", json=body)).status_code == 201
            async with admin.stream("GET", "/v1/sessions/reuse-1/stream") as response:
                frames = await _opened(response)
                assert await store.delete_expired() == 1
                await store.create_session("ada", session_id="reuse-1", title="Ada's")
                await store.add_message("reuse-1", MessageWrite(Role.USER, "Ada's secret"))
                frame = await frames.next()
                assert (frame.event, frame.data) == ("deleted", {"id": "reuse-1"})
                assert await frames.rest() == []
