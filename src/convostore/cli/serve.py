"""``convostore serve``."""

from __future__ import annotations

import argparse
import socket
from typing import Any

from convostore.cli._common import add_command, add_url, err_console


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "serve",
        "serve a store over HTTP, with the web inspector at /",
        "The API is under /v1 (OpenAPI at /openapi.json, docs at /docs); every call "
        "takes `Authorization: Bearer <key>` from `convostore keys create`. Needs the "
        "server extra: pip install 'convostore[server]'.",
        """
convostore serve --url sqlite:///chat.db
convostore serve --url postgresql://localhost/app --host 0.0.0.0 --port 8080
convostore serve --url sqlite:///chat.db --embedder minilm --max-body-bytes 4000000
convostore serve --url postgresql://localhost/app --log-format json --reuse-port   # xN
""",
    )
    add_url(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument(
        "--embedder", help="embed messages and search by meaning (see `reembed --help`)"
    )
    parser.add_argument(
        "--max-body-bytes", type=int, default=1_048_576, help="largest request body (413 beyond)"
    )
    parser.add_argument(
        "--head-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close a connection whose request head is not whole in this time (default: 10)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=1000,
        metavar="N",
        help="concurrent connections, live streams included; beyond, 503 (default: 1000)",
    )
    parser.add_argument(
        "--reuse-port",
        action="store_true",
        help="bind with SO_REUSEPORT, so several `serve` processes share the port (the "
        "kernel spreads connections): how to run several workers",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="logs on stderr, access logs included: text or JSON lines (default: text)",
    )
    parser.add_argument(
        "--no-access-log",
        action="store_true",
        help="leave out the access log (one record a request, on convostore.access)",
    )
    parser.add_argument(
        "--indexed-metadata",
        action="append",
        default=[],
        metavar="KEY",
        help="a session metadata key to look sessions up by (repeatable)",
    )
    parser.set_defaults(run=run)


async def run(args: argparse.Namespace) -> int:
    from convostore import connect
    from convostore.cli.reembed import embedder_from_spec
    from convostore.server import create_app

    try:
        from convostore.server.observe import configure_logging
        from convostore.server.serving import Server, config
    except ImportError:
        from convostore.cli._common import fail

        return fail("the server needs uvicorn: pip install 'convostore[server]'")
    configure_logging(args.log_format, access=not args.no_access_log)
    embedder = None if args.embedder is None else embedder_from_spec(args.embedder)
    async with await connect(
        args.url, embedder=embedder, indexed_metadata=args.indexed_metadata
    ) as store:
        app = create_app(store, max_body_bytes=args.max_body_bytes)
        served = config(
            app,
            host=args.host,
            port=args.port,
            head_timeout=args.head_timeout,
            max_connections=args.max_connections,
            log_config=None,
            access_log=False,
        )
        err_console.print(f"convostore on {args.url}: http://{args.host}:{args.port}/")
        sockets = None
        if args.reuse_port:
            sockets = [_shared_socket(args.host, args.port)]
        await Server(served, app.state.convostore).serve(sockets=sockets)
    return 0


def _shared_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock
