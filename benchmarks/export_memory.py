"""The JSONL export's peak memory at 1,000,000 messages (target: under 100 MB).

Fills a SQLite file with 1,000 sessions x 1,000 messages (batches of 500 through
`append_events`), then runs ``convostore export`` in a child process writing to a file,
and reads the child's peak resident memory (``ru_maxrss``). Beside it, the peak of a
child that only imports the command (the interpreter and convostore, no export), so
the export's own share shows.

    .venv/bin/python benchmarks/export_memory.py [--sessions N] [--messages N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import convostore
from convostore import MessageWrite, Role, User

OWNER = User("bench", "Bench")
CONTENT = "What is the capital of France? Answer in one word, please. " * 2


async def fill(url: str, sessions: int, messages: int) -> None:
    async with await convostore.connect(url) as store:
        await store.put_user(OWNER)
        for _ in range(sessions):
            session = await store.create_session(OWNER.id)
            for start in range(0, messages, 500):
                batch = [
                    MessageWrite(Role.USER if n % 2 == 0 else Role.ASSISTANT, CONTENT)
                    for n in range(start, min(messages, start + 500))
                ]
                version = await store.version(session.id)
                assert await store.append_events(session.id, batch, version)


def peak_mb(command: list[str]) -> tuple[float, float]:
    """Run ``command`` in a child; its peak resident memory in MB, and its seconds."""
    code = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *command], check=True, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    return int(done.stdout.strip()) / 1024, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=1000)
    args = parser.parse_args()
    total = args.sessions * args.messages
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'export.db'}"
        started = time.perf_counter()
        asyncio.run(fill(url, args.sessions, args.messages))
        print(f"filled {total:,} messages in {time.perf_counter() - started:.0f} s")
        out = Path(directory) / "export.jsonl"
        cli = [sys.executable, "-m", "convostore"]
        baseline, _ = peak_mb([sys.executable, "-c", "import convostore.cli, convostore.jsonl"])
        peak, seconds = peak_mb([*cli, "export", "--url", url, "--owner", OWNER.id, "-o", str(out)])
        lines = sum(1 for _ in out.open("rb"))
        size = os.path.getsize(out) / 1e6
        print(
            f"export: {lines:,} lines, {size:.0f} MB of JSONL in {seconds:.0f} s "
            f"({total / seconds:,.0f} messages/s)"
        )
        print(
            f"peak resident memory: export {peak:.0f} MB; interpreter + convostore alone "
            f"{baseline:.0f} MB; target < 100 MB: {'met' if peak < 100 else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
