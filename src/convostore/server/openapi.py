"""How the API documents its errors: every status a route can answer, each as
``application/problem+json`` with the `Problem` schema."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from convostore.server.schemas import Problem

__all__ = ["COMMON", "install_openapi", "problems"]

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_DESCRIPTIONS = {
    400: "Malformed JSON",
    401: "No key, or an unknown or revoked one",
    403: "The key may not do this",
    404: "No such session (or another owner's)",
    409: "A conflict with what is stored; nothing was written",
    412: "The stamp in If-Match is stale; nothing was written",
    413: "The body is over the server's limit",
    422: "Values the store refuses, or a body of the wrong shape",
    428: "If-Match is required",
    503: "The backend is unavailable",
}
COMMON = (400, 401, 413, 422, 503)


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {
        code: {
            "description": _DESCRIPTIONS[code],
            "content": {"application/problem+json": {"schema": PROBLEM_REF}},
        }
        for code in sorted({*COMMON, *codes})
    }


def install_openapi(app: FastAPI) -> None:
    """Put `Problem` in the document's schemas, where every error response refers."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            schemas["Problem"] = Problem.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
            document["components"]["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"}
            }
            document["security"] = [{"bearer": []}]
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
