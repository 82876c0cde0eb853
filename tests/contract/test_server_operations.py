"""What operators watch: health and readiness, Prometheus metrics, OpenTelemetry spans
and access logs without keys."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from convostore import Store, User
from convostore.server.observe import ACCESS_LOG, JsonFormatter, Observer

from .server_helpers import Api, Frames, on_loopback, serving, user_message


@pytest.fixture
async def api(store: Store) -> AsyncIterator[Api]:
    async with serving(store, poll_interval=0.2) as running:
        yield running


async def test_health_and_readiness(api: Api) -> None:
    assert (await api.anonymous.get("/healthz")).json() == {"status": "ok"}
    assert (await api.anonymous.get("/readyz")).json() == {"status": "ready"}


async def test_metrics_count_requests_streams_and_store_operations(api: Api) -> None:
    async with on_loopback(api.app) as base:
        headers = {"Authorization": f"Bearer {api.keys['ada']}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as ada:
            sid = (await ada.post("/v1/sessions", json={})).json()["id"]
            await ada.post(f"/v1/sessions/{sid}/events", json=user_message("hi"))
            await ada.get(f"/v1/sessions/{sid}/events", params={"last": 10})
            await ada.get("/v1/sessions/missing")
            async with ada.stream("GET", f"/v1/sessions/{sid}/stream") as response:
                frames = Frames(response)
                await ada.post(f"/v1/sessions/{sid}/events", json=user_message("live"))
                await frames.next()
                during = (await api.admin.get("/metrics")).text
            assert (await api.ada.get("/metrics")).status_code == 401
            assert (await api.anonymous.get("/metrics")).status_code == 401
            # The server finds the stream closed at its next look.
            for _ in range(50):
                after = (await api.admin.get("/metrics")).text
                if "convostore_open_streams 0.0" in after:
                    break
                await asyncio.sleep(0.1)
    assert "convostore_open_streams 1.0" in during
    assert "convostore_open_streams 0.0" in after
    assert (
        'convostore_http_requests_total{method="POST",route="/v1/sessions/{session_id}/events",'
        'status="201"} 2.0'
    ) in after
    assert (
        'convostore_http_requests_total{method="GET",route="/v1/sessions/{session_id}",'
        'status="404"} 1.0'
    ) in after
    assert 'convostore_http_request_duration_seconds_bucket{le="0.005",method="GET"' in after
    operation_count = r'convostore_store_operation_seconds_count\{operation="(\w+)"\} (\S+)'
    counts = dict(re.findall(operation_count, after))
    assert float(counts["append"]) == 2
    assert float(counts["read"]) >= 1
    assert float(counts["get_session"]) >= 5


@pytest.fixture
def access_log() -> Iterator[list[str]]:
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Collect()
    handler.setFormatter(JsonFormatter())
    level = ACCESS_LOG.level
    ACCESS_LOG.addHandler(handler)
    ACCESS_LOG.setLevel(logging.INFO)
    yield lines
    ACCESS_LOG.removeHandler(handler)
    ACCESS_LOG.setLevel(level)


async def test_json_access_logs_name_the_key_by_id_only(api: Api, access_log: list[str]) -> None:
    sid = (await api.ada.post("/v1/sessions", json={})).json()["id"]
    await api.ada.get(f"/v1/sessions/{sid}/events", params={"text": "secret words"})
    await api.anonymous.get("/v1/sessions")
    records = [json.loads(line) for line in access_log]
    assert [(r["method"], r["route"], r["status"]) for r in records] == [
        ("POST", "/v1/sessions", 201),
        ("GET", "/v1/sessions/{session_id}/events", 200),
        ("GET", "unmatched", 401),
    ]
    (me,) = [k for k in await api.app.state.convostore.keys.list() if k.owner_id == "ada"]
    assert records[0]["key_id"] == me.id
    assert records[2]["key_id"] is None
    assert all(r["duration_ms"] >= 0 and r["level"] == "info" for r in records)
    text = "\n".join(access_log)
    assert api.keys["ada"] not in text
    assert "secret" not in text


async def test_every_store_operation_is_a_span(store: Store) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = Observer()
    observer.tracer = provider.get_tracer("convostore")
    assert isinstance(trace.get_tracer("x"), trace.Tracer)
    observed = observer.store(store)
    session = await observed.create_session(User("ada", "Ada"))
    await observed.read(session.id)
    names = [span.name for span in exporter.get_finished_spans()]
    assert names == ["convostore.create_session", "convostore.read"]


def test_without_the_libraries_nothing_is_wrapped(
    monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    observer = Observer()
    assert observer.store(store) is store
    assert observer.exposition() is None
