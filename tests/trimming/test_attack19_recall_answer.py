"""Attacks on the recall tool's answer as the next model call sends it (helper attack19).

The answer was sized to "a quarter of the budget's tokens" by its text, and the default
tool-result cap is a quarter of the budget by the message (its framing and call id included),
so an answer that filled its room was sent shortened on the very next call: ``[... 15 tokens
removed ...]`` cut into what the model asked to read back. With these notes, at 4 of the 27
budgets from 300 to 2,900 (steps of 100): the answer filled its room closely enough at those,
the cap's framing then tipped it over (an ``xfail`` here until 7f9ff5f). Now the answer is sized
to the cap itself (``tool_result_cap``), less its message's framing with the call's id; the
cases through the hook check a cap set below a quarter, a cap whose room a message's id line
outgrows, and a long call id.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency.trimming import PriorityTrimmer
from agent_latency.trimming._recall import TOOL_NAME, RecallingTrimmer

QUERY = "harbour crane serviced"
CALL_ID = "call_" + "x" * 24  # as long as OpenAI's


def crane_notes(ids: Callable[[int], uuid.UUID] = lambda n: uuid.UUID(int=n)) -> list[BaseMessage]:
    """An agent's state (UUID ids): two hundred short notes that all match the query."""
    messages: list[BaseMessage] = [SystemMessage("You run the warehouse.")]
    for i in range(200):
        said = f"Note {i}: the harbour crane {i} was serviced; " + "greased and inspected " * 5
        messages += [
            HumanMessage(said, id=str(ids(2 * i + 1))),
            AIMessage(f"Noted {i}.", id=str(ids(2 * i + 2))),
        ]
    return [*messages, HumanMessage(f'Please recall "{QUERY}" notes.', id="question")]


def random_looking(n: int) -> uuid.UUID:
    """A UUID as random as uuid4's (some 30 tokens, where ``UUID(int=n)``'s zeros take few)."""
    return uuid.uuid5(uuid.NAMESPACE_OID, str(n))


@pytest.mark.parametrize("budget", [400, 1300, 2600])
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


@pytest.mark.parametrize(
    ("budget", "cap", "call_id"),
    [
        (2600, 200, CALL_ID),  # a cap set below a quarter of the budget
        (2600, 64, "call_wJmNnJqTmBpk7eQfS6fKfBz1"),  # one whose room a message's head outgrows
        (400, None, "-".join(str(random_looking(n)) for n in range(2))),  # a long call id
    ],
    ids=["cap below budget/4", "head over the room", "long call id"],
)
def test_the_answer_fits_the_cap_the_hook_applies_with_its_calls_id(
    budget: int, cap: int | None, call_id: str
) -> None:
    # Through the pre-model hook, which knows the call's id: the answer is sized to the cap as
    # the tool's message with that id is counted, whatever the cap and however long the id.
    hook = PriorityTrimmer(budget, max_tool_result_tokens=cap).as_pre_model_hook()
    call = AIMessage("", tool_calls=[{"name": TOOL_NAME, "args": {"query": QUERY}, "id": call_id}])
    messages = [*crane_notes(random_looking), call]
    answer = hook.read_back(messages, call_id, QUERY)
    assert answer.startswith("[id ") or " more matched: " in answer, answer  # read, or listed
    reply = ToolMessage(answer, tool_call_id=call_id, name=TOOL_NAME)
    sent = hook({"messages": [*messages, reply]})["llm_input_messages"]
    assert [m.content for m in sent if isinstance(m, ToolMessage)] == [answer]
