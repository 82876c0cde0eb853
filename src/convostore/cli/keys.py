"""``convostore keys create|list|revoke``."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from convostore.cli._common import add_command, add_url, err_console
from convostore.records import time_to_json


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "keys",
        "create, list and revoke the server's API keys",
        "Keys are stored hashed in the store's own database; a new key is printed once.",
        """
convostore keys create --owner ada --url sqlite:///chat.db
convostore keys create --admin --label ops --url sqlite:///chat.db
convostore keys list --url sqlite:///chat.db
convostore keys revoke 3f2a9c0d1e4b5a67 --url sqlite:///chat.db
""",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = add_command(
        actions,
        "create",
        "create a key and print it (once)",
        "The key scopes every request to its owner's sessions; an admin key sees all.",
        """
convostore keys create --owner ada --url sqlite:///chat.db
convostore keys create --admin --url postgresql://localhost/app
""",
    )
    create.add_argument("--owner", metavar="ID", help="the user whose sessions the key reaches")
    create.add_argument("--admin", action="store_true", help="a key that sees every owner")
    create.add_argument("--label", help="a note to recognise the key by in `keys list`")
    add_url(create)
    create.set_defaults(run=run_create)
    listing = add_command(
        actions,
        "list",
        "list the keys (never the keys themselves)",
        "",
        """
convostore keys list --url sqlite:///chat.db
convostore keys list --all --url sqlite:///chat.db
""",
    )
    listing.add_argument("--all", action="store_true", help="include revoked keys")
    add_url(listing)
    listing.set_defaults(run=run_list)
    revoke = add_command(
        actions,
        "revoke",
        "revoke a key by its id",
        "A running server refuses the key from its next request on.",
        "convostore keys revoke 3f2a9c0d1e4b5a67 --url sqlite:///chat.db",
    )
    revoke.add_argument("key_id", metavar="KEY_ID", help="the id `keys list` shows")
    add_url(revoke)
    revoke.set_defaults(run=run_revoke)


async def run_create(args: argparse.Namespace) -> int:
    from convostore import connect
    from convostore.keys import KeyRing

    async with await connect(args.url) as store:
        key, record = await KeyRing(store).create(args.owner, admin=args.admin, label=args.label)
    scope = "admin" if record.admin else f"owner {record.owner_id}"
    err_console.print(f"key {record.id} ({scope}); it is shown once, keep it now:")
    print(key)
    return 0


async def run_list(args: argparse.Namespace) -> int:
    from convostore import connect
    from convostore.keys import KeyRing

    async with await connect(args.url) as store:
        keys = await KeyRing(store).list(include_revoked=args.all)
    table = Table("id", "owner", "admin", "label", "created", "revoked")
    for key in keys:
        table.add_row(
            key.id,
            key.owner_id or "",
            "yes" if key.admin else "",
            key.label or "",
            time_to_json(key.created_at) or "",
            time_to_json(key.revoked_at) or "",
        )
    from rich.console import Console

    Console().print(table)
    return 0


async def run_revoke(args: argparse.Namespace) -> int:
    from convostore import connect
    from convostore.cli._common import fail
    from convostore.keys import KeyRing

    async with await connect(args.url) as store:
        if not await KeyRing(store).revoke(args.key_id):
            return fail(f"no live key {args.key_id!r}")
    err_console.print(f"revoked {args.key_id}")
    return 0
