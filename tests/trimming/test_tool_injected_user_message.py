"""A user message that comes right after a tool result belongs to the turn it came in.

Chat endpoints take images only in user messages, so an agent's tool that fetches a chart or a
screenshot returns a ``Command`` adding its ``ToolMessage`` and a ``HumanMessage`` with the
image. That message is then the latest user message, and the question that asked for the image,
with the tool call that answered it, became history: at a small budget the model got an image
and no question. A question asked right after a ``return_direct`` tool's result is the same
shape. The turn now begins at the user message before the tool call: that message is kept like
the latest one, and the tool calls between them like the current turn's.
"""

from __future__ import annotations

from typing import Annotated, Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.types import Command
from support.fakes import KeepsRequestBodies
from support.simulators import chat_openai_of, settings_of

from agent_latency import PriorityTrimmer
from agent_latency.sim import RunningSimulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import TrimmingMiddleware

# A 1x1 PNG: OpenAI's rule counts it as one tile.
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhg"
    "GAWjR9awAAAABJRU5ErkJggg=="
)
IMAGE = {"type": "image_url", "image_url": {"url": PNG}}
QUESTION = "What does the sales chart for March show? Use get_chart."


def history(rounds: int) -> list[BaseMessage]:
    """Earlier rounds of the chat, ~60 tokens each."""
    messages: list[BaseMessage] = []
    for r in range(rounds):
        messages += [
            HumanMessage(f"Tell me about topic {r}. " + "more " * 25),
            AIMessage("ok " * 25),
        ]
    return messages


def injected_turn() -> list[BaseMessage]:
    """The question, the tool call that fetched the chart, its result and the injected image."""
    call = {"name": "get_chart", "args": {"month": "March"}, "id": "c1", "type": "tool_call"}
    return [
        HumanMessage(QUESTION),
        AIMessage("", tool_calls=[call]),
        ToolMessage("The chart is attached below.", tool_call_id="c1"),
        HumanMessage([{"type": "text", "text": "Here is the chart image."}, IMAGE]),
    ]


@pytest.mark.parametrize("extra", [0, 20, 60, 120])
def test_the_question_and_its_tool_call_stay_with_an_injected_image(extra: int) -> None:
    counter = TokenCounter.for_model("gpt-4o")
    system = SystemMessage("You are a helpful assistant.")
    turn = injected_turn()
    needed = counter.count_messages([system, *turn])
    messages = [system, *history(8), *turn]
    assert counter.count_messages(messages) > needed + 300  # the history cannot all fit

    result = PriorityTrimmer(needed + extra, token_counter=counter).trim(messages)

    assert not result.over_budget
    assert result.messages[-4:] == turn  # the turn whole, in order
    assert result.messages[0] is system


@pytest.mark.parametrize("extra", [0, 70, 80, 150])
def test_a_question_right_after_a_return_direct_result_keeps_both_questions(extra: int) -> None:
    counter = TokenCounter.for_model("gpt-4o")
    call = {"name": "lookup", "args": {"q": "x"}, "id": "c9", "type": "tool_call"}
    turn = [
        HumanMessage("Look the order 1234 up."),
        AIMessage("", tool_calls=[call]),
        ToolMessage("Order 1234: shipped.", tool_call_id="c9"),
        HumanMessage("And when will it arrive?"),
    ]
    needed = counter.count_messages(turn)
    messages = [*history(8), *turn]

    result = PriorityTrimmer(needed + extra, token_counter=counter).trim(messages)

    assert result.messages[-4:] == turn


def test_a_budget_below_the_turn_sends_the_turn_and_says_so() -> None:
    # What no trim removes is the current turn: its user messages and its newest tool call.
    counter = TokenCounter.for_model("gpt-4o")
    turn = injected_turn()
    messages = [*history(8), *turn]

    result = PriorityTrimmer(counter.count_messages(turn[-1:]), token_counter=counter).trim(
        messages
    )

    assert result.over_budget
    assert result.messages == turn
    assert "the latest user message" in (result.over_budget_cause or "")


# --- a real agent whose tool injects the image -----------------------------------------------


@pytest.mark.parametrize("budget", [500, 600, 800])  # the question was lost at 450-600
def test_an_agent_whose_tool_injects_an_image_keeps_the_question(
    sim: RunningSimulator, budget: int
) -> None:
    fetched: list[str] = []

    @tool
    def get_chart(month: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Fetches the sales chart of a month as an image."""
        fetched.append(month)
        result = ToolMessage("The chart is attached below.", tool_call_id=tool_call_id)
        if len(fetched) > 1:  # the image once: then the model answers
            return Command(update={"messages": [result]})
        image = HumanMessage([{"type": "text", "text": "Here is the chart image."}, IMAGE])
        return Command(update={"messages": [result, image]})

    bodies = KeepsRequestBodies()
    model = chat_openai_of(sim, http_client=httpx.Client(transport=bodies))
    trimmer = PriorityTrimmer.from_settings(settings_of(sim), budget=budget)
    agent = create_agent(model, tools=[get_chart], middleware=[TrimmingMiddleware(trimmer)])

    agent.invoke({"messages": [*history(12), HumanMessage(QUESTION)]})

    assert len(fetched) == 2  # the image, then the chart again: three model calls
    after_image = [body for body in bodies.sent if any(_has_image(m) for m in body["messages"])]
    assert len(after_image) == 2
    for body in after_image:
        sent = body["messages"]
        asked = [m["content"] for m in sent].index(QUESTION)  # the question the image answers
        # and the tool call that fetched the image, after the question, with its result
        assert any(m.get("tool_calls") for m in sent[asked:])
        assert_calls_whole(sent)


def _has_image(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(part.get("type") == "image_url" for part in content)


def message_dict(message: BaseMessage) -> dict[str, Any]:
    """The parts of an OpenAI message dict that pair tool calls with their results."""
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id}
    calls = [{"id": call["id"]} for call in getattr(message, "tool_calls", [])]
    return {"role": message.type, "tool_calls": calls} if calls else {"role": message.type}


def assert_calls_whole(sent: list[dict[str, Any]]) -> None:
    """Every tool result right after its call's message or another result of it, and every call
    answered: what an endpoint accepts."""
    open_calls: set[str] = set()
    for message in sent:
        if message.get("role") == "tool":
            assert message["tool_call_id"] in open_calls
            open_calls.discard(message["tool_call_id"])
            continue
        assert not open_calls, "a call without its result"
        open_calls = {call["id"] for call in message.get("tool_calls") or ()}
    assert not open_calls
