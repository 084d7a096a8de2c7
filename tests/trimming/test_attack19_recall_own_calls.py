"""Attacks on what the recall tool reads back (helper attack19).

docs/trimming.md: the tool's "own earlier calls and answers are not read back (they hold the
words of earlier queries, not what was said)". Defect left, an ``xfail(strict=True)`` test
here: an earlier call the model made with a line of text beside it ("Let me look that up.", as
models often write) is read back, first, as ``[id call1] ai: Let me look that up. (called
recall({"query": "database port"}))``, since only calls with no text are left out
(``_without_recalls``): the words of the earlier query outrank what was said.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency.trimming import PriorityTrimmer
from agent_latency.trimming._recall import TOOL_NAME, RecallingTrimmer


def notes(first: int, last: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for i in range(first, last):
        said = f"Note {i}: the shelves were restocked " + "ok " * 30
        messages += [HumanMessage(said, id=f"h{i}"), AIMessage(f"Noted {i}.", id=f"a{i}")]
    return messages


@pytest.mark.xfail(
    strict=True,
    reason="a recall call with text beside it is read back by the next recall: only calls "
    "without text are left out of what it reads",
)
def test_the_recall_tool_never_reads_back_its_own_earlier_call_made_with_text() -> None:
    fact = "The database port is 5432, on host db-7."
    messages: list[BaseMessage] = [
        SystemMessage("You run operations."),
        *notes(0, 3),
        HumanMessage(fact, id="fact"),
        AIMessage("Noted.", id="ack"),
        *notes(3, 10),
        HumanMessage("Which database port again?", id="q1"),
        AIMessage(
            "Let me look that up in our earlier messages.",
            tool_calls=[{"name": TOOL_NAME, "args": {"query": "database port"}, "id": "r1"}],
            id="call1",
        ),
        ToolMessage(f"[id fact] human: {fact}", tool_call_id="r1", name=TOOL_NAME, id="ans1"),
        AIMessage("It is 5432.", id="said1"),
        *notes(10, 20),
        HumanMessage('Please recall "database port".', id="q2"),
    ]
    recalling = RecallingTrimmer(PriorityTrimmer(600))
    left_out = recalling.left_out(messages)
    assert {"fact", "call1", "ans1"} <= {m.id for m in left_out}
    answer = recalling.read(left_out, "database port", conversation=messages)
    assert answer.startswith("[id fact]"), answer  # what was said comes first...
    assert "[id call1]" not in answer  # ...and the tool's own earlier call is not read back
