"""convostore as LangGraph's checkpointer (extra ``langgraph``).

>>> import convostore.sync
>>> from langgraph.graph import START, MessagesState, StateGraph
>>> def reply(state: MessagesState) -> MessagesState:
...     return {"messages": [("ai", "Hello!")]}
>>> builder = StateGraph(MessagesState).add_node(reply).add_edge(START, "reply")
>>> with convostore.sync.connect("sqlite:///chat.db") as store:
...     graph = builder.compile(checkpointer=ConvostoreSaver(store))
...     config = {"configurable": {"thread_id": "thread-1"}}
...     _ = graph.invoke({"messages": [("user", "Hi")]}, config)
...     [message.content for message in graph.get_state(config).values["messages"]]
['Hi', 'Hello!']

A thread is a convostore session (its id is the thread id). Each checkpoint is an event
of type ``LANGGRAPH.CHECKPOINT`` and each batch of pending writes one of type
``LANGGRAPH.WRITES``, serialized by the saver's serde. The messages of the root graph's
``messages`` channel are also written once each as convostore messages, so a thread is
readable and searchable through the store and the other adapters. `aprune` and
`adelete_for_runs` append a record (a compaction boundary) rather than rewrite the log;
`adelete_thread` deletes the session.
"""

from __future__ import annotations

import base64
import builtins
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from convostore.errors import EventIdConflictError, InvalidArgumentError
from convostore.filters import EventFilter
from convostore.integrations._common import (
    ATTEMPTS,
    AnyWrite,
    StoreRunner,
    copy_write,
    gave_up,
    missing_framework,
    rewrite_view,
)
from convostore.model import MESSAGE, Event, EventWrite, MessageWrite, PageRequest, User
from convostore.store import Store
from convostore.sync import SyncStore

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_framework("langgraph", "langgraph") from error

__all__ = ["CHECKPOINT", "WRITES", "ConvostoreSaver"]

CHECKPOINT = "LANGGRAPH.CHECKPOINT"
WRITES = "LANGGRAPH.WRITES"
_TYPES = (CHECKPOINT, WRITES)
_MESSAGE_IDS = uuid.UUID("6f1c2d1e-8a57-4d7e-9a43-3f0f1b6c0a11")
DEFAULT_OWNER = User("langgraph", "LangGraph", kind="agent")


@dataclass(slots=True)
class _Thread:
    """A thread's checkpoints and pending writes, as its active view holds them."""

    checkpoints: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, Any, str]]] = field(
        default_factory=dict
    )


class ConvostoreSaver(BaseCheckpointSaver[int]):
    """LangGraph's `BaseCheckpointSaver` on a convostore store, async and sync.

    Threads are sessions owned by ``owner`` (a `User`, or an id for an agent user that
    is inserted if absent), which is what a listing over all threads and
    `adelete_for_runs` walk. The blocking methods
    need a `convostore.sync` store, or an async store whose loop runs in another thread.
    """

    def __init__(
        self,
        store: Store | SyncStore,
        *,
        serde: SerializerProtocol | None = None,
        owner: User | str = DEFAULT_OWNER,
        mirror_messages: bool = True,
    ) -> None:
        super().__init__(serde=serde)
        self._runner = StoreRunner(store)
        self.store = self._runner.store
        self.owner = owner if isinstance(owner, User) else User(owner, owner, kind="agent")
        self.owner_id = self.owner.id
        self.mirror_messages = mirror_messages
        self._mirrored: dict[str, set[str]] = {}
        self._created: set[str] = set()

    # ------------------------------------------------------------------ reads

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns = _thread_and_ns(config)
        checkpoint_id = get_checkpoint_id(config)
        # The latest is looked for among the newest checkpoints first, widening as needed.
        window: int | None = None if checkpoint_id else 4
        while True:
            thread, complete = await self._load(thread_id, window)
            if checkpoint_id:
                key: tuple[str, str] | None = (ns, checkpoint_id)
                if key not in thread.checkpoints:
                    key = None
            else:
                ids = [cid for (cns, cid) in thread.checkpoints if cns == ns]
                key = (ns, max(ids)) if ids else None
            if key is not None or complete or window is None:
                break
            window *= 8
        if key is None:
            return None
        return self._tuple(thread_id, key[0], key[1], thread)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if config is not None:
            threads = [config["configurable"]["thread_id"]]
            wanted_ns = config["configurable"].get("checkpoint_ns")
            wanted_id = get_checkpoint_id(config)
        else:
            threads = await self._thread_ids()
            wanted_ns, wanted_id = None, None
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for thread_id in map(str, threads):
            if remaining is not None and remaining <= 0:
                return
            # With a limit, the newest checkpoints are read first, widening as needed.
            window = None if remaining is None else 2 * remaining + 4
            while True:
                thread, complete = await self._load(thread_id, window)
                chosen: builtins.list[tuple[str, str]] = []
                for ns, checkpoint_id in sorted(
                    thread.checkpoints, key=lambda k: k[1], reverse=True
                ):
                    if (
                        (wanted_ns is not None and ns != wanted_ns)
                        or (wanted_id and checkpoint_id != wanted_id)
                        or (before_id and checkpoint_id >= before_id)
                    ):
                        continue
                    if filter:
                        stored = thread.checkpoints[(ns, checkpoint_id)]["metadata"]
                        metadata = self._load_value(stored)
                        if not all(metadata.get(k) == v for k, v in filter.items()):
                            continue
                    chosen.append((ns, checkpoint_id))
                    if remaining is not None and len(chosen) >= remaining:
                        break
                if (
                    complete
                    or window is None
                    or (remaining is not None and len(chosen) >= remaining)
                ):
                    break
                window *= 4
            for ns, checkpoint_id in chosen:
                if remaining is not None:
                    remaining -= 1
                yield self._tuple(thread_id, ns, checkpoint_id, thread)

    # ------------------------------------------------------------------ writes

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, ns = _thread_and_ns(config)
        payload = {
            "ns": ns,
            "id": checkpoint["id"],
            "parent": config["configurable"].get("checkpoint_id"),
            "checkpoint": self._dump(checkpoint),
            "metadata": self._dump(get_checkpoint_metadata(config, metadata)),
        }
        write = EventWrite(CHECKPOINT, payload)
        await self._ensure_thread(thread_id)
        if self.mirror_messages and ns == "":
            await self._append_with_messages(thread_id, checkpoint, write)
        else:
            await self.store.append_event(thread_id, write)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, ns = _thread_and_ns(config)
        payload = {
            "ns": ns,
            "checkpoint_id": config["configurable"]["checkpoint_id"],
            "task_id": task_id,
            "task_path": task_path,
            "writes": [
                [WRITES_IDX_MAP.get(channel, index), channel, self._dump(value)]
                for index, (channel, value) in enumerate(writes)
            ],
        }
        await self._ensure_thread(thread_id)
        await self.store.append_event(thread_id, EventWrite(WRITES, payload))

    async def adelete_thread(self, thread_id: str) -> None:
        await self.store.delete_session(thread_id)
        self._mirrored.pop(thread_id, None)
        self._created.discard(thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        events = await self.store.read(
            source_thread_id, EventFilter(active_view=True, types=_TYPES)
        )
        if not events:
            return
        await self._ensure_thread(target_thread_id)
        writes = [copy_write(event, synthetic=False) for event in events]
        for _ in range(ATTEMPTS):
            version = await self.store.version(target_thread_id)
            if await self.store.append_events(target_thread_id, writes, version):
                return
        raise gave_up("copy_thread", target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        for thread_id in thread_ids:

            def keeps(payloads: Sequence[dict[str, Any]]) -> set[tuple[str, str]]:
                if strategy == "delete":
                    return set()
                latest: dict[str, str] = {}
                for payload in payloads:
                    ns, cid = str(payload["ns"]), str(payload["id"])
                    latest[ns] = max(latest.get(ns, cid), cid)
                return set(latest.items())

            await self._keep_checkpoints(thread_id, keeps)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        if not runs:
            return
        for thread_id in await self._thread_ids():

            def keeps(payloads: Sequence[dict[str, Any]]) -> set[tuple[str, str]]:
                return {
                    (str(p["ns"]), str(p["id"]))
                    for p in payloads
                    if self._load_value(p["metadata"]).get("run_id") not in runs
                }

            await self._keep_checkpoints(thread_id, keeps)

    # ------------------------------------------------------------------ blocking

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._runner.run(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [
                found
                async for found in self.alist(config, filter=filter, before=before, limit=limit)
            ]

        yield from self._runner.run(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._runner.run(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._runner.run(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._runner.run(self.adelete_thread(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._runner.run(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._runner.run(self.aprune(thread_ids, strategy=strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._runner.run(self.adelete_for_runs(run_ids))

    # ------------------------------------------------------------------ inside

    def _dump(self, value: Any) -> tuple[str, str]:
        kind, data = self.serde.dumps_typed(value)
        return kind, base64.b64encode(data).decode("ascii")

    def _load_value(self, stored: Sequence[str]) -> Any:
        return self.serde.loads_typed((stored[0], base64.b64decode(stored[1])))

    async def _load(self, thread_id: str, last: int | None = None) -> tuple[_Thread, bool]:
        """The thread's checkpoints and pending writes in its active view, from the
        newest ``last`` of those events (all by default), and whether that is all of them.
        Writes follow the checkpoint they name, so a checkpoint in the window comes with
        all its writes."""
        events = await self.store.read(
            thread_id, EventFilter(active_view=True, types=_TYPES, last=last)
        )
        thread = _Thread()
        for event in events:
            payload = event.payload
            if not isinstance(payload, dict):
                continue
            if event.type == CHECKPOINT:
                thread.checkpoints[(str(payload["ns"]), str(payload["id"]))] = payload
                continue
            key = (str(payload["ns"]), str(payload["checkpoint_id"]))
            stored = thread.writes.setdefault(key, {})
            for index, channel, value in payload["writes"]:
                inner = (payload["task_id"], int(index))
                if inner[1] >= 0 and inner in stored:
                    continue
                stored[inner] = (payload["task_id"], channel, value, payload["task_path"])
        return thread, last is None or len(events) < last

    def _tuple(
        self, thread_id: str, ns: str, checkpoint_id: str, thread: _Thread
    ) -> CheckpointTuple:
        payload = thread.checkpoints[(ns, checkpoint_id)]
        stored = thread.writes.get((ns, checkpoint_id), {})
        ordered = sorted(stored, key=lambda k: writes_sort_key(stored[k][3], *k))
        parent = payload.get("parent")
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint=self._load_value(payload["checkpoint"]),
            metadata=self._load_value(payload["metadata"]),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=[
                (stored[k][0], stored[k][1], self._load_value(stored[k][2])) for k in ordered
            ],
        )

    async def _ensure_thread(self, thread_id: str) -> None:
        if thread_id not in self._created:
            await self.store.create_session_if_absent(
                self.owner, session_id=thread_id, metadata={"framework": "langgraph"}
            )
            self._created.add(thread_id)

    async def _thread_ids(self) -> builtins.list[str]:
        ids: list[str] = []
        cursor: str | None = None
        while True:
            page = await self.store.list_sessions(
                self.owner_id, PageRequest(size=100, cursor=cursor)
            )
            ids += [session.id for session in page.items]
            if page.next_cursor is None:
                return ids
            cursor = page.next_cursor

    async def _keep_checkpoints(self, thread_id: str, keeps: Any) -> None:
        """Leave in the view only the checkpoints ``keeps(payloads)`` names, with their
        writes, and every event that is not the saver's."""
        for _ in range(ATTEMPTS):
            version = await self.store.version(thread_id)
            view = await self.store.read(thread_id, EventFilter(active_view=True))
            payloads = [e.payload for e in view if e.type == CHECKPOINT]
            kept: set[tuple[str, str]] = keeps(payloads)
            keep = [e for e in view if _kept(e, kept)]
            if len(keep) == len(view):
                return
            if await rewrite_view(self.store, thread_id, version, view, keep, reason="prune"):
                return
        raise gave_up("prune", thread_id)

    async def _append_with_messages(
        self, thread_id: str, checkpoint: Checkpoint, write: EventWrite
    ) -> None:
        from convostore.integrations.langchain import message_to_write

        messages = checkpoint.get("channel_values", {}).get("messages")
        if not isinstance(messages, list) or not messages:
            await self.store.append_event(thread_id, write)
            return
        for _ in range(ATTEMPTS):
            known = self._mirrored.get(thread_id)
            if known is None:
                stored = await self.store.read(thread_id, EventFilter(types=(MESSAGE,)))
                known = self._mirrored[thread_id] = {event.id for event in stored}
            writes: list[AnyWrite] = []
            for message in messages:
                message_id = getattr(message, "id", None)
                if not message_id:
                    continue
                event_id = str(uuid.uuid5(_MESSAGE_IDS, f"{thread_id}\0{message_id}"))
                if event_id in known:
                    continue
                try:
                    mirrored = message_to_write(message)
                except InvalidArgumentError:
                    continue
                if isinstance(mirrored, MessageWrite):
                    writes.append(_with_event_id(mirrored, event_id))
            version = await self.store.version(thread_id)
            try:
                applied = await self.store.append_events(thread_id, [*writes, write], version)
            except EventIdConflictError:
                self._mirrored.pop(thread_id, None)
                continue
            if applied:
                known.update(w.id for w in writes if w.id is not None)
                return
        raise gave_up("put", thread_id)


def _with_event_id(write: MessageWrite, event_id: str) -> MessageWrite:
    return MessageWrite(
        write.role,
        write.content,
        tool_calls=write.tool_calls,
        tool_call_id=write.tool_call_id,
        metadata=write.metadata,
        id=event_id,
    )


def _kept(event: Event, kept: set[tuple[str, str]]) -> bool:
    payload = event.payload if isinstance(event.payload, dict) else {}
    if event.type == CHECKPOINT:
        return (payload.get("ns"), payload.get("id")) in kept
    if event.type == WRITES:
        return (payload.get("ns"), payload.get("checkpoint_id")) in kept
    return True


def _thread_and_ns(config: RunnableConfig) -> tuple[str, str]:
    configurable = config["configurable"]
    return str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", ""))
