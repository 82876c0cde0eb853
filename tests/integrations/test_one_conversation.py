"""One conversation, many frameworks: each adapter writes one turn (a question, a tool
call, its result, an answer) on one store, in turn, and after each turn the whole
conversation is read back through the store's API and through every adapter's read path.

Six adapters write into one session. Two cannot by design: Strands keeps an agent's
messages in a part of its own session (`Store.find_part`), and LlamaIndex keeps a chat
store key in the session ``session_id_for(namespace, key)``. Their turns are written
through their adapters into those sessions, which every adapter that reads any session
reads too. ADK, LlamaIndex and Strands address only their own sessions through their
classes: elsewhere they are read through the event mapping each adapter documents
(`event_to_adk_event`, `event_to_chat_message`). LangGraph (a thread's checkpoints),
Strands (an agent's own messages) and Pydantic AI (a chain of entries) read back only what
they wrote themselves, so for them the test checks their own turn reads back whole.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from agent_framework import Content
from agent_framework import Message as AfMessage
from agents.items import TResponseInputItem
from google.adk.events.event import Event as AdkEvent
from google.genai import types
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from llama_index.core.base.llms.types import ChatMessage
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from strands.types.session import Session, SessionAgent, SessionMessage, SessionType

from convostore import EventFilter, Message, Role, Store
from convostore.integrations.adk import (
    ConvostoreSessionService,
    event_to_adk_event,
    store_session_id,
)
from convostore.integrations.agent_framework import ConvostoreHistoryProvider
from convostore.integrations.langchain import ConvostoreChatMessageHistory
from convostore.integrations.langgraph import ConvostoreSaver
from convostore.integrations.llama_index import (
    DEFAULT_NAMESPACE,
    ConvostoreChatStore,
    event_to_chat_message,
    session_id_for,
)
from convostore.integrations.openai_agents import ConvostoreSession
from convostore.integrations.pydantic_ai import load_history, save_messages
from convostore.integrations.strands import ConvostoreSessionRepository, agent_user

# One message part as every framework can say it: ("user", text), ("assistant", text),
# ("call", tool call id, tool name) or ("result", tool call id, result text).
Atom = tuple[str, ...]
Reader = Callable[[str], Awaitable[list[Atom]]]

APP, USER, ADK_ID = "shop", "ada", "conversation"
MAIN = store_session_id(APP, USER, ADK_ID)
STRANDS_SESSION, STRANDS_AGENT = "strands-conversation", "helper"
LLAMA_KEY = "conversation"
LLAMA = session_id_for(DEFAULT_NAMESPACE, LLAMA_KEY)
FRAMEWORKS = [
    "openai_agents",
    "adk",
    "langchain",
    "langgraph",
    "strands",
    "llama_index",
    "agent_framework",
    "pydantic_ai",
]


def _turn(n: int) -> list[Atom]:
    return [
        ("user", f"question {n}"),
        ("call", f"call-{n}", f"tool_{n}"),
        ("result", f"call-{n}", f"result {n}"),
        ("assistant", f"answer {n}"),
    ]


def _result(value: Any) -> str:
    """A tool result's text: ADK keeps a result as a JSON object ``{"result": ...}``."""
    if isinstance(value, str):
        text: str = value
        try:
            value = json.loads(text)
        except ValueError:
            return text
    if isinstance(value, dict) and set(value) == {"result"} and isinstance(value["result"], str):
        return str(value["result"])
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


# ---------------------------------------------------------------- what each framework sees


def _store_atoms(messages: list[Message]) -> list[Atom]:
    atoms: list[Atom] = []
    for m in messages:
        if m.role == Role.TOOL:
            atoms.append(("result", m.tool_call_id or "", _result(m.content)))
            continue
        if m.content:
            atoms.append((m.role.value, m.content))
        atoms += [("call", call.id, call.name) for call in m.tool_calls]
    return atoms


def _openai_atoms(items: list[Any]) -> list[Atom]:
    atoms: list[Atom] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            atoms.append(("call", item["call_id"], item["name"]))
        elif kind == "function_call_output":
            atoms.append(("result", item["call_id"], _result(item["output"])))
        elif item.get("content"):
            content = item["content"]
            text = content if isinstance(content, str) else "\n".join(p["text"] for p in content)
            atoms.append((item["role"], text))
    return atoms


def _adk_atoms(events: list[AdkEvent]) -> list[Atom]:
    atoms: list[Atom] = []
    for event in events:
        for part in event.content.parts or [] if event.content else []:
            if part.text:
                atoms.append(("user" if event.author == "user" else "assistant", part.text))
            if part.function_call:
                atoms.append(("call", part.function_call.id or "", part.function_call.name or ""))
            if part.function_response:
                response = part.function_response
                atoms.append(("result", response.id or "", _result(response.response)))
    return atoms


def _langchain_atoms(messages: list[BaseMessage]) -> list[Atom]:
    atoms: list[Atom] = []
    for m in messages:
        if isinstance(m, ToolMessage):
            atoms.append(("result", m.tool_call_id, _result(m.content)))
            continue
        if m.content:
            atoms.append(("user" if isinstance(m, HumanMessage) else "assistant", str(m.content)))
        if isinstance(m, AIMessage):
            atoms += [("call", call["id"] or "", call["name"]) for call in m.tool_calls]
    return atoms


def _strands_atoms(messages: list[SessionMessage]) -> list[Atom]:
    atoms: list[Atom] = []
    for m in messages:
        message = cast(dict[str, Any], m.to_message())
        for block in message["content"]:
            if "text" in block:
                atoms.append((message["role"], block["text"]))
            if "toolUse" in block:
                atoms.append(("call", block["toolUse"]["toolUseId"], block["toolUse"]["name"]))
            if "toolResult" in block:
                result = block["toolResult"]
                text = "\n".join(c["text"] for c in result["content"])
                atoms.append(("result", result["toolUseId"], _result(text)))
    return atoms


def _llama_atoms(messages: list[ChatMessage]) -> list[Atom]:
    atoms: list[Atom] = []
    for m in messages:
        extra = m.additional_kwargs
        if str(m.role.value) == "tool":
            atoms.append(("result", str(extra["tool_call_id"]), _result(m.content or "")))
            continue
        if m.content:
            atoms.append((str(m.role.value), m.content))
        for call in extra.get("tool_calls") or []:
            atoms.append(("call", call["id"], call["function"]["name"]))
    return atoms


def _af_atoms(messages: list[AfMessage]) -> list[Atom]:
    atoms: list[Atom] = []
    for m in messages:
        for content in m.contents:
            if content.type == "text" and content.text:
                atoms.append((str(m.role), content.text))
            elif content.type == "function_call":
                atoms.append(("call", str(content.call_id), str(content.name)))
            elif content.type == "function_result":
                atoms.append(("result", str(content.call_id), _result(content.result)))
    return atoms


def _pydantic_atoms(messages: list[ModelMessage]) -> list[Atom]:
    atoms: list[Atom] = []
    for m in messages:
        for part in m.parts:
            if isinstance(part, UserPromptPart):
                atoms.append(("user", str(part.content)))
            elif isinstance(part, TextPart):
                atoms.append(("assistant", part.content))
            elif isinstance(part, ToolCallPart):
                atoms.append(("call", part.tool_call_id, part.tool_name))
            elif isinstance(part, ToolReturnPart):
                atoms.append(("result", part.tool_call_id, _result(part.model_response_str())))
    return atoms


# ---------------------------------------------------------------- the test


async def test_one_conversation_through_every_framework(store: Store) -> None:
    adk = ConvostoreSessionService(store)
    await adk.create_session(app_name=APP, user_id=USER, session_id=ADK_ID)
    strands = ConvostoreSessionRepository(store)
    await strands.acreate_session(Session(STRANDS_SESSION, SessionType.AGENT))
    await strands.acreate_agent(STRANDS_SESSION, SessionAgent(STRANDS_AGENT, {}, {}))
    strands_part = await store.find_part(STRANDS_SESSION, agent_user(STRANDS_AGENT))
    assert strands_part is not None
    part = strands_part.id
    llama = ConvostoreChatStore(store)
    af = ConvostoreHistoryProvider(store)
    saver = ConvostoreSaver(store)
    thread = {"configurable": {"thread_id": MAIN}}

    async def view(session_id: str) -> list[Any]:
        return await store.read(session_id, EventFilter(active_view=True))

    async def adk_read(session_id: str) -> list[Atom]:
        if session_id == MAIN:
            got = await adk.get_session(app_name=APP, user_id=USER, session_id=ADK_ID)
            assert got is not None
            return _adk_atoms(got.events)
        return _adk_atoms([e for x in await view(session_id) if (e := event_to_adk_event(x))])

    async def llama_read(session_id: str) -> list[Atom]:
        if session_id == LLAMA:
            return _llama_atoms(await llama.aget_messages(LLAMA_KEY))
        found = [m for e in await view(session_id) if (m := event_to_chat_message(e))]
        return _llama_atoms(found)

    async def openai_read(session_id: str) -> list[Atom]:
        return _openai_atoms(list(await ConvostoreSession(session_id, store).get_items()))

    async def langchain_read(session_id: str) -> list[Atom]:
        history = ConvostoreChatMessageHistory(session_id, store)
        return _langchain_atoms(await history.aget_messages())

    async def af_read(session_id: str) -> list[Atom]:
        return _af_atoms(await af.get_messages(session_id))

    # Adapters that read any session, each through its own read path.
    readers: dict[str, Reader] = {
        "openai_agents": openai_read,
        "adk": adk_read,
        "langchain": langchain_read,
        "llama_index": llama_read,
        "agent_framework": af_read,
    }

    async def langgraph_own() -> list[Atom]:
        state = await graph.aget_state(cast(Any, thread))
        return _langchain_atoms(state.values.get("messages", []))

    async def strands_own() -> list[Atom]:
        return _strands_atoms(await strands.alist_messages(STRANDS_SESSION, STRANDS_AGENT))

    async def pydantic_own() -> list[Atom]:
        return _pydantic_atoms(await load_history(store, MAIN))

    # Adapters that read back only what they wrote: their own turn, whole.
    own: dict[str, Callable[[], Awaitable[list[Atom]]]] = {
        "langgraph": langgraph_own,
        "strands": strands_own,
        "pydantic_ai": pydantic_own,
    }

    # ------------------------------------------------------------ the writers

    async def write_openai(n: int) -> None:
        items = [
            {"role": "user", "content": f"question {n}"},
            {
                "type": "function_call",
                "call_id": f"call-{n}",
                "name": f"tool_{n}",
                "arguments": json.dumps({"x": n}),
            },
            {"type": "function_call_output", "call_id": f"call-{n}", "output": f"result {n}"},
            {"role": "assistant", "content": f"answer {n}"},
        ]
        await ConvostoreSession(MAIN, store).add_items(cast(list[TResponseInputItem], items))

    async def write_adk(n: int) -> None:
        parts: list[tuple[str, types.Part]] = [
            ("user", types.Part(text=f"question {n}")),
            (
                "planner",
                types.Part(
                    function_call=types.FunctionCall(
                        id=f"call-{n}", name=f"tool_{n}", args={"x": n}
                    )
                ),
            ),
            (
                "user",
                types.Part(
                    function_response=types.FunctionResponse(
                        id=f"call-{n}", name=f"tool_{n}", response={"result": f"result {n}"}
                    )
                ),
            ),
            ("planner", types.Part(text=f"answer {n}")),
        ]
        for author, part in parts:
            session = await adk.get_session(app_name=APP, user_id=USER, session_id=ADK_ID)
            assert session is not None
            role = "user" if author == "user" else "model"
            event = AdkEvent(
                invocation_id=f"inv-{n}",
                author=author,
                content=types.Content(role=role, parts=[part]),
                timestamp=time.time(),
            )
            await adk.append_event(session, event)

    def _lc_turn(n: int) -> list[BaseMessage]:
        call = {"id": f"call-{n}", "name": f"tool_{n}", "args": {"x": n}, "type": "tool_call"}
        return [
            HumanMessage(f"question {n}", id=f"lc-{n}-0"),
            AIMessage("", tool_calls=[call], id=f"lc-{n}-1"),
            ToolMessage(f"result {n}", tool_call_id=f"call-{n}", id=f"lc-{n}-2"),
            AIMessage(f"answer {n}", id=f"lc-{n}-3"),
        ]

    async def write_langchain(n: int) -> None:
        await ConvostoreChatMessageHistory(MAIN, store).aadd_messages(_lc_turn(n))

    async def write_langgraph(n: int) -> None:
        await graph.ainvoke(cast(Any, {"messages": _lc_turn(n)}), cast(Any, thread))

    async def write_strands(n: int) -> None:
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"text": f"question {n}"}]},
            {
                "role": "assistant",
                "content": [
                    {"toolUse": {"toolUseId": f"call-{n}", "name": f"tool_{n}", "input": {"x": n}}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "toolResult": {
                            "toolUseId": f"call-{n}",
                            "status": "success",
                            "content": [{"text": f"result {n}"}],
                        }
                    }
                ],
            },
            {"role": "assistant", "content": [{"text": f"answer {n}"}]},
        ]
        for index, message in enumerate(messages):
            await strands.acreate_message(
                STRANDS_SESSION,
                STRANDS_AGENT,
                SessionMessage.from_message(cast(Any, message), index),
            )

    async def write_llama(n: int) -> None:
        call = {
            "id": f"call-{n}",
            "type": "function",
            "function": {"name": f"tool_{n}", "arguments": json.dumps({"x": n})},
        }
        for message in [
            ChatMessage(role="user", content=f"question {n}"),
            ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [call]}),
            ChatMessage(
                role="tool", content=f"result {n}", additional_kwargs={"tool_call_id": f"call-{n}"}
            ),
            ChatMessage(role="assistant", content=f"answer {n}"),
        ]:
            await llama.async_add_message(LLAMA_KEY, message)

    async def write_af(n: int) -> None:
        await af.save_messages(
            MAIN,
            [
                AfMessage("user", [f"question {n}"]),
                AfMessage(
                    "assistant",
                    [
                        Content.from_function_call(
                            call_id=f"call-{n}", name=f"tool_{n}", arguments={"x": n}
                        )
                    ],
                ),
                AfMessage(
                    "tool",
                    [Content.from_function_result(call_id=f"call-{n}", result=f"result {n}")],
                ),
                AfMessage("assistant", [f"answer {n}"]),
            ],
        )

    async def write_pydantic(n: int) -> None:
        await save_messages(
            store,
            MAIN,
            [
                ModelRequest(parts=[UserPromptPart(f"question {n}")]),
                ModelResponse(
                    parts=[ToolCallPart(f"tool_{n}", {"x": n}, tool_call_id=f"call-{n}")]
                ),
                ModelRequest(
                    parts=[ToolReturnPart(f"tool_{n}", f"result {n}", tool_call_id=f"call-{n}")]
                ),
                ModelResponse(parts=[TextPart(f"answer {n}")]),
            ],
        )

    writers: dict[str, tuple[str, Callable[[int], Awaitable[None]]]] = {
        "openai_agents": (MAIN, write_openai),
        "adk": (MAIN, write_adk),
        "langchain": (MAIN, write_langchain),
        "langgraph": (MAIN, write_langgraph),
        "strands": (part, write_strands),
        "llama_index": (LLAMA, write_llama),
        "agent_framework": (MAIN, write_af),
        "pydantic_ai": (MAIN, write_pydantic),
    }

    def passthrough(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": []}

    graph = (
        StateGraph(MessagesState)
        .add_node("passthrough", passthrough)
        .add_edge(START, "passthrough")
        .compile(checkpointer=saver)
    )

    # ------------------------------------------------------------ turn by turn

    # Each session id and the turns written into it, in order.
    sessions: dict[str, list[int]] = {MAIN: [], part: [], LLAMA: []}
    turn_of: dict[str, int] = {}
    for n, framework in enumerate(FRAMEWORKS, start=1):
        session_id, write = writers[framework]
        await write(n)
        sessions[session_id].append(n)
        turn_of[framework] = n

        for sid, turns in sessions.items():
            expected = [atom for t in turns for atom in _turn(t)]
            # The store's API: order, roles, contents, tool calls and results, authors.
            messages = await store.messages(sid)
            assert [e for e in await store.read(sid) if isinstance(e, Message)] == messages
            assert _store_atoms(messages) == expected, (framework, sid)
            assert [m.role for m in messages] == [
                Role.USER,
                Role.ASSISTANT,
                Role.TOOL,
                Role.ASSISTANT,
            ] * len(turns)
            for m in messages:
                for call in m.tool_calls:
                    assert call.arguments == {"x": int(call.id.removeprefix("call-"))}
            # Only Strands gives a message an author: the agent that spoke.
            author = agent_user(STRANDS_AGENT).id if sid == part else None
            assert [m.author_id for m in messages] == [
                author if m.role == Role.ASSISTANT else None for m in messages
            ]
            for name, read in readers.items():
                assert await read(sid) == expected, (framework, name, sid)

        for name, read_own in own.items():
            if name in turn_of:
                assert await read_own() == _turn(turn_of[name]), (framework, name)

    # ADK names who spoke: its own agent, the Strands agent, and "model" for the rest.
    got = await adk.get_session(app_name=APP, user_id=USER, session_id=ADK_ID)
    assert got is not None
    authors = [e.author for e in got.events if e.content and e.content.role == "model"]
    assert authors == ["model", "model", "planner", "planner"] + ["model", "model"] * 4
    from_strands = [e for x in await view(part) if (e := event_to_adk_event(x))]
    assert [e.author for e in from_strands] == ["user", "strands.agent:helper"] * 2
