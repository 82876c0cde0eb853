"""convostore over HTTP: `create_app(store)` gives the ASGI app (the ``server`` extra:
FastAPI and uvicorn); ``convostore serve`` runs it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from convostore.errors import BackendUnavailableError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from convostore.store import Store

__all__ = ["create_app"]


def create_app(store: Store, **options: Any) -> FastAPI:
    """See `convostore.server.app.create_app`."""
    try:
        from convostore.server.app import create_app as create
    except ImportError as error:
        raise BackendUnavailableError(
            "the server needs FastAPI and uvicorn: pip install 'convostore[server]'"
        ) from error
    return create(store, **options)
