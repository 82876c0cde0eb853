"""The differential test's machine: a hypothesis `RuleBasedStateMachine` that drives
the public API on a backend and on the reference (``memory://``) in lockstep and
compares every answer.

The backend's store works on a populated database (`convostore.testing.populated`);
the reference holds only what this machine wrote. So every call the machine makes is
scoped to its own owner (a fresh one for every run), and every answer that could also
hold other owners' data (metadata lookups) is compared on the machine's own part.

Both stores see the same clock and the same generated ids: `Clock` replaces the
writer's clock and the id generator of the store (`install`), and rewinds both for each
store, so a step's timestamps, session ids and compaction ids are the same on both
sides. Stamps are opaque and compared by when they change, not by value.

Where the contract lets backends differ, the machine compares what it promises, not
more (`Lockstep.compare_search`): a vector search must return the top hits by exact
score when the k-th score is distinct from the next, in order of exact score; a text
search hits only matching messages, all of them when they fit in k, in any order of
rank; a hybrid search only messages that either search finds. Scores are not compared.

A divergence raises a subclass of `Diverged` named for the area of the API it shows in
(`SearchDiverged`, ...), so a runner can mark one known divergence strict-xfail by its
exception without hiding any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

import convostore
import convostore.prepare
import convostore.store.compacting
import convostore.store.sessions
from convostore import (
    Appended,
    Asset,
    Attachment,
    DataAttachment,
    EventFilter,
    EventWrite,
    Message,
    MessageWrite,
    Page,
    PageRequest,
    Role,
    SearchHit,
    Session,
    SessionFilter,
    SessionOrder,
    SessionSummary,
    Store,
    StoreError,
    ToolCall,
    User,
)
from convostore.compaction import SlidingWindow, TokenBudget, TurnWindow
from convostore.embedding import HashingEmbedder
from convostore.testing.populated import (
    INDEXED_KEYS,
    METADATA_VALUES,
    MODELS,
    WORDS,
    NamedHashingEmbedder,
    PopulatedDatabase,
)

__all__ = [
    "REEMBED_MODELS",
    "Clock",
    "CompactionDiverged",
    "Diverged",
    "ExpiryDiverged",
    "ListingDiverged",
    "Lockstep",
    "LogDiverged",
    "MetadataDiverged",
    "ReembedDiverged",
    "SearchDiverged",
    "SessionsDiverged",
    "World",
]

T = TypeVar("T")


class Diverged(AssertionError):
    """The backend answered otherwise than the reference did."""


class SessionsDiverged(Diverged):
    """Sessions: create, get, update, titles, parts, participants, users."""


class LogDiverged(Diverged):
    """Appends (`Store.append` saying whether it wrote), batches, versions, reads,
    narration."""


class ListingDiverged(Diverged):
    """Listings, summaries and counts through their cursors."""


class MetadataDiverged(Diverged):
    """Lookups by indexed metadata."""


class SearchDiverged(Diverged):
    """Vector, text and hybrid search."""


class CompactionDiverged(Diverged):
    """Compaction."""


class ReembedDiverged(Diverged):
    """Re-embedding to another model."""


class ExpiryDiverged(Diverged):
    """Deleting sessions, by id or by expiry."""


# The models a reembed moves the stores to, in turn (the first population model first
# on the list is where every store starts).
REEMBED_MODELS: tuple[NamedHashingEmbedder, ...] = (
    MODELS[1],
    NamedHashingEmbedder("differential-m5", 24),
    MODELS[0],
)
# A model no index is ever declared for: its vectors are carried, never searched.
FOREIGN = NamedHashingEmbedder("differential-foreign", 12)
_SCORE_TOLERANCE = 1e-5
_MAX_HITS = 1000


# ------------------------------------------------------------------------ clock and ids


def _uuid7(ms: int, counter: int) -> str:
    rand_a = (counter >> 62) & 0xFFF
    rand_b = counter & ((1 << 62) - 1)
    value = (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


# Where the store reads the writer's clock and makes new ids.
_PATCHED = (
    (convostore.prepare, "utc_now"),
    (convostore.store.sessions, "utc_now"),
    (convostore.prepare, "new_id"),
    (convostore.store.compacting, "new_id"),
)


class Clock:
    """The writer's clock and the id generator both stores see: a step (`begin`) moves
    the time on by a millisecond and remembers where ids start; `rewind` starts the ids
    of the step again for the next store."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)
        self._counter = 0
        self._step_start = 0

    def begin(self) -> None:
        self.now += timedelta(milliseconds=1)
        self._step_start = self._counter

    def rewind(self) -> None:
        self._counter = self._step_start

    def advance(self, by: timedelta) -> None:
        self.now += by

    def utc_now(self) -> datetime:
        return self.now

    def new_id(self) -> str:
        self._counter += 1
        return _uuid7(int(self.now.timestamp() * 1000), self._counter)

    @contextlib.contextmanager
    def install(self) -> Iterator[None]:
        """Make the store take its time and new ids from this clock (what
        `convostore.testing.helpers.freeze_store_clock` does for the time)."""
        saved = [(module, name, getattr(module, name)) for module, name in _PATCHED]
        for module, name in _PATCHED:
            setattr(module, name, self.utc_now if name == "utc_now" else self.new_id)
        try:
            yield
        finally:
            for module, name, value in saved:
                setattr(module, name, value)


@dataclass
class World:
    """What every run of the machine on one backend shares: the event loop the stores
    live on, the populated database, the model its index is on now, the clock."""

    name: str
    loop: asyncio.AbstractEventLoop
    populated: PopulatedDatabase
    model: HashingEmbedder
    clock: Clock = dataclasses.field(default_factory=Clock)
    runs: Iterator[int] = dataclasses.field(default_factory=itertools.count)

    @property
    def store(self) -> Store:
        return self.populated.store

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)


# ------------------------------------------------------------------------ answers


@dataclass(frozen=True, slots=True)
class Raised:
    """A call that raised: compared by the exception's type."""

    kind: type[BaseException]
    error: BaseException

    def __repr__(self) -> str:
        return f"raised {self.kind.__name__}: {self.error}"


Answer = Any


async def _answer(call: Awaitable[Any]) -> Answer:
    try:
        return await call
    except StoreError as error:
        return Raised(type(error), error)
    except (ValueError, LookupError, TypeError) as error:
        return Raised(type(error), error)


def normalized(value: Any) -> Any:
    """``value`` with what may differ between equal answers taken out: stamps (opaque),
    pages' cursors (opaque: only whether there is a next page)."""
    if isinstance(value, Session | Message):
        return replace(value, stamp="")
    if isinstance(value, SessionSummary):
        return replace(value, session=normalized(value.session))
    if isinstance(value, Appended):
        return replace(value, event=normalized(value.event))
    if isinstance(value, Page):
        return (normalized(value.items), value.next_cursor is not None)
    if isinstance(value, list | tuple):
        return [normalized(item) for item in value]
    if isinstance(value, Raised):
        return ("raised", value.kind)
    return value


def _stamps(value: Any, found: dict[str, str]) -> dict[str, str]:
    """The stamps of every session and message in an answer, by id."""
    if isinstance(value, Session):
        found[f"session {value.id}"] = value.stamp
    elif isinstance(value, Message):
        found[f"message {value.id}"] = value.stamp
    elif isinstance(value, SessionSummary):
        _stamps(value.session, found)
    elif isinstance(value, SearchHit):
        _stamps(value.message, found)
    elif isinstance(value, Appended):
        _stamps(value.event, found)
    elif isinstance(value, Page):
        _stamps(value.items, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _stamps(item, found)
    return found


def _differences(backend: Any, reference: Any) -> str:
    """Where two unequal answers first differ: a field, an item, or the whole."""
    if dataclasses.is_dataclass(backend) and type(backend) is type(reference):
        for item in dataclasses.fields(backend):
            ours, theirs = getattr(backend, item.name), getattr(reference, item.name)
            if ours != theirs:
                return f".{item.name}: {_shown(ours, 300)} != {_shown(theirs, 300)}"
    if isinstance(backend, list | tuple) and isinstance(reference, list | tuple):
        if len(backend) != len(reference):
            return f"{len(backend)} items != {len(reference)} items"
        for number, (ours, theirs) in enumerate(zip(backend, reference, strict=True)):
            if ours != theirs:
                return f"[{number}]{_differences(ours, theirs)}"
    return f"{_shown(backend, 300)} != {_shown(reference, 300)}"


def calling(name: str, *args: Any, **options: Any) -> Callable[[int, Store], Awaitable[Any]]:
    """A call of the store's method ``name`` with these arguments (for `Lockstep.both`)."""
    return lambda index, store: getattr(store, name)(*args, **options)


def _shown(value: Any, limit: int = 1500) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# ------------------------------------------------------------------------ strategies

_SPECIAL_TEXT = ("%", "_", "a_b%c", "STRASSE", "Straße", "CAFÉ", "🙂 事件", "")
TEXT = st.one_of(
    st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join),
    st.sampled_from(_SPECIAL_TEXT),
)
SMALL_TEXT = st.text(st.sampled_from("ab_%é🙂事\"'\\ .Z"), max_size=8)
JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**53), max_value=2**53),
        st.sampled_from([0.5, -1.25, 1e-3, 3.0, 1e20]),
        SMALL_TEXT,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(SMALL_TEXT, inner, max_size=3)
    ),
    max_leaves=6,
)
BRANCHES = st.sampled_from([None, None, "a", "a.b", "a.c", "ab", "a.b.c"])
ROLES = st.sampled_from([Role.USER, Role.USER, Role.ASSISTANT, Role.TOOL, Role.SYSTEM])
EVENT_TYPES = st.sampled_from(["APP.EVENT", "APP.OTHER", "NOTE.X"])
METADATA_VALUE = st.sampled_from([*METADATA_VALUES, "own-1", "own-2", 7, None])
# How far a step moves the clock, in milliseconds: the same instant up to days.
TICKS = st.sampled_from([0, 1, 999, 60_000, 3_600_000, 86_400_000 * 3])
OFFSET_VALUES = (-86_400_000, -1000, -1, 0, 1, 1000, 86_400_000)
OFFSETS = st.sampled_from(OFFSET_VALUES)


class Lockstep(RuleBasedStateMachine):
    """One run: a fresh owner on the backend's populated database and a fresh reference
    store, driven by the same calls. `World` says which backend."""

    world: World

    def __init__(self) -> None:
        super().__init__()
        world = self.world
        self.clock = world.clock
        self.run_id = f"run{next(world.runs)}-{time.time_ns() % 10**9}"
        self.owner = User(f"{self.run_id}-owner", "Owner", metadata={"run": self.run_id})
        self.bob = User(f"{self.run_id}-bob", "Bob")
        self.agent = User(f"{self.run_id}-agent", "Agent", kind="agent")
        self.model = world.model
        self.reference = world.run(
            convostore.connect("memory://", embedder=self.model, indexed_metadata=INDEXED_KEYS)
        )
        self.stores: tuple[Store, Store] = (world.store, self.reference)
        # What the machine knows, from the reference's answers.
        self.sessions: list[str] = []
        self.top_level: list[str] = []
        self.event_ids: list[str] = []
        self.message_ids: list[str] = []
        self.kept: tuple[dict[str, Session], dict[str, Session]] = ({}, {})
        self.last_stamps: tuple[dict[str, str], dict[str, str]] = ({}, {})
        self.reembeds = 0
        self.may_reembed = False

    # -------------------------------------------------------------- lockstep

    def both(
        self,
        area: type[Diverged],
        what: str,
        call: Callable[[int, Store], Awaitable[Any]],
    ) -> tuple[Answer, Answer]:
        """Run ``call`` on the backend (0) then on the reference (1) at the same instant
        with the same ids; compare the answers; return both."""
        self.clock.begin()
        answers: list[Answer] = []
        with self.clock.install():
            for index, store in enumerate(self.stores):
                self.clock.rewind()
                answers.append(self.world.run(_answer(call(index, store))))
        backend, reference = answers
        if isinstance(reference, Raised) and not isinstance(reference.error, StoreError):
            raise reference.error
        self.same(area, what, backend, reference)
        return backend, reference

    def same(self, area: type[Diverged], what: str, backend: Any, reference: Any) -> None:
        if normalized(backend) != normalized(reference):
            raise area(
                f"{what} on {self.world.name}:\n  backend:   {_shown(backend)}"
                f"\n  reference: {_shown(reference)}"
                f"\n  differing: {_differences(normalized(backend), normalized(reference))}"
            )
        self.check_stamps(area, what, backend, reference)

    def check_stamps(self, area: type[Diverged], what: str, backend: Any, reference: Any) -> None:
        """A stamp changes on the backend exactly when it changes on the reference."""
        seen = (_stamps(backend, {}), _stamps(reference, {}))
        for key in seen[0].keys() & seen[1].keys():
            changed = [
                key in self.last_stamps[side] and seen[side][key] != self.last_stamps[side][key]
                for side in (0, 1)
            ]
            if changed[0] != changed[1]:
                raise area(
                    f"{what} on {self.world.name}: the stamp of {key} "
                    f"{'changed' if changed[0] else 'did not change'} on the backend, "
                    f"{'changed' if changed[1] else 'did not change'} on the reference"
                )
        for side in (0, 1):
            self.last_stamps[side].update(seen[side])

    def reference_run(self, call: Coroutine[Any, Any, T]) -> T:
        with self.clock.install():
            return self.world.run(call)

    # -------------------------------------------------------------- drawing

    def draw_session(self, data: st.DataObject, *, known_only: bool = False) -> str:
        """One of the machine's sessions (the newest most often), or now and then one
        that was never created."""
        if not self.sessions or (not known_only and data.draw(st.integers(0, 9)) == 0):
            return _uuid7(1, 7)
        newest_first = list(reversed(self.sessions))
        return data.draw(
            st.integers(0, len(newest_first) - 1).map(lambda i: newest_first[i]), label="session"
        )

    def draw_event_id(self, data: st.DataObject) -> str | None:
        number = data.draw(st.one_of(st.none(), st.integers(0, 11)), label="event id")
        if number is None:
            return None
        if number % 4 == 3:
            # A character outside the Basic Multilingual Plane in the id.
            return f"{self.run_id}-évènement-🙂-事件-{number}"
        return f"{self.run_id}-e{number}"

    def draw_user(self, data: st.DataObject, label: str) -> User | str | None:
        users: list[User | str | None] = [None, self.owner, self.bob, self.agent, self.agent]
        if data.draw(st.integers(0, 7), label=f"{label} unknown") == 0:
            return f"{self.run_id}-nobody"
        return data.draw(st.sampled_from(users), label=label)

    def draw_time(self, data: st.DataObject, label: str) -> datetime:
        return self.clock.now + timedelta(milliseconds=data.draw(OFFSETS, label=label))

    def draw_write(self, data: st.DataObject) -> MessageWrite | EventWrite:
        event_id = self.draw_event_id(data)
        branch = data.draw(BRANCHES, label="branch")
        created_at = (
            self.draw_time(data, "created_at") if data.draw(st.integers(0, 5)) == 0 else None
        )
        if data.draw(st.integers(0, 3), label="kind of write") == 0:
            return EventWrite(
                data.draw(EVENT_TYPES, label="type"),
                payload=data.draw(JSON, label="payload"),
                id=event_id,
                branch=branch,
                metadata={"m": data.draw(JSON, label="metadata")},
                synthetic=data.draw(st.booleans(), label="synthetic"),
                created_at=created_at,
            )
        role = data.draw(ROLES, label="role")
        content = data.draw(TEXT, label="content")
        extras = data.draw(st.integers(0, 7), label="extras")
        vector_choice = data.draw(st.integers(0, 5), label="vector")
        embedding: Sequence[float] | None = None
        embedding_model: str | None = None
        if vector_choice == 0:
            embedding, embedding_model = FOREIGN.embed_one(content), FOREIGN.name
        elif vector_choice == 1:
            embedding, embedding_model = self.model.embed_one(content + " given"), self.model.name
        tool_call_id = (
            data.draw(st.sampled_from(["call-1", "call-2"])) if role is Role.TOOL else None
        )
        return MessageWrite(
            role,
            content,
            author=self.draw_user(data, "author"),
            recipients=data.draw(
                st.lists(st.sampled_from([self.owner, self.bob.id, self.agent]), max_size=2),
                label="recipients",
            ),
            in_reply_to=data.draw(
                st.sampled_from([None, *self.message_ids[-3:]]), label="in_reply_to"
            ),
            tool_calls=(ToolCall("call-1", "search", {"q": content}),) if extras == 1 else (),
            tool_call_id=tool_call_id,
            attachments=(Attachment("att-1", "a.txt", "text/plain", 3),) if extras == 2 else (),
            data=(DataAttachment("data-1", "chart", "A chart", {"x": [1, 2]}),)
            if extras == 3
            else (),
            assets=(Asset("asset-1", "logo.png", "image/png", 10),) if extras == 4 else (),
            branch=branch,
            metadata={"m": data.draw(JSON, label="metadata")} if extras == 5 else None,
            id=event_id,
            created_at=created_at,
            embedding=embedding,
            embedding_model=embedding_model,
        )

    def learn_events(self, answer: Any) -> None:
        for event in answer if isinstance(answer, list) else [answer]:
            if isinstance(event, convostore.Event) and event.id not in self.event_ids:
                self.event_ids.append(event.id)
                if isinstance(event, Message):
                    self.message_ids.append(event.id)

    def learn_session(self, answer: Any) -> None:
        if isinstance(answer, Session) and answer.id not in self.sessions:
            self.sessions.append(answer.id)
            if answer.part_of is None:
                self.top_level.append(answer.id)

    # -------------------------------------------------------------- sessions

    @initialize(reembed=st.integers(0, 3))
    def start(self, reembed: int) -> None:
        """Every run starts with a session of its owner's. One run in four may reembed
        (each reembed rewrites the population's vectors: seconds on a server)."""
        self.may_reembed = reembed == 3
        session_id = self.clock.new_id()
        _, created = self.both(
            SessionsDiverged,
            "create_session",
            lambda i, s: s.create_session(
                self.owner, session_id=session_id, title="first", metadata={"tenant": "acme"}
            ),
        )
        self.learn_session(created)

    @rule(data=st.data())
    def create_session(self, data: st.DataObject) -> None:
        parent = data.draw(
            st.sampled_from([None, None, None, *self.top_level[-2:], *self.sessions[-1:]]),
            label="part_of",
        )
        existing = data.draw(
            st.sampled_from([None, None, None, *self.sessions[-2:]]), label="session_id"
        )
        owners: list[User | str] = [self.owner, self.owner, self.owner.id]
        owner = data.draw(st.sampled_from(owners), label="owner")
        metadata = {
            key: data.draw(METADATA_VALUE, label=key)
            for key in (*INDEXED_KEYS, "free")
            if data.draw(st.booleans(), label=f"has {key}")
        }
        expires = data.draw(st.sampled_from([None, None, *OFFSET_VALUES]), label="expires")
        expires_at = None if expires is None else self.clock.now + timedelta(milliseconds=expires)
        if_absent = data.draw(st.booleans(), label="if absent") and existing is not None
        options: dict[str, Any] = {
            "title": data.draw(st.sampled_from([None, "Launch", "🙂 plan", ""]), label="title"),
            "kind": data.draw(st.sampled_from(["chat", "chat", "task"]), label="kind"),
            "part_of": parent,
            "held_with": data.draw(st.sampled_from([None, self.agent, self.bob.id]))
            if parent is not None
            else None,
            "metadata": metadata,
            "expires_at": expires_at,
        }

        async def create(index: int, store: Store) -> Any:
            if if_absent:
                assert existing is not None
                return await store.create_session_if_absent(owner, session_id=existing, **options)
            return await store.create_session(owner, session_id=existing, **options)

        _, reference = self.both(SessionsDiverged, "create_session", create)
        self.learn_session(reference)

    @rule(data=st.data())
    def find_or_create_part(self, data: st.DataObject) -> None:
        parent = self.draw_session(data)
        held_with = data.draw(st.sampled_from([self.agent, self.bob.id]), label="held_with")
        if data.draw(st.booleans(), label="find only"):
            self.both(SessionsDiverged, "find_part", calling("find_part", parent, held_with))
            return
        _, reference = self.both(
            SessionsDiverged,
            "find_or_create_part",
            calling("find_or_create_part", parent, held_with, title="part"),
        )
        self.learn_session(reference)

    @rule(data=st.data())
    def update_session(self, data: st.DataObject) -> None:
        session_id = self.draw_session(data, known_only=True)
        stale = data.draw(st.booleans(), label="from an earlier read")
        title = data.draw(st.sampled_from([None, "Renamed", "ü 🙂"]), label="title")
        metadata = {"tenant": data.draw(METADATA_VALUE, label="tenant"), "x": 1}
        expires = data.draw(st.sampled_from([None, *OFFSET_VALUES]), label="expires")
        expires_at = None if expires is None else self.clock.now + timedelta(milliseconds=expires)

        async def update(index: int, store: Store) -> Any:
            session = self.kept[index].get(session_id) if stale else None
            if session is None:
                session = await store.get_session(session_id)
            if session is None:
                return None
            updated = await store.update_session(
                replace(session, title=title, metadata=metadata, expires_at=expires_at)
            )
            self.kept[index][session_id] = updated
            return updated

        self.both(SessionsDiverged, "update_session", update)

    @rule(data=st.data())
    def set_title(self, data: st.DataObject) -> None:
        session_id = self.draw_session(data)
        title = data.draw(st.sampled_from([None, "Title", "x" * 200, "事件"]), label="title")
        self.both(SessionsDiverged, "set_title", calling("set_title", session_id, title))

    @rule(data=st.data())
    def look(self, data: st.DataObject) -> None:
        """Read a session, its parts, participants and version, or a user."""
        session_id = self.draw_session(data)
        which = data.draw(
            st.sampled_from(["get_session", "participants", "list_parts", "version", "user"])
        )
        if which == "user":
            user = data.draw(st.sampled_from([self.owner, self.bob, self.agent]), label="user")
            if data.draw(st.booleans(), label="put"):
                renamed = replace(user, display_name=data.draw(SMALL_TEXT, label="name") or "x")
                self.both(SessionsDiverged, "put_user", calling("put_user", renamed))
            self.both(SessionsDiverged, "get_user", calling("get_user", user.id))
            return
        if which != "get_session":
            self.both(SessionsDiverged, which, calling(which, session_id))
            return

        async def get(index: int, store: Store) -> Session | None:
            session = await store.get_session(session_id)
            if session is not None:
                self.kept[index][session_id] = session
            return session

        self.both(SessionsDiverged, "get_session", get)

    # -------------------------------------------------------------- the log

    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        session_id = self.draw_session(data)
        write = self.draw_write(data)
        method = data.draw(
            st.sampled_from(["append_event", "add_message", "append"]), label="method"
        )
        if method == "add_message" and not isinstance(write, MessageWrite):
            method = "append_event"
        _, reference = self.both(LogDiverged, method, calling(method, session_id, write))
        self.learn_events(reference.event if isinstance(reference, Appended) else reference)

    @rule(data=st.data())
    def append_turn(self, data: st.DataObject) -> None:
        """A turn as an agent writes one: a question, a tool call, its result, an
        answer, each appended alone."""
        session_id = self.draw_session(data)
        question = data.draw(TEXT, label="question")
        branch = data.draw(BRANCHES, label="branch")
        call = ToolCall("call-1", "search", {"q": question})
        writes = [
            MessageWrite(Role.USER, question or "?", author=self.owner, branch=branch),
            MessageWrite(Role.ASSISTANT, "", author=self.agent, tool_calls=[call], branch=branch),
            MessageWrite(Role.TOOL, f"found {question}", tool_call_id="call-1", branch=branch),
            MessageWrite(Role.ASSISTANT, f"answer {question}", author=self.agent, branch=branch),
        ]
        for write in writes:
            _, reference = self.both(
                LogDiverged, "add_message", calling("add_message", session_id, write)
            )
            self.learn_events(reference)
            if isinstance(reference, Raised):
                return

    @rule(data=st.data())
    def append_batch(self, data: st.DataObject) -> None:
        session_id = self.draw_session(data)
        writes = data.draw(st.lists(st.just(None), max_size=4), label="batch size")
        batch = [self.draw_write(data) for _ in writes]
        offset = data.draw(st.sampled_from([0, 0, 0, -1, 1]), label="version offset")

        async def append(index: int, store: Store) -> Any:
            version = await store.version(session_id)
            return await store.append_events(session_id, batch, max(0, version + offset))

        _, reference = self.both(LogDiverged, "append_events", append)
        if reference is True:
            events = self.reference_run(self.reference.read(session_id))
            self.learn_events(events)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        session_id = self.draw_session(data)
        last = data.draw(st.sampled_from([None, None, 1, 2, 5]), label="last")
        limit = (
            None if last is not None else data.draw(st.sampled_from([None, 1, 3]), label="limit")
        )
        event_filter = EventFilter(
            active_view=data.draw(st.booleans(), label="active_view"),
            types=data.draw(
                st.sampled_from([None, ("MESSAGE",), ("APP.EVENT", "COMPACTION"), ()]),
                label="types",
            ),
            roles=data.draw(
                st.sampled_from([None, (Role.USER,), ("assistant", "tool")]), label="roles"
            ),
            exclude_synthetic=data.draw(st.booleans(), label="exclude_synthetic"),
            branch=data.draw(BRANCHES, label="branch"),
            since=self.draw_time(data, "since") if data.draw(st.booleans()) else None,
            until=self.draw_time(data, "until") if data.draw(st.booleans()) else None,
            text=data.draw(st.sampled_from([None, None, "a", "%", "_", "STRASSE", "café"])),
            after_seq=data.draw(st.sampled_from([None, 0, 1, 3]), label="after_seq"),
            limit=limit,
            last=last,
        )
        if data.draw(st.integers(0, 4), label="messages()") == 0:
            self.both(LogDiverged, "messages", calling("messages", session_id, last=last))
            return
        self.both(LogDiverged, f"read {event_filter}", calling("read", session_id, event_filter))

    @rule(data=st.data())
    def narrate(self, data: st.DataObject) -> None:
        session_id = self.draw_session(data)
        message_id = data.draw(
            st.sampled_from([*self.message_ids[-4:], f"{self.run_id}-e0", "unknown"]),
            label="message",
        )
        text = data.draw(st.sampled_from([None, "she paused", "🙂"]), label="narration")
        self.both(
            LogDiverged,
            "set_narration",
            calling("set_narration", session_id, message_id, text),
        )

    @rule(data=st.data())
    def compact(self, data: st.DataObject) -> None:
        session_id = self.draw_session(data)
        strategy = data.draw(
            st.sampled_from([SlidingWindow(2), TurnWindow(1), TokenBudget(8), SlidingWindow(50)]),
            label="strategy",
        )

        def summarize(events: Sequence[convostore.Event]) -> list[str]:
            return [f"summary of {len(events)} events", "and a second line"]

        _, reference = self.both(
            CompactionDiverged,
            "compact",
            calling("compact", session_id, strategy, summarize),
        )
        if reference is not None and not isinstance(reference, Raised):
            self.learn_events(self.reference_run(self.reference.read(session_id)))

    # -------------------------------------------------------------- listings, lookups

    @rule(data=st.data())
    def listing(self, data: st.DataObject) -> None:
        order = data.draw(st.sampled_from(list(SessionOrder)), label="order")
        size = data.draw(st.integers(1, 4), label="size")
        listing_filter = SessionFilter(
            kind=data.draw(st.sampled_from([None, None, "task"]), label="kind"),
            include_parts=data.draw(st.booleans(), label="include_parts"),
        )
        summaries = data.draw(st.booleans(), label="summaries")
        owners: list[User | str] = [self.owner.id, self.owner]
        owner_ref = data.draw(st.sampled_from(owners), label="owner")
        cursors: list[str | None] = [None, None]
        listed = 0
        for page_number in itertools.count():

            async def page(
                index: int, store: Store, cursors: list[str | None] = cursors, first: bool = True
            ) -> Any:
                request = PageRequest(size, cursors[index], order if first else None)
                if summaries:
                    return await store.list_summaries(owner_ref, request, listing_filter)
                return await store.list_sessions(owner_ref, request, listing_filter)

            backend, reference = self.both(
                ListingDiverged,
                f"page {page_number}",
                functools.partial(page, cursors=cursors, first=page_number == 0),
            )
            if isinstance(reference, Raised):
                return
            listed += len(reference.items)
            cursors = [backend.next_cursor, reference.next_cursor]
            if reference.next_cursor is None:
                break
            if data.draw(st.integers(0, 5), label="cursor under the other order") == 0:
                other = next(o for o in SessionOrder if o is not order)
                self.both(
                    ListingDiverged,
                    "a cursor under the other order",
                    functools.partial(self.other_order, owner_ref, size, cursors, other),
                )
        backend_count, _ = self.both(
            ListingDiverged,
            "count_sessions",
            calling("count_sessions", owner_ref, listing_filter),
        )
        if backend_count != listed:
            raise ListingDiverged(f"count {backend_count} but {listed} listed")

    @staticmethod
    async def other_order(
        owner: User | str,
        size: int,
        cursors: list[str | None],
        order: SessionOrder,
        index: int,
        store: Store,
    ) -> Any:
        return await store.list_sessions(owner, PageRequest(size, cursors[index], order))

    @rule(data=st.data())
    def metadata_lookup(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from([*INDEXED_KEYS, "free"]), label="key")
        value = data.draw(METADATA_VALUE, label="value")

        async def lookup(index: int, store: Store) -> Any:
            found = await store.find_sessions_by_metadata(key, value)
            # Other owners' sessions match too on the populated database.
            return [s for s in found if s.owner_id == self.owner.id]

        self.both(MetadataDiverged, "find_sessions_by_metadata", lookup)

    # -------------------------------------------------------------- search

    @rule(data=st.data())
    def search(self, data: st.DataObject) -> None:
        mode = data.draw(st.sampled_from(["vector", "text", "hybrid"]), label="mode")
        query = data.draw(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join), label="query"
        )
        given_vector = mode != "text" and data.draw(st.booleans(), label="given vector")
        vector = self.model.embed_one(query) if given_vector else None
        if given_vector and data.draw(st.integers(0, 9), label="wrong width") == 0:
            vector = [*self.model.embed_one(query), 0.0]
        session_id = (
            self.draw_session(data) if data.draw(st.booleans(), label="in a session") else None
        )
        roles = data.draw(st.sampled_from([None, None, ("user",), ("assistant", "tool")]))
        k = data.draw(st.sampled_from([1, 2, 3, 5, 10]), label="k")
        self.check_search(mode, query, vector, session_id, roles, k)

    def check_search(
        self,
        mode: str,
        query: str,
        vector: Sequence[float] | None,
        session_id: str | None,
        roles: Sequence[str] | None,
        k: int,
    ) -> None:
        """Search both stores in the machine owner's sessions and compare."""

        def search_with(store: Store, k: int) -> Awaitable[list[SearchHit]]:
            return store.search(
                query,
                vector=vector,
                mode=mode,  # type: ignore[arg-type]
                owner_id=self.owner.id,
                session_id=session_id,
                k=k,
                roles=roles,
            )

        self.clock.begin()
        with self.clock.install():
            backend = self.world.run(_answer(search_with(self.stores[0], k)))
            reference = self.world.run(_answer(search_with(self.reference, k)))
            everything = self.world.run(_answer(search_with(self.reference, _MAX_HITS)))
        what = f"search mode={mode} query={query!r} session={session_id} roles={roles} k={k}"
        if isinstance(reference, Raised) or isinstance(backend, Raised):
            self.same(SearchDiverged, what, backend, reference)
            return
        self.compare_search(what, mode, k, backend, everything, roles, session_id, query)

    def compare_search(
        self,
        what: str,
        mode: str,
        k: int,
        backend: list[SearchHit],
        everything: list[SearchHit],
        roles: Sequence[str] | None,
        session_id: str | None,
        query: str,
    ) -> None:
        """What the contract promises of a search (see the module)."""
        found = {hit.message.id: hit for hit in everything}
        ids = [hit.message.id for hit in backend]
        shown = f"{what} on {self.world.name}: backend {ids}, reference {list(found)[:20]}"
        if len(set(ids)) != len(ids):
            raise SearchDiverged(f"{shown}: a message hit twice")
        outside = [i for i in ids if i not in found]
        if mode != "hybrid" and outside:
            raise SearchDiverged(f"{shown}: hits the reference does not find: {outside}")
        for hit in backend:
            if hit.message.id in found:
                self.same(SearchDiverged, what, hit.message, found[hit.message.id].message)
        if mode == "text":
            if len(ids) != min(k, len(found)):
                raise SearchDiverged(f"{shown}: {len(ids)} hits, expected {min(k, len(found))}")
            return
        if mode == "hybrid":
            text_hits = self.reference_run(
                self.reference.search(
                    query,
                    mode="text",
                    owner_id=self.owner.id,
                    session_id=session_id,
                    k=_MAX_HITS,
                    roles=roles,
                )
            )
            union = {h.message.id for h in text_hits} | set(
                self._vector_candidates(session_id, roles)
            )
            if set(ids) - union:
                raise SearchDiverged(f"{shown}: hits neither search finds: {set(ids) - union}")
            depth = max(k * 4, 40)
            if len(union) <= depth and len(ids) != min(k, len(union)):
                raise SearchDiverged(f"{shown}: {len(ids)} hits, expected {min(k, len(union))}")
            return
        # Vector: the top k by exact score, in order of exact score.
        scores = [hit.score for hit in everything]
        if len(ids) != min(k, len(everything)):
            raise SearchDiverged(f"{shown}: {len(ids)} hits, expected {min(k, len(everything))}")
        exact = [found[i].score for i in ids]
        if any(b > a + _SCORE_TOLERANCE for a, b in itertools.pairwise(exact)):
            raise SearchDiverged(f"{shown}: not in order of score: {exact}")
        if len(everything) > k:
            kth, after = scores[k - 1], scores[k]
            below = [
                i for i, score in zip(ids, exact, strict=True) if score < kth - _SCORE_TOLERANCE
            ]
            if below:
                raise SearchDiverged(f"{shown}: {below} score below the k-th best, {kth}")
            if kth - after > _SCORE_TOLERANCE:
                wanted = {hit.message.id for hit in everything[:k]}
                if set(ids) != wanted:
                    raise SearchDiverged(f"{shown}: the top {k} by score are {wanted}")
        elif set(ids) != set(found):
            raise SearchDiverged(f"{shown}: expected every one of {set(found)}")

    def _vector_candidates(self, session_id: str | None, roles: Sequence[str] | None) -> list[str]:
        """The reference's messages a vector search could rank (a vector of the model)."""
        wanted_roles = None if roles is None else {Role(r) for r in roles}
        candidates: list[str] = []
        sessions = [session_id] if session_id is not None else self.sessions
        for sid in sessions:
            session = self.reference_run(self.reference.get_session(sid))
            if session is None or session.owner_id != self.owner.id:
                continue
            for message in self.reference_run(self.reference.messages(sid)):
                if message.embedding_model == self.model.name and (
                    wanted_roles is None or message.role in wanted_roles
                ):
                    candidates.append(message.id)
        return candidates

    # -------------------------------------------------------------- reembed

    @precondition(lambda self: self.may_reembed and self.reembeds < 1)
    @rule()
    def reembed(self) -> None:
        self.reembed_to_next_model()

    def reembed_to_next_model(self) -> None:
        """Reembed both stores to the next of `REEMBED_MODELS` and compare: the backend
        embeds what the reference does and the population's pending messages."""
        current = REEMBED_MODELS.index(self.model) if self.model in REEMBED_MODELS else -1
        target = REEMBED_MODELS[(current + 1) % len(REEMBED_MODELS)]
        pending = self.world.populated.pending(target.name)
        self.clock.begin()
        with self.clock.install():
            backend = self.world.run(_answer(self.stores[0].reembed(target)))
            self.clock.rewind()
            reference = self.world.run(_answer(self.reference.reembed(target)))
        self.reembeds += 1
        self.model = self.world.model = target
        if not isinstance(backend, Raised):
            self.world.populated.reembedded(target.name)
        if isinstance(backend, Raised) or isinstance(reference, Raised):
            self.same(ReembedDiverged, "reembed", backend, reference)
            return
        if backend.messages != reference.messages + pending:
            raise ReembedDiverged(
                f"reembed to {target.name} on {self.world.name} embedded {backend.messages} "
                f"messages: the reference embedded {reference.messages} and the population "
                f"holds {pending} pending"
            )

    # -------------------------------------------------------------- deletes, expiry, time

    @rule(data=st.data())
    def delete_session(self, data: st.DataObject) -> None:
        session_id = self.draw_session(data)
        self.both(ExpiryDiverged, "delete_session", calling("delete_session", session_id))

    @rule(data=st.data())
    def delete_expired(self, data: st.DataObject) -> None:
        before = self.draw_time(data, "before") if data.draw(st.booleans()) else None
        self.both(ExpiryDiverged, "delete_expired", calling("delete_expired", before))

    @rule(ms=TICKS)
    def tick(self, ms: int) -> None:
        self.clock.advance(timedelta(milliseconds=ms))

    # -------------------------------------------------------------- the end

    def teardown(self) -> None:
        try:
            self.compare_everything()
        finally:
            self.clean_up()

    def compare_everything(self) -> None:
        """Every session the machine made, as both stores hold it now."""
        for session_id in self.sessions:
            self.both(
                SessionsDiverged,
                "get_session (at the end)",
                calling("get_session", session_id),
            )
            self.both(LogDiverged, "read (at the end)", calling("read", session_id))
            self.both(LogDiverged, "version (at the end)", calling("version", session_id))
        for listing_filter in (SessionFilter(), SessionFilter(include_parts=True)):
            self.both(
                ListingDiverged,
                "count_sessions (at the end)",
                calling("count_sessions", self.owner.id, listing_filter),
            )

    def clean_up(self) -> None:
        """Delete what the run wrote on the populated database (so that no later run's
        `delete_expired` meets it), and close the reference."""
        store = self.world.store
        with self.clock.install():
            for session_id in self.sessions:
                self.world.run(_answer(store.delete_session(session_id)))
            self.world.run(self.reference.close())
