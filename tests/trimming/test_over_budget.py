"""When what no trim removes overflows, and when a drop would cost more than it saves.

The latest question is the one thing the model is called to answer: it is shortened only when
that makes the request fit, never below the 32-token floor in any language, and otherwise sent
whole with ``over_budget`` saying what overflows. A drop is planned with the
framing of what will be sent: Qwen's, Qwen 2.5's and SmolLM2's templates add a default system
turn when the first message sent is not a system message.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer
from agent_latency.trimming._shortening import MIN_SHORTENED_TOKENS

QWEN = TokenCounter.for_model("qwen-7b-chat")
QUESTIONS = {
    "en": (
        "Please confirm: when will my order A2-7781 ship, and to which address in Berlin? "
        "I moved last week, so please check the new address too."
    ),
    "zh": "请确认：我的订单A2-7781什么时候发货，送到柏林的哪个地址？请尽快告诉我具体的日期和时间。",
}


def mcp_tools(count: int = 30) -> list[dict[str, object]]:
    """MCP-style tool definitions: a name, a long description and a few documented parameters."""
    described = "Looks up records in the order system and returns them as JSON. " * 3
    return [
        {
            "type": "function",
            "function": {
                "name": f"orders_tool_{n}",
                "description": described,
                "parameters": {
                    "type": "object",
                    "properties": {
                        "order_id": {"type": "string", "description": "The order's id."},
                        "fields": {"type": "array", "items": {"type": "string"}},
                        "region": {"type": "string", "description": "Where it ships from."},
                    },
                    "required": ["order_id"],
                },
            },
        }
        for n in range(count)
    ]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_tools_over_the_budget_leave_the_question_whole_and_say_so(language: str) -> None:
    tools = mcp_tools()
    assert QWEN.count_tools(tools) > 3000  # the tool definitions alone overflow the budget
    question = HumanMessage(QUESTIONS[language])
    messages: list[BaseMessage] = [SystemMessage("You track orders."), question]

    result = PriorityTrimmer(3000, token_counter=QWEN, tools=tools).trim(messages)

    assert result.messages[-1] is question  # "A2-7781" and "Berlin" still in it
    assert result.decisions[-1].action == "kept"
    assert result.over_budget
    cause = result.over_budget_cause or ""
    assert cause.startswith("tool definitions:")
    assert "the latest user message (sent whole)" in cause
    assert result.over_budget_reason == "fixed_part"
    assert result.span_attributes()["agent_latency.trim.over_budget_reason"] == "fixed_part"


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_question_is_shortened_only_when_that_makes_the_request_fit(language: str) -> None:
    question = HumanMessage(QUESTIONS[language] * 4)
    size = QWEN.count_message(question)
    framing = QWEN.count_framing([question])

    fits = PriorityTrimmer(framing + size - 20, token_counter=QWEN).trim([question])
    cannot = PriorityTrimmer(framing + MIN_SHORTENED_TOKENS - 1, token_counter=QWEN).trim(
        [question]
    )

    assert fits.decisions[0].action == "shortened" and not fits.over_budget
    assert cannot.messages == [question] and cannot.over_budget


def test_a_chinese_question_is_never_shortened_below_the_floor() -> None:
    # Before: 37 -> 31 tokens: a cut inside a rare character lost a token under the floor.
    question = HumanMessage(
        "请确认：我的订单龘齉爩麤什么时候送到，送到柏林的哪个地址？饕餮魑魅魍魉的包裹编号是多少？"
    )
    framing = QWEN.count_framing([question])

    result = PriorityTrimmer(framing + MIN_SHORTENED_TOKENS, token_counter=QWEN).trim([question])

    decision = result.decisions[0]
    assert decision.tokens > MIN_SHORTENED_TOKENS
    assert decision.action == "kept" or decision.tokens_after >= MIN_SHORTENED_TOKENS


@pytest.mark.parametrize("model", ["qwen-7b-chat", "qwen2.5-7b-instruct", "smollm2-135m-instruct"])
def test_dropping_the_system_message_is_planned_with_the_default_system_turn(model: str) -> None:
    counter = TokenCounter.for_model(model)
    messages: list[BaseMessage] = [
        SystemMessage("Be brief."),
        HumanMessage("Which warehouse ships to Berlin? " * 3),
        AIMessage("The Lyra warehouse ships to Berlin. " * 3),
        HumanMessage("And its door code?"),
    ]
    whole = counter.count_messages(messages)
    without_system = counter.count_messages(messages[1:])
    assert without_system > whole  # the default system turn outweighs "Be brief."

    result = PriorityTrimmer(
        whole - 1,
        token_counter=counter,
        keep_system=False,
        priority_order=("latest_user", "tool_result", "history", "system"),  # system goes first
        prefix_stable=False,
    ).trim(messages)

    assert not result.over_budget
    assert result.messages[0] is messages[0]  # the system message kept, a history round dropped
    assert result.tokens_after == counter.count_messages(result.messages) <= whole - 1
    assert result.framing_tokens == counter.count_framing(result.messages)
