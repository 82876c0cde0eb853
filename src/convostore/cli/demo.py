"""``convostore demo``."""

from __future__ import annotations

import argparse
from typing import Any

from convostore.cli._common import add_command, add_url


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "demo",
        "a guided tour on a real database",
        "Builds a team thread, pages through sessions, compacts, holds a conversation "
        "and searches it, printing each step.",
        """
convostore demo
convostore demo --url memory://
convostore demo --url sqlite:///tour.db
""",
    )
    add_url(parser)
    parser.set_defaults(run=run)


async def run(args: argparse.Namespace) -> int:
    from convostore.demo import run_demo

    await run_demo(args.url)
    return 0
