"""The pre-model hook's marker invites the recall tool only when the agent has it (issue 27).

A real ``create_react_agent`` over the real ``ChatOpenAI`` against the simulator: given
``recall_tool(hook)``, the model is told to call the tool and can; without it, the model is
told only that messages were left out, and is never offered a tool it lacks.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from support.fakes import Recorder
from support.simulators import settings_of

from agent_latency import build_chat_model
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.trimming import PriorityTrimmer, recall_tool
from agent_latency.trimming._recall import MARKER_TEXT, PLAIN_MARKER_TEXT, TOOL_NAME

SYSTEM = "You are the operations assistant; answer from the conversation."
FACT = "The database port is 5432, on host db-7."
FAST = SimulatorConfig(
    overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=20_000, answer_tokens=8
)


@tool
def restock_shelves(aisle: str) -> str:
    """Restocks the shelves of an aisle."""
    return f"Aisle {aisle} restocked."


def conversation(rounds: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for r in range(rounds):
        said = FACT if r == 1 else f"Note {r}: the shelves were restocked " + "ok " * 30
        messages += [HumanMessage(said, id=f"h{r}"), AIMessage(f"Noted {r}.", id=f"a{r}")]
    return messages


def run_agent(*, give_tool: bool, question: str) -> tuple[Recorder, dict[str, Any], list[str]]:
    """Runs a create_react_agent with the hook; returns the recorder, the state and the names
    of the tools the agent had."""
    from langgraph.prebuilt import create_react_agent

    recorder = Recorder()
    tools: list[BaseTool] = [restock_shelves]
    with running_simulator(FAST) as sim:
        settings = settings_of(sim)
        trimmer = PriorityTrimmer.from_settings(settings, budget=700, history_selection="age")
        hook = trimmer.as_pre_model_hook(prompt=SYSTEM, tools=tools)
        agent_tools = [*tools, recall_tool(hook)] if give_tool else tools
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent is deprecated for create_agent
            graph = create_react_agent(
                build_chat_model(settings), agent_tools, prompt=SYSTEM, pre_model_hook=hook
            )
        state = graph.invoke(
            {"messages": [*conversation(20), HumanMessage(question)]},
            {"callbacks": [recorder], "recursion_limit": 8},
        )
    return recorder, state, [t.name for t in agent_tools]


def markers(prompt: list[BaseMessage]) -> list[str]:
    return [
        m.text for m in prompt if isinstance(m, SystemMessage) and m.text.startswith("[Earlier")
    ]


def test_with_the_tool_given_the_marker_invites_it_and_the_model_reads_the_cut_back() -> None:
    recorder, state, names = run_agent(
        give_tool=True, question='Please recall "database port" and tell me the port.'
    )

    assert TOOL_NAME in names
    first = recorder.prompts[0]
    assert markers(first) == [MARKER_TEXT] and first[1].text == MARKER_TEXT
    assert not any(FACT in m.text for m in first)
    answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert [m.name for m in answers] == [TOOL_NAME] and FACT in answers[0].text


def test_without_the_tool_the_marker_never_names_a_tool_the_model_lacks() -> None:
    recorder, state, names = run_agent(
        give_tool=False, question="Please restock aisle 4 before noon."
    )

    assert TOOL_NAME not in names
    first = recorder.prompts[0]
    assert markers(first) == [PLAIN_MARKER_TEXT] and first[1].text == PLAIN_MARKER_TEXT
    assert all(TOOL_NAME not in m.text for m in first)
    assert not any(FACT in m.text for m in first)  # the cut still happened
    called = [
        c["name"] for m in state["messages"] if isinstance(m, AIMessage) for c in m.tool_calls
    ]
    assert called and TOOL_NAME not in called
    assert recorder.trims and all(t.tokens_after <= 700 for t in recorder.trims)


def test_the_tool_cannot_be_made_for_a_hook_without_recall() -> None:
    hook = PriorityTrimmer(450).as_pre_model_hook(recall=False)
    with pytest.raises(ValueError, match="made with recall=False"):
        recall_tool(hook)
    assert hook.recalling is None
