"""The OpenAPI document at /openapi.json, and schemathesis against the running server:
no 500, only documented statuses, content types and shapes (a bounded number of
generated requests per run)."""

from __future__ import annotations

from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from .conftest import BackendUnderTest
from .server_helpers import ServerThread

MAX_EXAMPLES = 300
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def test_the_document_describes_every_route_and_error(backend: BackendUnderTest) -> None:
    with ServerThread(backend()) as server, httpx.Client(base_url=server.base) as client:
        document = client.get("/openapi.json").json()
    paths: dict[str, Any] = document["paths"]
    assert "/v1/sessions/{session_id}/stream" in paths
    assert "/v1/sessions/{session_id}/events/batch" in paths
    for path, operations in paths.items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "401" in responses, (method, path)
            problem = responses["422"]["content"]["application/problem+json"]
            assert problem["schema"] == {"$ref": "#/components/schemas/Problem"}
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_schemathesis_finds_no_server_error_or_undocumented_answer(
    backend: BackendUnderTest,
) -> None:
    with ServerThread(backend()) as server, httpx.Client(base_url=server.base) as client:
        document = client.get("/openapi.json").json()
        schema = schemathesis.openapi.from_dict(document).exclude(path_regex=r"/stream$")
        auth = {"Authorization": f"Bearer {server.key}"}
        # A few sessions so that some generated requests reach real ones.
        for title in ("one", "two"):
            client.post("/v1/sessions", json={"id": title, "title": title}, headers=auth)

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=schema.as_strategy())
        def run(case: Any) -> None:
            case.call_and_validate(base_url=server.base, headers=auth, checks=CHECKS)

        run()
