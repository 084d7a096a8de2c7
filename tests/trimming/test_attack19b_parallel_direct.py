"""Attack on 6ac1333 (helper attack19b): a user message right after a ``return_direct`` tool's
result is read as the user's question when the trim knows the tools.

``create_agent`` ends the run only when *every* tool the model called returns directly
(``langchain.agents.factory._make_tools_to_model_edge``: "All executed tools have
return_direct=True"). A model that calls a ``return_direct`` chart tool (which adds its chart
as an image, with a ``Command``) beside an ordinary lookup tool is called again with what both
returned. ``ToolNode`` lists each tool's output in call order, so the chart's image sits right
after the chart tool's result, before the lookup's result (checked against ``ToolNode``: the
messages below are the ones it writes). The trim, told the tools, reads that image as the user's
new question because its tool returns directly, though the run went on: the user's real question
is demoted to history, and relevance ranks the history by the image's caption ("Chart image:"),
so the note the user asked about is dropped. With the same tools given as dicts (no flags, the
position read both ways), the note is kept at the same budgets.

Fixed: a result ends the run only when every tool its call's message called returns directly
(``_rounds._Grouping._ends_the_run``), as ``create_agent`` decides.
"""

from __future__ import annotations

import contextlib
import json
from typing import Annotated, Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.errors import GraphRecursionError
from langgraph.types import Command
from support.conversations import IMAGE, shelf_notes
from support.fakes import KeepsRequestBodies
from support.simulators import chat_openai_of

from agent_latency import PriorityTrimmer
from agent_latency.sim import RunningSimulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import TrimmingMiddleware

COUNTER = TokenCounter.for_model("gpt-4o")


@tool(return_direct=True)
def show_chart(name: str) -> str:
    """Shows a sales chart to the user (its image is added after the result)."""
    return "Chart shown."


@tool
def lookup_order(number: str) -> str:
    """Looks an order up in the shop's database."""
    return f"Order {number}: shipped."


def _call(name: str, call_id: str) -> dict[str, Any]:
    return {"name": name, "args": {}, "id": call_id, "type": "tool_call"}


def conversation() -> list[BaseMessage]:
    """A note about order 1234, other notes, then a question for which the model called the
    chart tool (return_direct, adding an image) and the lookup tool in parallel."""
    notes = shelf_notes(6)
    fact = [
        HumanMessage("Note: the Harbour warehouse ships order 1234 via Lyra freight.", id="fact"),
        AIMessage("Noted, Lyra freight for the Harbour warehouse.", id="fact-answer"),
    ]
    question = HumanMessage(
        "Which freight company ships order 1234 from the Harbour warehouse? Show the sales "
        "chart and look the order up.",
        id="question",
    )
    return [
        SystemMessage("You help the shop's staff.", id="system"),
        *notes[:6],
        *fact,
        *notes[6:],
        question,
        AIMessage("", tool_calls=[_call("show_chart", "d1"), _call("lookup_order", "o1")]),
        ToolMessage("Chart shown.", tool_call_id="d1", name="show_chart"),
        HumanMessage([{"type": "text", "text": "Chart image:"}, IMAGE], id="chart"),
        ToolMessage("Order 1234: " + "shipped " * 20, tool_call_id="o1", name="lookup_order"),
    ]


# Failed before a result ended the run only when every call of its message returns directly.
@pytest.mark.parametrize("budget", [650, 700, 750])
def test_attack19b_an_image_after_a_direct_result_beside_another_call_is_not_the_question(
    budget: int,
) -> None:
    messages = conversation()
    trimmer = PriorityTrimmer(budget, token_counter=COUNTER)
    as_dicts = trimmer.trim(messages, tools=[convert_to_openai_tool(show_chart), lookup_order])
    told = trimmer.trim(messages, tools=[show_chart, lookup_order])

    assert "fact" in [m.id for m in as_dicts.messages]  # the note the question asks about
    assert "fact" in [m.id for m in told.messages]
    classes = {d.index: d.priority_class for d in told.decisions}
    assert classes[len(messages) - 5] == "latest_user"  # the user's question, not history
    assert not told.over_budget


def chart_tool(*, direct: bool) -> BaseTool:
    """The chart tool, adding its chart as an image after its result (a ``Command``)."""

    @tool("show_chart", return_direct=direct)
    def show_chart(name: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Shows a sales chart to the user."""
        result = ToolMessage("Chart shown.", tool_call_id=tool_call_id, name="show_chart")
        chart = HumanMessage([{"type": "text", "text": "Chart image:"}, IMAGE])
        return Command(update={"messages": [result, chart]})

    return show_chart


def second_request(sim: RunningSimulator, budget: int, *, direct: bool) -> str:
    """The body of the model call after both tools ran, through a real agent."""
    bodies = KeepsRequestBodies()
    model = chat_openai_of(sim, http_client=httpx.Client(transport=bodies))
    trimmer = PriorityTrimmer(budget, token_counter=COUNTER)
    agent = create_agent(
        model,
        tools=[chart_tool(direct=direct), lookup_order],
        middleware=[TrimmingMiddleware(trimmer, recall=False)],
    )
    messages = conversation()[1:-4]  # up to the question, with no system message
    messages[-1] = HumanMessage(
        "Which freight company ships order 1234 from the Harbour warehouse? Use show_chart "
        "and lookup_order."
    )
    # The simulator calls tools again whenever the prompt ends with a user message (the image):
    # only the first two calls matter here.
    with contextlib.suppress(GraphRecursionError):
        agent.invoke({"messages": messages}, {"recursion_limit": 6})
    return json.dumps(bodies.sent[1])


# Failed before the fix of the test above.
@pytest.mark.parametrize("budget", [700, 800])
def test_attack19b_through_an_agent_the_call_after_parallel_tools_keeps_what_was_asked(
    sim: RunningSimulator, budget: int
) -> None:
    assert "Lyra freight" in second_request(sim, budget, direct=False)
    assert "Lyra freight" in second_request(sim, budget, direct=True)
