"""The ``convostore`` command: one entry point, one module per subcommand.

Each module in `COMMANDS` gives ``register(subparsers)``, which adds its parser with
``--help`` examples and sets ``run`` (an async function of the parsed arguments that
returns the exit status).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from convostore.cli import demo, keys, migrate, reembed, serve, stats, transfer
from convostore.cli._common import fail
from convostore.errors import StoreError

__all__ = ["main"]

COMMANDS = (serve, demo, keys, transfer, reembed, migrate, stats)

DESCRIPTION = """\
convostore: the conversation store for AI agents.

Every command takes --url (default: sqlite:///convostore.db); run
`convostore COMMAND --help` for its options and examples."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convostore",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = asyncio.run(args.run(args))
    except StoreError as error:
        return fail(str(error))
    except KeyboardInterrupt:
        return fail("interrupted", status=130)
    sys.stdout.flush()
    return status
