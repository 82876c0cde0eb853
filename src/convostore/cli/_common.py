"""What every subcommand shares: the --url option, help with examples, output."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from convostore.backends import DEFAULT_URL

__all__ = ["add_command", "add_url", "err_console", "fail", "progress"]

err_console = Console(stderr=True)


def add_command(
    subparsers: Any, name: str, summary: str, description: str, examples: str
) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` ends with its examples."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=summary,
        description=f"{summary}.\n\n{description}".rstrip(),
        epilog="examples:\n" + "\n".join(f"  {line}" for line in examples.strip().splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def add_url(parser: argparse.ArgumentParser, flag: str = "--url") -> None:
    parser.add_argument(
        flag,
        dest="url",
        default=DEFAULT_URL,
        metavar="URL",
        help=f"the store (default: {DEFAULT_URL})",
    )


def progress() -> Progress:
    """A progress bar on standard error, so standard output stays the command's data."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
        disable=not err_console.is_terminal,
    )


def fail(message: str, status: int = 1) -> int:
    print(f"convostore: error: {message}", file=sys.stderr)
    return status
