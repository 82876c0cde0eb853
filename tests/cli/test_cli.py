"""The ``convostore`` command, run in this process on real databases."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

import convostore.sync
from convostore import MessageWrite, Role, User
from convostore.cli import build_parser, main
from convostore.embedding import HashingEmbedder

ADA = User("ada", "Ada")


def _fill(url: str, sessions: int = 3, messages: int = 4) -> list[str]:
    with convostore.sync.connect(url) as store:
        ids = []
        for n in range(sessions):
            session = store.create_session(ADA, title=f"s{n}")
            for m in range(messages):
                store.add_message(session.id, MessageWrite(Role.USER, f"m{m}", author=ADA))
            ids.append(session.id)
        return ids


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    choices: dict[str, argparse.ArgumentParser] = action.choices
    return choices


def test_every_command_has_help_with_examples() -> None:
    commands = _subcommands(build_parser())
    assert set(commands) == {
        "serve",
        "demo",
        "keys",
        "export",
        "import",
        "reembed",
        "migrate",
        "stats",
    }
    for name, parser in commands.items():
        text = parser.format_help()
        assert "examples:" in text, name
        assert f"convostore {name}" in text, name
    for action, parser in _subcommands(commands["keys"]).items():
        assert f"convostore keys {action}" in parser.format_help()


def test_keys_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    assert main(["keys", "create", "--owner", "ada", "--label", "ci", "--url", url]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("cs_")
    assert main(["keys", "list", "--url", url]) == 0
    listed = capsys.readouterr().out
    key_id = key.split("_")[1]
    assert key_id in listed
    assert "ada" in listed
    assert key not in listed
    assert main(["keys", "revoke", key_id, "--url", url]) == 0
    assert main(["keys", "revoke", key_id, "--url", url]) == 1
    assert "no live key" in capsys.readouterr().err
    assert main(["keys", "create", "--url", url]) == 1


def test_export_import_round_trip_is_idempotent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    target = f"sqlite:///{tmp_path / 'target.db'}"
    ids = _fill(source)
    out = tmp_path / "ada.jsonl"
    assert main(["export", "--url", source, "--owner", "ada", "-o", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sum(r["record"] == "event" for r in records) == 12
    for _ in range(2):
        assert main(["import", "jsonl", str(out), "--to", target]) == 0
    with convostore.sync.connect(target) as store:
        for session_id in ids:
            assert [m.content for m in store.messages(session_id)] == ["m0", "m1", "m2", "m3"]
    err = capsys.readouterr().err
    assert "events 12" in err
    assert "events_kept 12" in err


def test_import_of_a_missing_file_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert main(["import", "jsonl", str(tmp_path / "none.jsonl"), "--to", url]) == 1
    assert "no such file" in capsys.readouterr().err


def test_reembed_is_resumable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    ids = _fill(url, sessions=2, messages=3)
    assert main(["reembed", "--url", url, "--embedder", "hashing:16"]) == 0
    assert "embedded 6 messages" in capsys.readouterr().err
    assert main(["reembed", "--url", url, "--embedder", "hashing:16"]) == 0
    assert "embedded 0 messages" in capsys.readouterr().err
    with convostore.sync.connect(url, embedder=HashingEmbedder(16)) as store:
        assert all(m.embedding is not None for m in store.messages(ids[0]))
    assert main(["reembed", "--url", url, "--embedder", "nonsense"]) == 1


def test_the_installed_command_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "convostore", "--help"], capture_output=True, text=True, check=True
    )
    assert "COMMAND" in done.stdout


def test_migrate_dry_run_lists_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.db"
    url = f"sqlite:///{path}"
    assert main(["migrate", "--url", url, "--dry-run"]) == 0
    pending = capsys.readouterr().out.splitlines()
    assert pending
    assert pending[0].startswith("1: create table")
    assert not path.exists()
    assert main(["migrate", "--url", url]) == 0
    assert capsys.readouterr().out.splitlines() == pending
    assert main(["migrate", "--url", url, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "nothing to migrate" in err


def test_stats_counts_every_owner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _fill(url, sessions=2, messages=3)
    assert main(["stats", "--url", url, "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert (counts["users"], counts["sessions"], counts["messages"], counts["vectors"]) == (
        1,
        2,
        6,
        0,
    )
    assert counts["size_bytes"] > 0
    assert main(["stats", "--url", url]) == 0
    assert "messages" in capsys.readouterr().out
