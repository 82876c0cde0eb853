"""What every importer shares: opening a peer's SQLite file read-only, the report, and
writing one session at a time, each whole or not at all, idempotently."""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from convostore.errors import InvalidArgumentError, StoreError
from convostore.integrations._common import ATTEMPTS, AnyWrite, gave_up
from convostore.model import User
from convostore.store import Store

__all__ = [
    "ImportReport",
    "ImportSourceError",
    "Progress",
    "SourceSession",
    "import_sessions",
    "open_readonly",
    "stable_id",
]

Progress = Callable[[int, int, str], None]
"""Called after each session: (sessions done, sessions in the source, session id)."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_IDS = uuid.UUID("2f4b8e61-4f1d-4c1e-b3a8-5d0c7e9a6b21")


@dataclass
class ImportReport:
    """What an import did. ``imported`` sessions got new events (or were created),
    ``unchanged`` ones held everything already; ``failed_session`` is the session whose
    reading or writing stopped the import (nothing of it was written)."""

    format: str
    source: str
    sessions_in_source: int = 0
    imported: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    events_written: int = 0
    failed_session: str | None = None
    error: str | None = None

    def summary(self) -> str:
        """One line a person reads at the end of an import."""
        line = (
            f"{self.format}: {len(self.imported)} session(s) imported, "
            f"{len(self.unchanged)} already up to date, {self.events_written} event(s) "
            f"written, of {self.sessions_in_source} session(s) in {self.source}"
        )
        if self.error is not None:
            line += f"; stopped at session {self.failed_session!r}: {self.error}"
        return line


class ImportSourceError(InvalidArgumentError):
    """The source cannot be imported (missing, corrupt, or another program's file).
    ``report`` holds what was imported before the import stopped."""

    def __init__(self, message: str, report: ImportReport | None = None) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True, slots=True)
class SourceSession:
    """One session read from a peer's store, ready to write: its writes carry stable ids
    (`stable_id`) and the peer's times; ``narrations`` by message id, where the peer
    keeps them."""

    session_id: str
    owner: User | None
    kind: str
    metadata: Mapping[str, Any]
    writes: Sequence[AnyWrite]
    title: str | None = None
    part_of: str | None = None
    held_with: User | None = None
    narrations: Mapping[str, str] = field(default_factory=dict)


def stable_id(format_name: str, session_id: str, key: str) -> str:
    """The same event id for the same source row on every run."""
    return str(uuid.uuid5(_IDS, f"{format_name}\0{session_id}\0{key}"))


def with_id_and_time(write: AnyWrite, event_id: str, at: datetime | None) -> AnyWrite:
    return replace(write, id=event_id, created_at=at if at is not None else write.created_at)


def parse_sqlite_time(value: Any) -> datetime | None:
    """A time as SQLite's CURRENT_TIMESTAMP (UTC) or an ISO string writes it."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    text = str(value).strip().replace(" ", "T", 1)
    parsed = datetime.fromisoformat(text)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


@contextmanager
def open_readonly(source: str | Path, what: str) -> Iterator[sqlite3.Connection]:
    """The SQLite file opened read-only (an import never writes to its source)."""
    text = str(source)
    if text.startswith("sqlite:///"):
        text = text.removeprefix("sqlite:///")
    elif "://" in text:
        raise ImportSourceError(f"{what}: give the path of an SQLite file, not {text!r}")
    path = Path(text)
    if not path.is_file():
        raise ImportSourceError(f"{what}: no such file {str(path)!r}")
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise ImportSourceError(f"{what}: cannot open {str(path)!r}: {error}") from error
    try:
        yield connection
    finally:
        connection.close()


def require_tables(
    connection: sqlite3.Connection, source: str | Path, what: str, tables: Mapping[str, set[str]]
) -> None:
    """Refuse a file that is not an SQLite database or lacks the peer's tables/columns.
    Table names must be plain identifiers: the readers put them in their SQL."""
    for table, columns in tables.items():
        if not _IDENTIFIER.fullmatch(table):
            raise ImportSourceError(f"{what}: {table!r} is not a plain table name")
        try:
            rows = connection.execute("SELECT name FROM pragma_table_info(?)", (table,)).fetchall()
        except sqlite3.DatabaseError as error:
            raise ImportSourceError(
                f"{what}: {str(source)!r} is not a readable SQLite database ({error})"
            ) from error
        found = {row[0] for row in rows}
        if not found:
            raise ImportSourceError(f"{what}: {str(source)!r} has no table {table!r}")
        missing = columns - found
        if missing:
            raise ImportSourceError(
                f"{what}: table {table!r} in {str(source)!r} lacks column(s) {sorted(missing)}"
            )


async def import_sessions(
    store: Store,
    report: ImportReport,
    session_ids: Sequence[str],
    read_session: Callable[[str], AsyncIterator[SourceSession]],
    progress: Progress | None = None,
) -> ImportReport:
    """Write each session the source gives, one at a time, each whole or not at all.
    Events already in the store (same stable id) are not written again. A session that
    cannot be read or written stops the import with `ImportSourceError`, whose report
    lists the sessions imported before it."""
    report.sessions_in_source = len(session_ids)
    for done, session_id in enumerate(session_ids, start=1):
        try:
            async for session in read_session(session_id):
                created, written = await _write_session(store, session)
                report.events_written += written
                changed = created or written
                (report.imported if changed else report.unchanged).append(session.session_id)
        except (StoreError, ValueError, KeyError, TypeError, sqlite3.Error) as error:
            report.failed_session = session_id
            report.error = str(error) or type(error).__name__
            raise ImportSourceError(report.summary(), report) from error
        if progress is not None:
            progress(done, len(session_ids), session_id)
    return report


async def _write_session(store: Store, session: SourceSession) -> tuple[bool, int]:
    """Whether the session was created, and how many events were written."""
    created = await store.create_session_if_absent(
        session.owner,
        session_id=session.session_id,
        title=session.title,
        kind=session.kind,
        part_of=session.part_of,
        held_with=session.held_with,
        metadata=session.metadata,
    )
    try:
        for _ in range(ATTEMPTS):
            version = await store.version(session.session_id)
            existing = set() if created else {e.id for e in await store.read(session.session_id)}
            new = [write for write in session.writes if write.id not in existing]
            if not new:
                break
            if await store.append_events(session.session_id, new, expected_version=version):
                break
        else:
            raise gave_up("importing", session.session_id)
        if session.narrations:
            await _write_narrations(store, session)
        return created, len(new)
    except BaseException:
        if created:
            await store.delete_session(session.session_id)
        raise


async def _write_narrations(store: Store, session: SourceSession) -> None:
    """Set each message's narration the source gives, where the store's differs."""
    stored = {m.id: m.narration for m in await store.messages(session.session_id)}
    for message_id, text in session.narrations.items():
        if message_id in stored and stored[message_id] != text:
            await store.set_narration(session.session_id, message_id, text)
