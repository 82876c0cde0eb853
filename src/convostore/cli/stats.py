"""``convostore stats``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from convostore.cli._common import add_command, add_url


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "stats",
        "count what a store holds",
        "Users, sessions (parts included), events, messages, messages with a vector, "
        "and the database's size on disk, over every owner.",
        """
convostore stats --url sqlite:///chat.db
convostore stats --url postgresql://localhost/app?schema=chat --json
""",
    )
    add_url(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run)


def _size(size: int | None) -> str:
    if size is None:
        return "in memory"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} TB"


async def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from convostore import connect

    async with await connect(args.url) as store:
        stats = await store.stats()
    counts = {
        "users": stats.users,
        "sessions": stats.sessions,
        "events": stats.events,
        "messages": stats.messages,
        "vectors": stats.vectors,
        "size_bytes": stats.size_bytes,
    }
    if args.json:
        print(json.dumps(counts))
        return 0
    table = Table("", "", title=args.url, show_header=False)
    for name in ("users", "sessions", "events", "messages", "vectors"):
        table.add_row(name, f"{counts[name]:,}")
    table.add_row("size", _size(stats.size_bytes))
    Console().print(table)
    return 0
