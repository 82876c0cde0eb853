"""``convostore import FORMAT SOURCE --to URL``: a progress bar while it runs, a
summary at the end."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from convostore.backends import DEFAULT_URL
from convostore.integrations.importers import FORMATS, ImportSourceError, import_source
from convostore.store.lifecycle import open_store

__all__ = ["ProgressBar", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The import command's arguments, for whichever parser holds the command."""
    parser.add_argument("format", choices=FORMATS, help="the peer store's format")
    parser.add_argument("source", help="the peer's SQLite file (or directory, for strands-files)")
    parser.add_argument(
        "--to", default=DEFAULT_URL, help=f"the store to import into (default: {DEFAULT_URL})"
    )


class ProgressBar:
    """A one-line progress bar on a terminal (plain lines elsewhere)."""

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self.tty = stream.isatty()

    def __call__(self, done: int, total: int, session_id: str) -> None:
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"[{bar}] {done}/{total} {session_id[:40]}"
        if self.tty:
            end = "\n" if done == total else ""
            self.stream.write(f"\r{line:<{self.width + 60}}{end}")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


async def run(args: argparse.Namespace) -> int:
    """Run the import the parsed ``args`` describe; 0 on success, 1 on a stopped import."""
    try:
        store = await open_store(args.to, indexed_metadata=())
    except Exception as error:
        print(f"convostore import: cannot open {args.to!r}: {error}", file=sys.stderr)
        return 1
    try:
        report = await import_source(
            args.format, args.source, store, progress=ProgressBar(sys.stderr)
        )
    except (ImportSourceError, ImportError) as error:
        # ImportError: the format's framework is not installed; the message names its extra.
        print(f"convostore import: {error}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    print(report.summary())
    return 0
