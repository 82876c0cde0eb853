"""Running the app under uvicorn as ``convostore serve`` does: request heads that must
arrive in time, a bound on concurrent connections, and a shutdown that ends every live
stream, so ``SIGTERM`` exits in bounded time."""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from convostore.server.context import Context

__all__ = ["DEFAULT_HEAD_TIMEOUT", "DEFAULT_MAX_CONNECTIONS", "Server", "config"]

DEFAULT_HEAD_TIMEOUT = 10.0
DEFAULT_MAX_CONNECTIONS = 1000
GRACEFUL_SECONDS = 5


def head_timeout_protocol(seconds: float) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request head is not
    whole ``seconds`` after the connection opened or its previous response ended (a
    client sending a head byte by byte holds no connection forever)."""

    class HeadTimeout(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_head()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._head_arrived()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_arrived()
            super().connection_lost(exc)

        def _await_head(self) -> None:
            self._head_arrived()
            self._head_timer = self.loop.call_later(seconds, self._head_late)

        def _head_arrived(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeadTimeout


def config(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    head_timeout: float = DEFAULT_HEAD_TIMEOUT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    **options: Any,
) -> uvicorn.Config:
    """The uvicorn configuration of ``app``: beyond ``max_connections`` concurrent
    connections new requests are 503; a head must be whole in ``head_timeout``."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=head_timeout_protocol(head_timeout),
        # uvicorn counts the connection it is deciding on too.
        limit_concurrency=max_connections + 1,
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
        **options,
    )


class Server(uvicorn.Server):
    """uvicorn's server, which on shutdown (``SIGTERM``, ``SIGINT``, ``should_exit``)
    first ends the app's live streams, so the graceful shutdown has no endless
    response to wait for."""

    def __init__(self, config: uvicorn.Config, context: Context) -> None:
        super().__init__(config)
        self.context = context

    async def shutdown(self, sockets: Any = None) -> None:
        self.context.wakeups.close()
        await super().shutdown(sockets=sockets)
