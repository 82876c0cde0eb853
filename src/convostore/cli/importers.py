"""The formats ``convostore import FORMAT SOURCE --to URL`` reads.

A format is one entry of `IMPORT_FORMATS`: a one-line summary and an async function
that runs the import the parsed arguments describe (``format``, ``source``, ``to``),
shows its progress on standard error, prints a summary and returns the exit status.
Adding a format is adding an entry.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from convostore.cli._common import err_console, progress
from convostore.errors import InvalidArgumentError

__all__ = ["IMPORT_FORMATS", "ImportFormat"]


@dataclass(frozen=True, slots=True)
class ImportFormat:
    summary: str
    run: Callable[[argparse.Namespace], Awaitable[int]]


def _lines(source: str) -> Iterator[str]:
    if source == "-":
        yield from sys.stdin
        return
    path = Path(source)
    if not path.is_file():
        raise InvalidArgumentError(f"no such file: {source}")
    with path.open(encoding="utf-8") as lines:
        yield from lines


def _count_lines(source: str) -> int | None:
    path = Path(source)
    if source == "-" or not path.is_file():
        return None
    with path.open("rb") as data:
        return sum(1 for line in data if line.strip())


async def _import_jsonl(args: argparse.Namespace) -> int:
    from convostore import connect
    from convostore.jsonl import import_lines

    async with await connect(args.to) as store:
        with progress() as bar:
            task = bar.add_task("importing jsonl", total=_count_lines(args.source))
            counts = await import_lines(store, _lines(args.source), lambda n: bar.advance(task, n))
    summary = ", ".join(f"{name} {value}" for name, value in counts.as_dict().items())
    err_console.print(f"imported: {summary}")
    return 0


async def _import_framework(args: argparse.Namespace) -> int:
    from convostore.integrations.importers import command

    return await command.run(args)


IMPORT_FORMATS: dict[str, ImportFormat] = {
    "jsonl": ImportFormat(
        "convostore's own JSON lines, as `convostore export` writes them", _import_jsonl
    ),
    "openai-sqlite": ImportFormat("an OpenAI Agents SDK SQLiteSession file", _import_framework),
    "adk-db": ImportFormat(
        "a Google ADK DatabaseSessionService SQLite database", _import_framework
    ),
    "langchain-sql": ImportFormat(
        "a LangChain SQLChatMessageHistory SQLite database", _import_framework
    ),
    "llamaindex-sql": ImportFormat(
        "a LlamaIndex SQLAlchemyChatStore (Memory's) SQLite database", _import_framework
    ),
    "strands-files": ImportFormat(
        "a Strands Agents FileSessionManager directory", _import_framework
    ),
    "embabel-graph": ImportFormat(
        "an Embabel chat store's graph, by its neo4j:// or falkordb:// URL", _import_framework
    ),
}
