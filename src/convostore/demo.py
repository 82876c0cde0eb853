"""A guided tour of convostore on a real database: ``convostore demo``.

It builds a small team thread (a side conversation held with an agent, several
authors writing to several recipients, an attachment, structured data, a tool call
and its result), pages through a user's sessions, compacts the thread, and prints the
transcript and the active view.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from convostore import connect
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
    async with await connect(url) as store:
        out(f"convostore demo on {url}\n")
        thread_id = await _team_thread(store, out)
        await _paging(store, out)
        await _compaction(store, thread_id, out)


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


_NAMES = {user.id: user.display_name for user in (ADA, GRACE, PLANNER, RESEARCHER)}


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
