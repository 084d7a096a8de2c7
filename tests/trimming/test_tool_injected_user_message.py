"""A user message a tool added with its result belongs to the turn it came in.

Chat endpoints take images only in user messages, so an agent's tool that fetches a chart or a
screenshot returns a ``Command`` adding its ``ToolMessage`` and a ``HumanMessage`` with the
image. That message was then the latest user message, and the question that asked for the
image, with the tool call that answered it, became history: at a small budget the model got an
image and no question. Such a message (other parts than text, right after a tool result, a tool
call or another such message) is now part of the tool's turn: the question stays the latest
user message, the image is kept with the newest tool call, and the round holds all of them.
A text right after a tool result (a question after a ``return_direct`` tool) is a question.
"""

from __future__ import annotations

from typing import Annotated, Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.types import Command
from support.conversations import IMAGE
from support.fakes import KeepsRequestBodies
from support.simulators import chat_openai_of, settings_of

from agent_latency import PriorityTrimmer
from agent_latency.sim import RunningSimulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import TrimmingMiddleware

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


def test_a_text_right_after_a_tool_result_is_a_question_of_its_own() -> None:
    # A question after a return_direct tool's result: the turn before it is history.
    counter = TokenCounter.for_model("gpt-4o")
    call = {"name": "lookup", "args": {"q": "x"}, "id": "c9", "type": "tool_call"}
    messages = [
        *history(2),
        HumanMessage("Look the order 1234 up."),
        AIMessage("", tool_calls=[call]),
        ToolMessage("Order 1234: shipped.", tool_call_id="c9"),
        HumanMessage("And when will it arrive?"),
    ]

    result = PriorityTrimmer(10_000, token_counter=counter).trim(messages)

    classes = [d.priority_class for d in result.decisions]
    assert classes[-4:] == ["history", "history", "history", "latest_user"]


def test_a_budget_below_the_turn_sends_the_turn_and_says_so() -> None:
    # What no trim removes: the question, and the newest tool call with the image it added.
    counter = TokenCounter.for_model("gpt-4o")
    turn = injected_turn()
    messages = [*history(8), *turn]

    result = PriorityTrimmer(counter.count_messages(turn[-1:]), token_counter=counter).trim(
        messages
    )

    assert result.over_budget
    assert result.messages == turn
    assert [d.rule for d in result.decisions[-4:]] == ["must_keep", *["latest_tool_call"] * 3]
    assert "the current tool call" in (result.over_budget_cause or "")


def test_a_long_caption_a_tool_added_is_shortened_before_the_question() -> None:
    # When the turn does not fit, the text of what the tool added (read as the user's next
    # question, too, after a return_direct tool) is shortened as the question's is, its image
    # kept: before the question, which is shortened only when that alone is not enough.
    counter = TokenCounter.for_model("gpt-4o")
    call = {"name": "get_chart", "args": {"month": "March"}, "id": "c1", "type": "tool_call"}
    question = HumanMessage("What does the sales chart for March show? " + "context " * 150)
    caption = HumanMessage([{"type": "text", "text": "Chart of March. " + "legend " * 200}, IMAGE])
    turn = [
        question,
        AIMessage("", tool_calls=[call]),
        ToolMessage("The chart is attached below.", tool_call_id="c1"),
        caption,
    ]
    whole = counter.count_messages(turn)

    for short, question_whole in [(50, True), (150, True), (300, False)]:
        result = PriorityTrimmer(whole - short, token_counter=counter).trim([*history(8), *turn])

        assert not result.over_budget
        assert (result.messages[0] is question) is question_whole
        sent = result.messages[-1]
        assert sent is not caption and sent.content[-1] == IMAGE
        assert result.decisions[-1].rule == "shortened_to_fit"


def test_the_turn_is_one_round_when_the_next_question_comes() -> None:
    # Once answered, the question, the tool call, its result, the image and the answer are one
    # history round: kept or dropped whole, never the image without its question.
    counter = TokenCounter.for_model("gpt-4o")
    done = [*injected_turn(), AIMessage("March sales doubled.")]
    messages = [*history(8), *done, HumanMessage("And April?")]

    for budget in range(200, 1_300, 50):
        result = PriorityTrimmer(budget, token_counter=counter).trim(messages)
        sent = [m for m in result.messages if any(m is d for d in done)]
        assert sent in ([], done), budget


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
    assert len(bodies.sent) == 3
    # Right after the tool added it, the image is sent with the call that fetched it.
    assert any(_has_image(m) for m in bodies.sent[1]["messages"])
    for body in bodies.sent[1:]:
        sent = body["messages"]
        asked = [m["content"] for m in sent].index(QUESTION)  # the question the image answers
        # and the newest tool call, after the question, with its result
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
