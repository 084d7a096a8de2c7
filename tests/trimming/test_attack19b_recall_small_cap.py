"""Attack on 7f9ff5f / a9ac15b (helper attack19b): the recall tool's answer is sized to the
tool-result cap, its call id counted.

With a small ``max_tool_result_tokens`` (the option allows 32 and up; a user keeping tool
results short on a large budget), the room left for the answer goes to the note on what else
matched, reserved before anything is read back:

- asked for one message by its id (as the elision marker and the note invite), at a cap of 50 the
  answer reads nothing back and says ``(1 more matched: ask with more precise words or by id.)
  Their ids: <the very id asked for>``: the model asks again and gets the same answer;
- at a cap of 40 or 50, with a UUID call id (LangChain makes those for some providers), the
  answer, a note alone (``(68 more matched: ask with more precise words or by id.)``), is longer
  than the cap it was sized for, so the next call sends it shortened.

Before 7f9ff5f the answer had a quarter of the budget (375 tokens here) and read the message
back. Likely cause: ``_recall.RecallingTrimmer._within_limit`` reserves the note's room on all
the chosen messages before the best one is read (its passage fallback then has less than its id
line), and the note itself is not held to ``room``.
"""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agent_latency import PriorityTrimmer
from agent_latency.tokens import TokenCounter

COUNTER = TokenCounter.for_model("gpt-4o")
CALL_ID = "call_" + "x" * 24  # as long as OpenAI's


def conversation() -> list[BaseMessage]:
    """Forty door codes (UUID ids, as an agent's), then a question whose model call asked the
    recall tool."""
    messages: list[BaseMessage] = []
    for i in range(40):
        messages += [
            HumanMessage(
                f"The harbour door code for site {i} is {1000 + i}. " + "more words " * 20,
                id=str(uuid.UUID(int=2 * i + 1)),
            ),
            AIMessage(f"Noted the code for site {i}.", id=str(uuid.UUID(int=2 * i + 2))),
        ]
    recall = {"name": "recall", "args": {"query": "x"}, "id": CALL_ID, "type": "tool_call"}
    return [
        *messages,
        HumanMessage("What is the harbour door code of site 39?"),
        AIMessage("", tool_calls=[recall]),
    ]


def answer(cap: int, query: str, call_id: str = CALL_ID) -> str:
    trimmer = PriorityTrimmer(1_500, token_counter=COUNTER, max_tool_result_tokens=cap)
    messages = conversation()
    recall = {"name": "recall", "args": {"query": query}, "id": call_id, "type": "tool_call"}
    messages[-1] = AIMessage("", tool_calls=[recall])
    return trimmer.as_pre_model_hook().read_back(messages, call_id, query)


@pytest.mark.xfail(
    strict=True,
    reason="at a tool-result cap of 50, recall by id reads nothing back and tells the model to "
    "ask by the id it asked by",
)
def test_attack19b_recall_by_id_at_a_small_cap_reads_the_message_back() -> None:
    asked = str(uuid.UUID(int=5))  # site 2's code, left out
    said = answer(50, asked)
    assert said.startswith(f"[id {asked}] human: The harbour door code")


@pytest.mark.xfail(
    strict=True,
    reason="at a tool-result cap of 40 or 50 with a UUID call id the recall answer (a note "
    "alone) is longer than the cap, so the next call sends it shortened",
)
@pytest.mark.parametrize("cap", [40, 50])
def test_attack19b_recall_answer_fits_a_small_cap(cap: int) -> None:
    call_id = "9d6f3a2e-41b7-4c8a-b3e5-0f7c2d91a6e4"  # LangChain makes UUIDs for some providers
    said = answer(cap, "harbour door code", call_id)
    sent = ToolMessage(said, tool_call_id=call_id, name="recall")
    assert COUNTER.count_message(sent) <= cap
