"""Live streams: Server-Sent Events per session, resumable with Last-Event-ID."""

from __future__ import annotations

import httpx

from convostore import MessageWrite, Role, Store

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
