"""Attacks on what an over-budget trim tells the user (helper attack19).

Defect left, an ``xfail(strict=True)`` test here: when the newest tool call is over the budget
because of what the model wrote in it (a coding agent's ``write_file`` arguments, a long text
beside the call), the warning's fix says "make the tool return less", though the tool returned
three tokens and no tool change can help. Likewise a question whose bulk is its photo is told
"shorten the question", though its four words are all the text there is.
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
    "call",
    [
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
        AIMessage(
            "Here is my plan, step by step: " + SOURCE,
            tool_calls=[{"name": "run_tests", "args": {}, "id": "c1"}],
        ),
    ],
    ids=["arguments", "text_beside_the_call"],
)
@pytest.mark.xfail(
    strict=True,
    reason="an over-budget current tool call whose bulk is the model's own arguments or text is "
    "blamed on the tool's result: the fix says 'make the tool return less'",
)
def test_an_over_budget_tool_call_the_model_wrote_is_not_blamed_on_the_tools_result(
    call: AIMessage,
) -> None:
    result = PriorityTrimmer(1000).trim(turn(call))
    assert result.over_budget  # nothing may be cut: the newest call and its result are kept
    assert result.over_budget_cause is not None and "current tool call" in result.over_budget_cause
    # The result is "File written." (3 tokens): making the tool return less cannot help.
    assert result.over_budget_hint is not None
    assert "return less" not in result.over_budget_hint, result.over_budget_hint


@pytest.mark.xfail(
    strict=True,
    reason="a question over the budget by its image is told to shorten the question: the "
    "hint is per class, not per what takes the tokens",
)
def test_a_question_over_the_budget_by_its_photo_is_not_told_to_shorten_its_text() -> None:
    photo = {"type": "image_url", "image_url": {"url": "https://example.com/receipt.jpg"}}
    question = HumanMessage([{"type": "text", "text": "What is this receipt?"}, photo])
    result = PriorityTrimmer(300).trim([SystemMessage("You read receipts."), question])
    assert result.over_budget  # the photo's 1,105 tokens (of unknown size) alone exceed it
    assert result.over_budget_hint is not None
    assert "shorten the question" not in result.over_budget_hint, result.over_budget_hint
