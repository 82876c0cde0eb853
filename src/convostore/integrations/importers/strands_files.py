"""Import Strands Agents' `FileSessionManager` directories (extra ``strands``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convostore.errors import StoreError
from convostore.integrations.importers._engine import ImportReport, ImportSourceError, Progress
from convostore.store import Store

try:
    from strands.types.exceptions import SessionException
    from strands.types.session import Session, SessionAgent, SessionMessage, SessionType
except ImportError as error:  # pragma: no cover - depends on the environment
    from convostore.integrations._common import missing_framework

    raise missing_framework("strands-agents", "strands") from error

from convostore.integrations.strands import ConvostoreSessionRepository

__all__ = ["FORMAT", "import_strands_files"]

FORMAT = "strands-files"
_SESSION, _AGENT, _MESSAGE, _MULTI = "session_", "agent_", "message_", "multi_agent_"


@dataclass(frozen=True, slots=True)
class _FileSession:
    """One ``session_<id>`` folder, read whole."""

    session: Session
    agents: list[tuple[SessionAgent, list[SessionMessage]]]
    multi_agents: list[tuple[str, dict[str, Any]]]


async def import_strands_files(
    source: str | Path, store: Store, *, progress: Progress | None = None
) -> ImportReport:
    """Copy every session of a `FileSessionManager` storage directory (the directory
    holding ``session_<id>`` folders) into ``store``, as `ConvostoreSessionRepository`
    writes them: same session ids, each agent a part with its state, its messages in
    index order with their times (tool uses and results as tool calls), and each
    multi-agent's state. An agent's new messages are written in one batch; a session
    created by the import and failing is removed again. A rerun writes nothing new; a
    message or state changed since the last run is updated."""
    report = ImportReport(FORMAT, str(source))
    folders = _session_folders(Path(source), report)
    repository = ConvostoreSessionRepository(store)
    report.sessions_in_source = len(folders)
    for done, folder in enumerate(folders, start=1):
        session_id = folder.name.removeprefix(_SESSION)
        created = False
        try:
            read = _read_session(folder)
            if await repository.aread_session(read.session.session_id) is None:
                await repository.acreate_session(read.session)
                created = True
            written = await _write_agents(repository, read)
            written += await _write_multi_agents(repository, read)
        except (StoreError, SessionException, ValueError, KeyError, TypeError, OSError) as error:
            if created:
                await store.delete_session(session_id)
            report.failed_session = session_id
            report.error = str(error) or type(error).__name__
            raise ImportSourceError(report.summary(), report) from error
        report.events_written += written
        (report.imported if created or written else report.unchanged).append(session_id)
        if progress is not None:
            progress(done, len(folders), session_id)
    return report


async def _write_agents(repository: ConvostoreSessionRepository, read: _FileSession) -> int:
    session_id = read.session.session_id
    written = 0
    for agent, messages in read.agents:
        stored = await repository.aread_agent(session_id, agent.agent_id)
        if stored is None:
            await repository.acreate_agent(session_id, agent)
            written += 1
        elif stored.to_dict() != _same(agent.to_dict()):
            await repository.aupdate_agent(session_id, agent)
            written += 1
        known = {
            m.message_id: m for m in await repository.alist_messages(session_id, agent.agent_id)
        }
        new = [m for m in messages if m.message_id not in known]
        await repository.acreate_messages(session_id, agent.agent_id, new)
        written += len(new)
        for message in messages:
            before = known.get(message.message_id)
            if before is not None and before.to_dict() != _same(message.to_dict()):
                await repository.aupdate_message(session_id, agent.agent_id, message)
                written += 1
    return written


async def _write_multi_agents(repository: ConvostoreSessionRepository, read: _FileSession) -> int:
    session_id = read.session.session_id
    written = 0
    for multi_agent_id, state in read.multi_agents:
        stored = await repository.aread_multi_agent(session_id, multi_agent_id)
        if stored is None:
            await repository.acreate_multi_agent(session_id, multi_agent_id, state)
            written += 1
        elif stored != _same(state):
            await repository.aupdate_multi_agent(session_id, multi_agent_id, state)
            written += 1
    return written


def _session_folders(root: Path, report: ImportReport) -> list[Path]:
    if not root.is_dir():
        raise ImportSourceError(f"{root}: not a directory of Strands file sessions", report)
    folders = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(_SESSION))
    if not folders and any(root.iterdir()):
        raise ImportSourceError(
            f"{root}: no session_<id> folder: not a Strands FileSessionManager directory",
            report,
        )
    return folders


def _read_session(folder: Path) -> _FileSession:
    session = Session.from_dict(_read(folder / "session.json"))
    session.session_type = SessionType(session.session_type)
    agents = []
    for agent_folder in _children(folder / "agents", _AGENT):
        agent = SessionAgent.from_dict(_read(agent_folder / "agent.json"))
        paths = (agent_folder / "messages").glob(f"{_MESSAGE}*.json")
        messages = sorted(
            (SessionMessage.from_dict(_read(path)) for path in paths),
            key=lambda m: m.message_id,
        )
        agents.append((agent, messages))
    multi_agents = []
    for multi_folder in _children(folder / "multi_agents", _MULTI):
        state = _read(multi_folder / "multi_agent.json")
        multi_agents.append((str(state.get("id") or multi_folder.name.removeprefix(_MULTI)), state))
    return _FileSession(session, agents, multi_agents)


def _children(folder: Path, prefix: str) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith(prefix))


def _read(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as file:
        loaded = json.load(file)
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} holds no JSON object")
    return loaded


def _same(value: Any) -> Any:
    """The value as the store gives it back (JSON), to compare with what it holds."""
    return json.loads(json.dumps(value, default=str))
