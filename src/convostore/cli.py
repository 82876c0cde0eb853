"""The ``convostore`` command."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from convostore.backends import DEFAULT_URL

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="convostore", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="a guided tour on a real database")
    demo.add_argument(
        "--url", default=DEFAULT_URL, help=f"the store to use (default: {DEFAULT_URL})"
    )
    importing = commands.add_parser(
        "import", help="import sessions from an agent framework's own store"
    )
    from convostore.integrations.importers import command as import_command

    import_command.add_arguments(importing)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from convostore.demo import run_demo

        asyncio.run(run_demo(args.url))
    if args.command == "import":
        return asyncio.run(import_command.run(args))
    return 0
