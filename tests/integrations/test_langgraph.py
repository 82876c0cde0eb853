"""LangGraph's checkpointer on every backend: the langgraph-checkpoint-conformance suite,
and a real graph that resumes a thread."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncGenerator
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint import conformance
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import convostore.sync
from convostore import Role, Store, User
from convostore.integrations.langchain import ConvostoreChatMessageHistory
from convostore.integrations.langgraph import ConvostoreSaver

CAPABILITIES = {
    "put",
    "put_writes",
    "get_tuple",
    "list",
    "delete_thread",
    "copy_thread",
    "prune",
    "delete_for_runs",
}


async def test_conformance_suite(connect_store: Any) -> None:
    stores: list[Store] = []

    async def saver() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        # A fresh owner per capability suite keeps listings over all threads apart.
        store = await connect_store()
        stores.append(store)
        yield ConvostoreSaver(store, owner=User(f"graph-{len(stores)}", "Graph", kind="agent"))

    registered = conformance.checkpointer_test(name="ConvostoreSaver")(saver)
    report = await conformance.validate(registered)
    failures = {name: result.failures for name, result in report.results.items() if result.failures}
    assert failures == {}
    assert {name for name, r in report.results.items() if r.passed} == CAPABILITIES
    assert report.passed_all()


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: Annotated[int, operator.add]


def _agent(state: State) -> dict[str, Any]:
    heard = [m.content for m in state["messages"] if isinstance(m, HumanMessage)]
    return {"messages": [AIMessage(f"I have heard: {', '.join(map(str, heard))}")], "turns": 1}


def _graph(saver: ConvostoreSaver) -> Any:
    builder = StateGraph(State)
    builder.add_node("agent", _agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver)


async def test_a_graph_resumes_a_thread(connect_store: Any) -> None:
    store = await connect_store()
    config: Any = {"configurable": {"thread_id": "thread-1"}}
    await _graph(ConvostoreSaver(store)).ainvoke(
        {"messages": [HumanMessage("apples")], "turns": 0}, config
    )
    # A new saver and graph (as after a restart) resume the thread from the store.
    result = await _graph(ConvostoreSaver(store)).ainvoke(
        {"messages": [HumanMessage("pears")]}, config
    )
    assert result["turns"] == 2
    assert result["messages"][-1].content == "I have heard: apples, pears"
    # The thread's messages are convostore messages, once each, readable by the others.
    messages = await store.messages("thread-1")
    assert [(m.role, m.content) for m in messages] == [
        (Role.USER, "apples"),
        (Role.ASSISTANT, "I have heard: apples"),
        (Role.USER, "pears"),
        (Role.ASSISTANT, "I have heard: apples, pears"),
    ]
    history = await ConvostoreChatMessageHistory("thread-1", store).aget_messages()
    assert [m.content for m in history] == [m.content for m in result["messages"]]
    hits = await store.search("pears", mode="text", session_id="thread-1")
    assert {hit.message.content for hit in hits} == {"pears", "I have heard: apples, pears"}


def test_a_sync_graph_on_a_sync_store(backend: Any) -> None:
    with convostore.sync.connect(backend()) as store:
        graph = _graph(ConvostoreSaver(store))
        config: Any = {"configurable": {"thread_id": "thread-s"}}
        graph.invoke({"messages": [HumanMessage("one")], "turns": 0}, config)
        result = graph.invoke({"messages": [HumanMessage("two")]}, config)
        assert result["turns"] == 2
        assert len(list(ConvostoreSaver(store).list(config))) == 6


async def test_blocking_saver_from_a_worker_thread(store: Store) -> None:
    saver = ConvostoreSaver(store)
    graph = _graph(saver)
    config: Any = {"configurable": {"thread_id": "thread-t"}}
    result = await asyncio.to_thread(
        graph.invoke, {"messages": [HumanMessage("hi")], "turns": 0}, config
    )
    assert result["turns"] == 1
    assert (await saver.aget_tuple(config)) is not None
