"""Attacks on the trimmer as agents use it: real agents over HTTP against the simulator.

Each defect found was an ``xfail(strict=True)`` test, now passing: the recall tool's three, and
a tool call whose result the user removed (``RemoveMessage``), which was sent without it (OpenAI
answers 400; ``create_react_agent`` refused the hook's messages). The other tests pin what held
under the same attacks (threads sharing one compiled graph).
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from support.conversations import shelf_notes
from support.fakes import Recorder
from support.simulators import settings_of

from agent_latency import build_chat_model
from agent_latency.sim import RunningSimulator
from agent_latency.trimming import recall_tool
from agent_latency.trimming._middleware import TrimmingMiddleware
from agent_latency.trimming._recall import TOOL_NAME
from agent_latency.trimming._trimmer import PriorityTrimmer

SYSTEM = "You are the operations assistant; answer from the conversation. " * 3


@tool
def lookup(key: str) -> str:
    """Looks a key up in the inventory."""
    return f"value of {key}: " + "record " * 60


def middleware_agent(sim: RunningSimulator, budget: int, *, tools: list[Any]) -> Any:
    settings = settings_of(sim)
    trimmer = PriorityTrimmer.from_settings(settings, budget=budget)
    return create_agent(
        build_chat_model(settings),
        tools=tools,
        system_prompt=SYSTEM,
        middleware=[TrimmingMiddleware(trimmer)],
        checkpointer=InMemorySaver(),
    )


def unanswered_calls(prompt: list[BaseMessage]) -> set[str]:
    """The ids of the tool calls in ``prompt`` that no tool message answers (OpenAI: 400)."""
    answered = {m.tool_call_id for m in prompt if isinstance(m, ToolMessage)}
    calls = {c["id"] for m in prompt if isinstance(m, AIMessage) for c in m.tool_calls}
    return {c for c in calls - answered if c is not None}


def recall_answer(state: dict[str, Any]) -> str:
    """The text of the latest recall tool message of a run's state."""
    answers = [m for m in state["messages"] if isinstance(m, ToolMessage) and m.name == TOOL_NAME]
    return answers[-1].text


# --- a tool result removed between turns ------------------------------------------------------


def removed_tool_result_prompt(graph: Any, config: dict[str, Any]) -> list[BaseMessage]:
    """Three lookup turns, the second turn's tool result removed (a user's cleanup), then a
    question: the prompt the model got for it."""
    for i in range(3):
        graph.invoke({"messages": [HumanMessage(f'Use lookup for "k{i}" please.')]}, config)
    messages = graph.get_state(config).values["messages"]
    second = [m for m in messages if isinstance(m, ToolMessage)][1]
    graph.update_state(config, {"messages": [RemoveMessage(id=str(second.id))]})
    recorder = Recorder()
    graph.invoke(
        {"messages": [HumanMessage("Thanks; now summarise.")]}, {**config, "callbacks": [recorder]}
    )
    return recorder.prompts[0]


def test_middleware_never_sends_a_tool_call_whose_result_was_removed(sim: RunningSimulator) -> None:
    graph = middleware_agent(sim, 5000, tools=[lookup])
    prompt = removed_tool_result_prompt(graph, {"configurable": {"thread_id": "t"}})
    assert unanswered_calls(prompt) == set()


def test_hook_never_sends_a_tool_call_whose_result_was_removed(sim: RunningSimulator) -> None:
    from langgraph.prebuilt import create_react_agent

    settings = settings_of(sim)
    trimmer = PriorityTrimmer.from_settings(settings, budget=5000)
    hook = trimmer.as_pre_model_hook(prompt=SYSTEM, tools=[lookup])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated for create_agent
        graph = create_react_agent(
            build_chat_model(settings),
            [lookup, recall_tool(hook)],
            prompt=SYSTEM,
            pre_model_hook=hook,
            checkpointer=InMemorySaver(),
        )
    prompt = removed_tool_result_prompt(graph, {"configurable": {"thread_id": "t"}})
    assert unanswered_calls(prompt) == set()


# --- the recall tool, called by the model -----------------------------------------------------


def test_recall_finds_a_message_by_id_written_as_the_tool_writes_it(sim: RunningSimulator) -> None:
    graph = middleware_agent(sim, 600, tools=[])
    question = HumanMessage('Please recall "[id h1]" and quote it.')
    state = graph.invoke(
        {"messages": [*shelf_notes(20), question]}, {"configurable": {"thread_id": "t"}}
    )
    assert recall_answer(state).startswith("[id h1] human: Note 1:")


def test_recall_names_the_ids_it_tells_the_model_to_ask_by(sim: RunningSimulator) -> None:
    graph = middleware_agent(sim, 600, tools=[])
    history = shelf_notes(20)
    question = HumanMessage('Please recall "shelves restocked" for me.')
    state = graph.invoke({"messages": [*history, question]}, {"configurable": {"thread_id": "t"}})
    answer = recall_answer(state)
    more = re.search(r"\((\d+) more matched: ask with more precise words or by id\.\)", answer)
    assert more is not None  # the tool tells the model to ask by id for the rest...
    shown = set(re.findall(r"^\[id (\S+)\]", answer, flags=re.MULTILINE))
    named = {m.id for m in history if m.id not in shown and re.search(rf"\b{m.id}\b", answer)}
    # ...so it must name them: every match it does not show.
    assert len(named) >= int(more.group(1))


# --- one compiled graph, several threads ------------------------------------------------------


def test_threads_of_one_graph_in_a_batch_trim_alike_and_recall_only_their_own(
    sim: RunningSimulator,
) -> None:
    """Three threads of one compiled graph, run together in ``batch`` turn after turn with cuts:
    each call fits, calls keep their results, a fresh trimmer given the same messages trims the
    same, and the recall tool reads back its own thread's messages only."""
    budget = 700
    settings = settings_of(sim)
    trimmer = PriorityTrimmer.from_settings(settings, budget=budget)
    graph = create_agent(
        build_chat_model(settings),
        tools=[lookup],
        system_prompt=SYSTEM,
        middleware=[TrimmingMiddleware(trimmer)],
        checkpointer=InMemorySaver(),
    )
    threads = ["A", "B", "C"]
    recorders = {t: Recorder() for t in threads}
    configs: list[Any] = [
        {"configurable": {"thread_id": t}, "callbacks": [recorders[t]]} for t in threads
    ]

    def said(thread: str, turn: int) -> str:
        if turn % 3 == 1:
            return f'Use lookup for "item {thread}{turn}" please.'
        if turn % 3 == 2:
            return f'Please recall "code {thread}" for thread {thread}.'
        return f"In thread {thread} the code is code-{thread}-{turn}. " + "filler words " * 30

    for turn in range(6):
        graph.batch([{"messages": [HumanMessage(said(t, turn))]} for t in threads], configs)

    fresh = PriorityTrimmer.from_settings(settings, budget=budget)
    for thread in threads:
        recorder = recorders[thread]
        assert len(recorder.trims) == len(recorder.prompts) > 6
        for trim, prompt in zip(recorder.trims, recorder.prompts, strict=True):
            assert trim.tokens_after <= budget or trim.over_budget
            assert unanswered_calls(prompt) == set()
        state = graph.get_state({"configurable": {"thread_id": thread}}).values["messages"]
        recalled = [m.text for m in state if isinstance(m, ToolMessage) and m.name == TOOL_NAME]
        assert recalled and all(
            f"code-{other}-" not in text
            for text in recalled
            for other in threads
            if other != thread
        )
        assert any(f"code-{thread}-" in text for text in recalled)
        request = [SystemMessage(SYSTEM), *state]
        assert (
            fresh.trim(request, tools=[lookup]).messages
            == trimmer.trim(request, tools=[lookup]).messages
        )


FACT = "Ops notes: the database port is 5432, on host db-7; the cache is on host cache-3."


def test_recall_does_not_read_back_its_own_earlier_calls_and_answers(
    sim: RunningSimulator,
) -> None:
    earlier = [
        HumanMessage(FACT, id="fact"),
        HumanMessage('Please recall "database port".', id="ask"),
        AIMessage(
            "",
            id="call",
            tool_calls=[{"name": TOOL_NAME, "args": {"query": "database port"}, "id": "c0"}],
        ),
        ToolMessage("[id fact] human: " + FACT, tool_call_id="c0", id="res"),
        AIMessage("It is 5432.", id="ok"),
    ]
    graph = middleware_agent(sim, 600, tools=[])
    question = HumanMessage(
        'Please recall "database port" before we plan the migration of the billing service '
        "with the whole team, the vendor and the auditors next week.",
        id="q",
    )
    history = shelf_notes(20)
    recorder = Recorder()
    state = graph.invoke(
        {"messages": [*history[:10], *earlier, *history[10:], question]},
        {"configurable": {"thread_id": "t"}, "callbacks": [recorder]},
    )
    answer = recall_answer(state)
    assert answer != "Nothing was left out of this conversation's prompt."
    # The model gets the fact once, in the prompt or in the tool's answer, not twice...
    assert sum(FACT in m.text for m in recorder.prompts[0]) + answer.count(FACT) == 1
    # ...and not its own earlier request for it as if it were what was said.
    assert "called recall" not in answer
