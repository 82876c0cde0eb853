"""``convostore export`` and ``convostore import``."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from convostore.backends import DEFAULT_URL
from convostore.cli._common import add_command, add_url, err_console, progress
from convostore.cli.importers import IMPORT_FORMATS


def register(subparsers: Any) -> None:
    export = add_command(
        subparsers,
        "export",
        "write sessions and their logs as JSON lines",
        "Streams each owner's sessions (parts after their parent), their events and the "
        "users they name, one JSON record a line, in constant memory.",
        """
convostore export --url sqlite:///chat.db --owner ada > ada.jsonl
convostore export --url postgresql://localhost/app --owner ada --owner grace -o team.jsonl
convostore export --owner ada --no-vectors | gzip > ada.jsonl.gz
""",
    )
    add_url(export)
    export.add_argument(
        "--owner", action="append", required=True, metavar="ID", help="an owner (repeatable)"
    )
    export.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    export.add_argument("--no-vectors", action="store_true", help="leave the messages' vectors out")
    export.set_defaults(run=run_export)

    formats = "\n".join(f"  {name:<16}{f.summary}" for name, f in IMPORT_FORMATS.items())
    imports = add_command(
        subparsers,
        "import",
        "read sessions from a file into a store",
        f"Importing is idempotent: what is stored already is kept, so a run can be "
        f"repeated or resumed.\n\nformats:\n{formats}",
        """
convostore import jsonl ada.jsonl --to sqlite:///copy.db
convostore export --owner ada | convostore import jsonl - --to memory://
convostore import openai-sqlite agents.db --to sqlite:///chat.db
convostore import adk-db adk_sessions.db --to postgresql://localhost/app
convostore import langchain-sql chat_history.db --to sqlite:///chat.db
""",
    )
    imports.add_argument("format", choices=sorted(IMPORT_FORMATS), metavar="FORMAT")
    imports.add_argument("source", metavar="SOURCE", help="the file to read ('-': stdin)")
    imports.add_argument(
        "--to", default=DEFAULT_URL, metavar="URL", help=f"the store (default: {DEFAULT_URL})"
    )
    imports.set_defaults(run=run_import)


def _open_output(path: str) -> TextIO:
    return open(path, "w", encoding="utf-8")


async def run_export(args: argparse.Namespace) -> int:
    from convostore import connect
    from convostore.jsonl import export_lines

    out = sys.stdout if args.output is None else _open_output(args.output)
    written = 0
    try:
        async with await connect(args.url) as store:
            with progress() as bar:
                task = bar.add_task("exporting", total=None)
                async for line in export_lines(store, args.owner, vectors=not args.no_vectors):
                    out.write(line)
                    written += 1
                    if written % 1000 == 0:
                        bar.update(task, completed=written)
                bar.update(task, completed=written)
    finally:
        if out is not sys.stdout:
            out.close()
    err_console.print(f"exported {written} records")
    return 0


async def run_import(args: argparse.Namespace) -> int:
    return await IMPORT_FORMATS[args.format].run(args)
