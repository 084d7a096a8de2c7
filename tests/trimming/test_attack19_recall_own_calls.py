"""Attacks on what the recall tool reads back (helper attack19).

docs/trimming.md: the tool's "own earlier calls and answers are not read back (they hold the
words of earlier queries, not what was said)". An earlier call the model made with a line of
text beside it ("Let me look that up.", as models often write) was read back, first, as
``[id call1] ai: Let me look that up. (called recall({"query": "database port"}))``, since only
calls with no text were left out (``_without_recalls``): the words of the earlier query
outranked what was said (an ``xfail`` here until dd68b8f). Now such a message reads as a copy
without its recall calls, its text and other calls kept.
"""

from __future__ import annotations

from typing import Any

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
    # What was said is read (the earlier question first: it is newer and holds the same words
    # of the query), and the tool's own earlier call is not.
    assert answer.startswith("[id q1] human: Which database port again?\n[id fact]"), answer
    assert "[id call1]" not in answer


SAID = "The crane's hydraulic pump leaks; checking the logs."
CALLS = [
    {"name": TOOL_NAME, "args": {"query": "hydraulic pump"}, "id": "r0"},
    {"name": "read_log", "args": {"unit": "hydraulic pump"}, "id": "l0"},
]


@pytest.mark.parametrize(
    "content",
    [
        SAID,
        # Anthropic's form: the calls are also parts of the content.
        [
            {"type": "text", "text": SAID},
            *(
                {"type": "tool_use", "name": c["name"], "input": c["args"], "id": c["id"]}
                for c in CALLS
            ),
        ],
    ],
    ids=["text", "tool_use parts"],
)
def test_the_models_text_and_other_calls_beside_a_recall_call_are_still_read_back(
    content: str | list[str | dict[str, Any]],
) -> None:
    # The model wrote what it found beside its calls: that is what was said, the recall call not.
    messages: list[BaseMessage] = [
        SystemMessage("You run operations."),
        HumanMessage("Check the crane and tell me what you find.", id="q0"),
        AIMessage(content, tool_calls=CALLS, id="call0"),
        ToolMessage("Nothing was left out.", tool_call_id="r0", name=TOOL_NAME, id="ans0"),
        ToolMessage("pump serviced in May", tool_call_id="l0", name="read_log", id="log0"),
        AIMessage("Logged.", id="done0"),
        *notes(0, 20),
        HumanMessage('Please recall "hydraulic pump".', id="q1"),
    ]
    recalling = RecallingTrimmer(PriorityTrimmer(600))
    left_out = recalling.left_out(messages)
    assert {"call0", "ans0"} <= {m.id for m in left_out}
    answer = recalling.read(left_out, "hydraulic pump", conversation=messages)
    parts = "" if isinstance(content, str) else "[tool_use] "  # read_log's part
    assert answer.startswith(
        f'[id call0] ai: {parts}{SAID} (called read_log({{"unit": "hydraulic pump"}}))'
    ), answer
    assert "recall(" not in answer and "[id ans0]" not in answer
