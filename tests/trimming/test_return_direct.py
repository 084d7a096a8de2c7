"""A user message right after a ``return_direct`` tool's result is the user's question.

A tool that fetches an image adds it in a user message after its result, and such a message is
the tool's (``test_tool_injected_user_message.py``). A ``return_direct`` tool's result ends the
agent's run, so a user message after it is the user's own next question, images and all. The
trim tells the two apart when it knows the tools (the middleware always does; the pre-model
hook and ``trim`` when given ``tools=``): the question is then the latest user message, kept
whatever the agent does for it. Without the tools the position is all there is, and such a
message is read both ways (docs/trimming.md).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from support.conversations import IMAGE, shelf_notes
from support.shop import PHOTO_ASK, check_warranty, lookup_order
from support.simulators import chat_openai_of

from agent_latency import PriorityTrimmer
from agent_latency.sim import RunningSimulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import TrimmingMiddleware

COUNTER = TokenCounter.for_model("gpt-4o")


@tool("lookup_order")
def lookup_order_then_answer(number: str) -> str:
    """Looks an order up in the shop's database (the agent answers after it)."""
    return lookup_order.invoke({"number": number})


def call(name: str, id_: str) -> dict[str, Any]:
    return {"name": name, "args": {}, "id": id_, "type": "tool_call"}


def conversation(*, named: bool) -> list[BaseMessage]:
    """An order looked up by a return_direct tool, then the user's photo question, for which
    the agent called another tool. ``named``: the results carry their tool's name, as
    LangGraph's do (else the name is the call's)."""
    photo = HumanMessage([{"type": "text", "text": PHOTO_ASK}, IMAGE], id="photo-ask")
    return [
        *shelf_notes(4),
        HumanMessage("Use lookup_order for order 1234."),
        AIMessage("", tool_calls=[call("lookup_order", "c1")]),
        ToolMessage(
            lookup_order.invoke({"number": "1234"}),
            tool_call_id="c1",
            name="lookup_order" if named else None,
        ),
        photo,
        AIMessage("", tool_calls=[call("check_warranty", "c2")]),
        ToolMessage(check_warranty.invoke({"product": "parcel"}), tool_call_id="c2"),
    ]


@pytest.mark.parametrize("named", [True, False])
@pytest.mark.parametrize("budget", [450, 500, 540])
def test_a_photo_question_after_a_return_direct_result_is_kept_when_the_tools_are_given(
    named: bool, budget: int
) -> None:
    messages = conversation(named=named)
    photo = messages[-3]
    tools: list[BaseTool] = [lookup_order, check_warranty]
    trimmer = PriorityTrimmer(budget, token_counter=COUNTER)

    told = trimmer.trim(messages, tools=tools)
    # The same definitions as dicts (no flags), or a lookup_order that does not end the run.
    as_dicts = trimmer.trim(messages, tools=list(map(convert_to_openai_tool, tools)))
    answered_after = trimmer.trim(messages, tools=[lookup_order_then_answer, check_warranty])

    assert not told.over_budget
    assert told.messages[-3:] == messages[-3:]  # the question, then what the agent did for it
    # The position alone says "a tool's image", glued to the finished step, which does not fit.
    for untold in (as_dicts, answered_after):
        assert not untold.over_budget
        assert photo not in untold.messages
        assert untold.messages[-2:] == messages[-2:]


def test_a_tools_image_after_a_result_that_does_not_end_the_run_stays_the_tools() -> None:
    # The same messages with a tool that does not return directly: the image is the tool's, and
    # the question before it is what the turn asks (kept, with the newest call).
    messages = conversation(named=True)
    question = messages[-6]
    result = PriorityTrimmer(600, token_counter=COUNTER).trim(
        messages, tools=[lookup_order_then_answer, check_warranty]
    )
    assert question in result.messages
    assert result.messages[-2:] == messages[-2:]


@pytest.mark.parametrize("where", ["hook", "agent"])
def test_recall_reads_a_photo_question_after_a_direct_result_back_as_the_users(
    where: str, sim: RunningSimulator
) -> None:
    messages = [
        HumanMessage("Use lookup_order for order 1234.", id="order-ask"),
        AIMessage("", tool_calls=[call("lookup_order", "c1")], id="order-call"),
        ToolMessage("Order 1234 shipped.", tool_call_id="c1", name="lookup_order", id="order"),
        HumanMessage([{"type": "text", "text": "Is this parcel dented?"}, IMAGE], id="photo"),
        AIMessage("It is dented.", id="photo-answer"),
        *shelf_notes(30),
    ]
    if where == "hook":
        recall = {"name": "recall", "args": {"query": "x"}, "id": "r1", "type": "tool_call"}
        asked = [HumanMessage("What about the parcel?"), AIMessage("", tool_calls=[recall])]
        trimmer = PriorityTrimmer(400, token_counter=COUNTER)
        hook = trimmer.as_pre_model_hook(tools=[lookup_order])
        answer = hook.read_back([*messages, *asked], "r1", "parcel dented")
    else:  # the simulator calls recall with the words the question quotes
        agent = create_agent(
            chat_openai_of(sim),
            tools=[lookup_order],
            middleware=[TrimmingMiddleware(PriorityTrimmer(400, token_counter=COUNTER))],
        )
        asked = [HumanMessage('Please recall "parcel dented" and tell me what it was.')]
        state = agent.invoke({"messages": [*messages, *asked]})
        (reply,) = [m for m in state["messages"] if m.name == "recall"]
        answer = reply.text

    assert "[id photo] human: [image] Is this parcel dented?\n" in answer + "\n"
