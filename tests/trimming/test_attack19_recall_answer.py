"""Attacks on the recall tool's answer as the next model call sends it (helper attack19).

Defect left, an ``xfail(strict=True)`` test here: the answer is sized to "a quarter of the
budget's tokens" by its text, and the default tool-result cap is a quarter of the budget by the
message (its framing and call id included), so an answer that fills its room is sent shortened
on the very next call: ``[... 15 tokens removed ...]`` cut into what the model asked to read
back. With these notes, at 4 of the 27 budgets from 300 to 2,900 (steps of 100): the answer
fills its room closely enough at those, the cap's framing then tips it over.
"""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency.trimming import PriorityTrimmer
from agent_latency.trimming._recall import TOOL_NAME, RecallingTrimmer

QUERY = "harbour crane serviced"
CALL_ID = "call_" + "x" * 24  # as long as OpenAI's


def crane_notes() -> list[BaseMessage]:
    """An agent's state (UUID ids): two hundred short notes that all match the query."""
    messages: list[BaseMessage] = [SystemMessage("You run the warehouse.")]
    for i in range(200):
        said = f"Note {i}: the harbour crane {i} was serviced; " + "greased and inspected " * 5
        messages += [
            HumanMessage(said, id=str(uuid.UUID(int=2 * i + 1))),
            AIMessage(f"Noted {i}.", id=str(uuid.UUID(int=2 * i + 2))),
        ]
    return [*messages, HumanMessage(f'Please recall "{QUERY}" notes.', id="question")]


@pytest.mark.parametrize("budget", [400, 1300, 2600])
@pytest.mark.xfail(
    strict=True,
    reason="the answer fills a quarter of the budget by its text; the tool-result cap, a "
    "quarter by the message, then shortens it on the next call",
)
def test_the_recall_tools_answer_reaches_the_model_whole(budget: int) -> None:
    recalling = RecallingTrimmer(PriorityTrimmer(budget))
    messages = crane_notes()
    answer = recalling.read(recalling.left_out(messages), QUERY, conversation=messages)
    # The agent's next call: the model's call of the tool, and the tool's answer.
    call = AIMessage("", tool_calls=[{"name": TOOL_NAME, "args": {"query": QUERY}, "id": CALL_ID}])
    result = recalling.trim(
        [*messages, call, ToolMessage(answer, tool_call_id=CALL_ID, name=TOOL_NAME)]
    )
    sent = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert [m.content for m in sent] == [answer], sent[0].content[-300:]
