"""Attacks on the stale-correction case (helper attack19).

The rule tests/trimming/test_cache_first.py holds for a short correction: the old value is
never sent without the correction, at any budget (docs/trimming.md: "a correction is kept before
what it corrects, however short the old statement was"). Defects left, ``xfail(strict=True)``
tests here, where the correction is not a short message of its own:

* said inside a long user message (an update covering many things), the correction's round is
  dropped and the one-line old statement kept: at 85 of the 145 budgets from 150 to 1,590
  (steps of 10);
* returned in a tool result (a config dump read after the statement), the result is sent
  shortened to its head and tail, which cuts out the corrected line, beside the old statement:
  at 106 of them, up to 34 tokens short of the whole conversation.

Either way the model reads only the stale value. A re-correction and a correction the assistant
states hold the rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer

COUNTER = TokenCounter()
OLD, NEW, NEWEST = "5432", "6543", "7654"


def corrected_chat(
    correction: Sequence[BaseMessage], *, then: Sequence[BaseMessage] = ()
) -> list[BaseMessage]:
    """Twenty rounds: the old port in round 4, ``correction`` as round 15, ``then`` as 18."""
    messages: list[BaseMessage] = [SystemMessage("You are a helpful assistant. Answer briefly.")]
    for n in range(20):
        if n == 4:
            messages += [HumanMessage(f"The database port is {OLD}."), AIMessage("Noted.")]
        elif n == 15:
            messages += correction
        elif n == 18 and then:
            messages += then
        else:
            chore = f"Round {n}: please tidy the changelog entry number {n} for the release notes."
            messages += [HumanMessage(chore), AIMessage(f"Done with item {n}; noted.")]
    return [*messages, HumanMessage("What is the database port?")]


IN_A_LONG_MESSAGE = [
    HumanMessage(
        "Big infra update. "
        + " ".join(f"Service s{i} moved to rack {i}." for i in range(60))
        + f" Correction: the database port is now {NEW}, we moved it. "
        + " ".join(f"Queue q{i} drained." for i in range(60))
    ),
    AIMessage("Noted."),
]
IN_A_TOOL_RESULT = [
    HumanMessage("Check the live config please."),
    AIMessage("", tool_calls=[{"name": "get_config", "args": {}, "id": "c1"}]),
    ToolMessage(
        "\n".join(
            [f"key_{i} = value_{i}" for i in range(40)]
            + [f"database port = {NEW}"]
            + [f"opt_{i} = on" for i in range(40)]
        ),
        tool_call_id="c1",
    ),
    AIMessage("The live config is loaded."),
]


def sent_text(budget: int, chat: list[BaseMessage]) -> str:
    result = PriorityTrimmer(budget, token_counter=COUNTER).trim(chat)
    assert result.tokens_after <= budget
    return " ".join(str(m.content) for m in result.messages)


@pytest.mark.parametrize("budget", [300, 600, 900])
@pytest.mark.xfail(
    strict=True,
    reason="a correction inside a long message: its round is dropped and the old statement "
    "kept, so the stale value is sent alone",
)
def test_a_correction_inside_a_long_message_is_never_outlived_by_what_it_corrects(
    budget: int,
) -> None:
    sent = sent_text(budget, corrected_chat(IN_A_LONG_MESSAGE))
    assert NEW in sent or OLD not in sent


@pytest.mark.parametrize("budget", [300, 700, 1200])
@pytest.mark.xfail(
    strict=True,
    reason="a correction in a tool result: the result is shortened to its head and tail, "
    "cutting the corrected line, beside the old statement",
)
def test_a_correction_a_tool_returned_is_never_outlived_by_what_it_corrects(budget: int) -> None:
    sent = sent_text(budget, corrected_chat(IN_A_TOOL_RESULT))
    assert NEW in sent or OLD not in sent


@pytest.mark.parametrize("budget", range(150, 1600, 50))
def test_a_re_correction_and_an_assistants_correction_hold_the_rule(budget: int) -> None:
    recorrected = corrected_chat(
        [HumanMessage(f"Correction: the database port is now {NEW}."), AIMessage("Noted.")],
        then=[
            HumanMessage(f"Correction again: the database port is now {NEWEST}."),
            AIMessage("Ok."),
        ],
    )
    sent = sent_text(budget, recorrected)
    assert NEWEST in sent or (OLD not in sent and NEW not in sent)
    by_the_assistant = corrected_chat(
        [
            HumanMessage("Did anything change in infra?"),
            AIMessage(f"Yes: correction, the database port is now {NEW}, we moved it."),
        ]
    )
    sent = sent_text(budget, by_the_assistant)
    assert NEW in sent or OLD not in sent
