"""What the adapters share: framework event types, the active view they read, and the
records that stand for a clear or a pop on an append-only log."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from convostore.errors import ConflictError, InvalidArgumentError
from convostore.filters import EventFilter
from convostore.ids import new_id
from convostore.model import COMPACTION, Event, EventWrite, Message, MessageWrite
from convostore.store import Store
from convostore.sync import SyncStore

__all__ = [
    "ATTEMPTS",
    "AnyWrite",
    "StoreRunner",
    "append_all",
    "copy_write",
    "framework_event_type",
    "gave_up",
    "missing_framework",
    "read_view",
    "rewrite_view",
]

T = TypeVar("T")
# How many times an adapter retries a version-checked write that other writers keep
# beating before it gives up with `gave_up`'s error.
ATTEMPTS = 50
AnyWrite = MessageWrite | EventWrite
_NOT_IN_TYPE = re.compile(r"[^A-Z0-9_.]")


def missing_framework(package: str, extra: str) -> ImportError:
    """The error an adapter raises when its framework is not installed."""
    return ImportError(
        f"this convostore integration needs {package}: pip install 'convostore[{extra}]'"
    )


def gave_up(what: str, session_id: str) -> ConflictError:
    """The error an adapter raises when other writers moved the session's log before
    each of its `ATTEMPTS` version-checked writes: nothing of this call was written."""
    return ConflictError(
        f"{what} on session {session_id!r} gave up after {ATTEMPTS} attempts: other "
        "writers changed the session before each one; nothing was written"
    )


def framework_event_type(prefix: str, name: str) -> str:
    """``PREFIX.NAME`` as a valid event type (``[A-Z][A-Z0-9_.]{0,63}``) for a framework
    item that has no meaning in convostore's model and is stored whole."""
    cleaned = _NOT_IN_TYPE.sub("_", str(name).upper()) or "ITEM"
    return f"{prefix}.{cleaned}"[:64]


async def read_view(store: Store, session_id: str, last: int | None = None) -> list[Event]:
    """The session's active view (everything a clear or pop left), newest ``last``
    events widened to their turn start."""
    return await store.read(session_id, EventFilter(active_view=True, last=last))


async def append_all(store: Store, session_id: str, writes: Sequence[AnyWrite]) -> None:
    """Append the writes in one all-or-nothing batch, after whatever other writers
    appended meanwhile."""
    if len(writes) == 1:
        await store.append_event(session_id, writes[0])
        return
    for _ in range(ATTEMPTS):
        version = await store.version(session_id)
        if await store.append_events(session_id, writes, expected_version=version):
            return
    raise gave_up("appending a batch", session_id)


def copy_write(event: Event, *, synthetic: bool | None = None) -> AnyWrite:
    """A new write that repeats ``event`` (new id, same time, branch and metadata; a
    message keeps its author, recipients, reply, tool calls, attachments, data, assets
    and vector; narration, which a write cannot carry, is not repeated)."""
    flag = event.synthetic if synthetic is None else synthetic
    if isinstance(event, Message):
        return MessageWrite(
            event.role,
            event.content,
            author=event.author_id,
            recipients=event.recipient_ids,
            in_reply_to=event.in_reply_to,
            attachments=event.attachments,
            data=event.data,
            assets=event.assets,
            tool_calls=event.tool_calls,
            tool_call_id=event.tool_call_id,
            branch=event.branch,
            metadata=dict(event.metadata),
            created_at=event.created_at,
            embedding=event.embedding,
            embedding_model=event.embedding_model,
            synthetic=flag,
        )
    return EventWrite(
        event.type,
        event.payload,
        branch=event.branch,
        metadata=dict(event.metadata),
        created_at=event.created_at,
        synthetic=flag,
    )


async def rewrite_view(
    store: Store,
    session_id: str,
    version: int,
    view: Sequence[Event],
    keep: Sequence[Event],
    then: Sequence[AnyWrite] = (),
    reason: str = "rewrite",
) -> bool:
    """Make ``keep`` (a subsequence of ``view``, in view order) followed by ``then`` the
    new active view, by one COMPACTION boundary written only if the log is still at
    ``version``. Nothing is deleted: the full log keeps every event.

    The summaries of an earlier compaction lead a view but follow its kept events in the
    log, so they are repeated as this boundary's summaries to keep the view's order."""
    leading = 0
    while leading < len(view) and view[leading].synthetic and view[leading].type != COMPACTION:
        leading += 1
    summary_source = {event.id for event in view[:leading]}
    summaries = [copy_write(event, synthetic=True) for event in keep if event.id in summary_source]
    summary_ids = [new_id() for _ in summaries]
    summaries = [_with_id(write, id_) for write, id_ in zip(summaries, summary_ids, strict=True)]
    kept_ids = [event.id for event in keep if event.id not in summary_source]
    boundary = EventWrite(
        COMPACTION,
        {"kept_event_ids": kept_ids, "summary_event_ids": summary_ids, "reason": reason},
        synthetic=True,
    )
    return await store.append_events(
        session_id, [boundary, *summaries, *then], expected_version=version
    )


def _with_id(write: AnyWrite, id_: str) -> AnyWrite:
    return dataclasses.replace(write, id=id_)


def tool_arguments(arguments: Any) -> dict[str, Any]:
    """A framework's tool-call arguments as the mapping `ToolCall.arguments` holds: a JSON
    object's text decoded, anything else that is no mapping kept under ``"arguments"``
    (nothing at all is no arguments)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return {"arguments": arguments}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    return {} if arguments is None else {"arguments": arguments}


def framework_metadata(key: str, value: Any) -> dict[str, Any]:
    """The metadata under which an adapter keeps a framework's own form of an event."""
    return {key: value}


def stored_form(event: Event, key: str) -> Mapping[str, Any] | None:
    """What an adapter stored under ``key`` in the event's metadata, if anything."""
    value = event.metadata.get(key) if isinstance(event.metadata, Mapping) else None
    return value if isinstance(value, Mapping) else None


class StoreRunner:
    """Runs the async store's coroutines for a framework's blocking methods.

    With a `convostore.sync` store they run on its loop thread. With an async store they
    run on the event loop that was running when the adapter was made, from another
    thread; called on that loop itself, a blocking method cannot wait and raises."""

    def __init__(self, store: Store | SyncStore) -> None:
        self._proxy: SyncStore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        if isinstance(store, SyncStore):
            self._proxy = store
            target = store.target
        else:
            target = store
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                self._loop = None
        if not isinstance(target, Store):
            raise InvalidArgumentError("expected a convostore Store (or convostore.sync store)")
        self.store: Store = target

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._proxy is not None:
            return self._proxy.run(coroutine)
        loop = self._loop
        if loop is None or loop.is_closed():
            return asyncio.run(coroutine)
        if not loop.is_running():
            return loop.run_until_complete(coroutine)
        if _running_loop() is loop:
            coroutine.close()
            raise RuntimeError(
                "a blocking method was called on the store's own event loop: use the "
                "async method, or give the adapter a convostore.sync store"
            )
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
