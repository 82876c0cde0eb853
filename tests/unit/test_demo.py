"""The demo runs end to end on the embedded default and prints every part of the tour."""

from __future__ import annotations

from pathlib import Path

from convostore.demo import run_demo


async def test_the_demo_tours_everything_and_can_run_twice(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    for _ in range(2):
        lines: list[str] = []
        await run_demo(url, lines.append)
        text = "\n".join(lines)
        for part in (
            "== Thread 'Launch plan'",
            "+ attachment q3-report.pdf",
            "+ data 'Weekly signups' (table)",
            "+ calls calendar.free_weeks",
            "+ result of call-1",
            "== Side conversation 'Research notes' held with Researcher",
            "page 2:",
            "Compaction at version 5: applied",
            "persisted",
            "== Search by meaning",
            "TurnWindow(1)",
        ):
            assert part in text
