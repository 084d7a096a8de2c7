"""Attacks on what an over-budget trim tells the user (helper attack19).

When the newest tool call was over the budget because of what the model wrote in it (a coding
agent's ``write_file`` arguments, a long text beside the call), the warning's fix said "make the
tool return less", though the tool returned three tokens and no tool change can help. Likewise a
question whose bulk is its photo was told "shorten the question", though its four words are all
the text there is. ``xfail(strict=True)`` tests here until 3359b00: the fix now names what takes
most of the part (``TrimResult._bulk``: the call's arguments, the model's text, the question's
images), and the tool's results or the question's text keep their fix where they take most.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency.trimming import PriorityTrimmer

SOURCE = "def handler(event):\n    return process(event)\n" * 400  # a file the model writes


def turn(call: AIMessage) -> list[BaseMessage]:
    return [
        SystemMessage("You are a coding agent."),
        HumanMessage("Write the handler module."),
        call,
        ToolMessage("File written.", tool_call_id="c1"),
    ]


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (
            AIMessage(
                "",
                tool_calls=[
                    {
                        "name": "write_file",
                        "args": {"path": "handler.py", "content": SOURCE},
                        "id": "c1",
                    }
                ],
            ),
            "tool-call arguments",
        ),
        (
            AIMessage(
                "Here is my plan, step by step: " + SOURCE,
                tool_calls=[{"name": "run_tests", "args": {}, "id": "c1"}],
            ),
            "write less beside its tool calls",
        ),
    ],
    ids=["arguments", "text_beside_the_call"],
)
def test_an_over_budget_tool_call_the_model_wrote_is_not_blamed_on_the_tools_result(
    call: AIMessage, named: str
) -> None:
    result = PriorityTrimmer(1000).trim(turn(call))
    assert result.over_budget  # nothing may be cut: the newest call and its result are kept
    assert result.over_budget_cause is not None and "current tool call" in result.over_budget_cause
    # The result is "File written." (3 tokens): making the tool return less cannot help.
    assert result.over_budget_hint is not None
    assert "return less" not in result.over_budget_hint, result.over_budget_hint
    assert named in result.over_budget_hint, result.over_budget_hint


def test_a_question_over_the_budget_by_its_photo_is_not_told_to_shorten_its_text() -> None:
    photo = {"type": "image_url", "image_url": {"url": "https://example.com/receipt.jpg"}}
    question = HumanMessage([{"type": "text", "text": "What is this receipt?"}, photo])
    result = PriorityTrimmer(300).trim([SystemMessage("You read receipts."), question])
    assert result.over_budget  # the photo's 1,105 tokens (of unknown size) alone exceed it
    assert result.over_budget_hint is not None
    assert "shorten the question" not in result.over_budget_hint, result.over_budget_hint
    assert "images with the question" in result.over_budget_hint, result.over_budget_hint


def test_tool_results_and_a_question_text_that_take_the_room_keep_their_fix() -> None:
    calls = [{"name": "search", "args": {"q": f"q{i}"}, "id": f"c{i}"} for i in range(10)]
    results = [ToolMessage("result text " * 120, tool_call_id=f"c{i}") for i in range(10)]
    searched = PriorityTrimmer(300).trim(
        [SystemMessage("S"), HumanMessage("Search."), AIMessage("", tool_calls=calls), *results]
    )
    assert searched.over_budget_hint == "make the tool return less, or raise the budget"
    photo = {"type": "image_url", "image_url": {"url": "https://example.com/receipt.jpg"}}
    long_text = {"type": "text", "text": "Explain every line of this receipt in detail. " * 300}
    asked = PriorityTrimmer(300).trim([SystemMessage("S"), HumanMessage([long_text, photo])])
    assert asked.over_budget_hint == "shorten the question, or raise the budget"
