"""``convostore reembed``."""

from __future__ import annotations

import argparse
from typing import Any

from convostore.cli._common import add_command, add_url, err_console, fail, progress
from convostore.embedding import Embedder
from convostore.errors import InvalidArgumentError, ReembedIncompleteError


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "reembed",
        "give every message a vector of one model",
        "Embeds the messages with no vector or another model's vector, in pages, and "
        "rebuilds the vector index when the model or its width changed. Resumable: an "
        "interrupted or failed run is finished by running it again, which touches only "
        "what is still pending.\n\nembedders:\n"
        "  minilm               all-MiniLM-L6-v2, bundled (the embeddings extra)\n"
        "  sentence-transformers:PATH  a sentence-transformers model directory\n"
        "  hashing:DIMENSIONS   the deterministic test embedder",
        """
convostore reembed --url sqlite:///chat.db --embedder minilm
convostore reembed --url postgresql://localhost/app --embedder sentence-transformers:/models/e5
convostore reembed --url memory:// --embedder hashing:256
""",
    )
    add_url(parser)
    parser.add_argument("--embedder", default="minilm", help="the model (default: minilm)")
    parser.set_defaults(run=run)


def embedder_from_spec(spec: str) -> Embedder:
    """The embedder a command-line spec names (see ``convostore reembed --help``)."""
    from convostore.embedding import HashingEmbedder, SentenceTransformerEmbedder

    name, _, argument = spec.partition(":")
    if name == "minilm" and not argument:
        return SentenceTransformerEmbedder()
    if name == "sentence-transformers" and argument:
        return SentenceTransformerEmbedder(argument)
    if name == "hashing" and argument.isdigit():
        return HashingEmbedder(int(argument))
    raise InvalidArgumentError(
        f"unknown embedder {spec!r}: minilm, sentence-transformers:PATH or hashing:N"
    )


async def run(args: argparse.Namespace) -> int:
    from convostore import connect

    embedder = embedder_from_spec(args.embedder)
    async with await connect(args.url) as store:
        with progress() as bar:
            task = bar.add_task(f"embedding with {embedder.name}", total=None)

            def advance(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            try:
                report = await store.reembed(embedder, on_progress=advance)
            except ReembedIncompleteError as error:
                return fail(f"{error}; run the command again to finish")
    rebuilt = " (the vector index was rebuilt)" if report.index_recreated else ""
    err_console.print(f"embedded {report.messages} messages with {embedder.name}{rebuilt}")
    return 0
