"""``convostore migrate``."""

from __future__ import annotations

import argparse
from typing import Any

from convostore.cli._common import add_command, add_url, err_console


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "migrate",
        "bring a database's schema up to this convostore",
        "Applies the pending schema migrations, in one transaction where the database "
        "allows (connecting applies them too; this makes it an explicit step, e.g. "
        "before a deploy). --dry-run lists them and changes nothing.",
        """
convostore migrate --url sqlite:///chat.db --dry-run
convostore migrate --url postgresql://admin@localhost/app?schema=chat
""",
    )
    add_url(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="list the pending migrations, apply none"
    )
    parser.set_defaults(run=run)


async def run(args: argparse.Namespace) -> int:
    from convostore import connect
    from convostore.backends import pending_migrations

    pending = await pending_migrations(args.url)
    if args.dry_run:
        if not pending:
            err_console.print("the schema is current: nothing to migrate")
        for line in pending:
            print(line)
        return 0
    async with await connect(args.url):
        pass
    err_console.print(
        f"applied {len(pending)} migration(s)" if pending else "the schema was current"
    )
    for line in pending:
        print(line)
    return 0
