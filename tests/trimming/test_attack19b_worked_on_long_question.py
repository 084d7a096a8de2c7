"""Attack on db7506a (helper attack19b): a user who writes while a tool runs keeps what the agent
was working on: the call, its results and the question it was made for are must-keep
(``_plan._worked_on``).

The question made must-keep is kept whole. A user who pasted a report (1,650 tokens) and asked
for a summary, then wrote "Hurry up please." while the tool ran, gets a 1,707-token request at
every budget from 300 to 1,200: over the budget by up to 1,400 tokens (a provider refuses a
request over its context window), and the hint says "make the tool return less", of a 5-token
result. The same question as the latest user message is shortened to fit
(``shorten_must_keep``: test_turn_and_fallback_attack's long question), and with the user's text
after the result the request fits by leaving the finished turn out.

Fixed: the questions worked on (``Plan.worked_on``) are shortened as the user messages of
``Plan.asked`` are, before the latest question.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from support.conversations import shelf_notes

from agent_latency import PriorityTrimmer
from agent_latency.tokens import TokenCounter

COUNTER = TokenCounter.for_model("gpt-4o")
REPORT = "The quarterly numbers rose in several regions while costs fell. " * 150


def _call(name: str, call_id: str) -> dict[str, Any]:
    return {"name": name, "args": {}, "id": call_id, "type": "tool_call"}


def conversation() -> list[BaseMessage]:
    """A pasted report and a question, a tool call for it, the user's text while it ran, and
    its late result."""
    return [
        SystemMessage("Be brief."),
        *shelf_notes(4),
        HumanMessage(f"Here is the report: {REPORT} Summarise the lamp sales."),
        AIMessage("", tool_calls=[_call("get_sales", "c1")]),
        HumanMessage("Hurry up please."),
        ToolMessage("Lamp sales rose 12%.", tool_call_id="c1"),
    ]


# Failed before the questions worked on were shortened as what the turn asks is.
@pytest.mark.parametrize("budget", [500, 800, 1_200])
def test_attack19b_a_long_question_worked_on_is_shortened_to_fit(budget: int) -> None:
    messages = conversation()
    result = PriorityTrimmer(budget, token_counter=COUNTER).trim(messages)
    assert messages[-1] in result.messages and messages[-2] in result.messages
    assert not result.over_budget, (result.tokens_after, result.over_budget_hint)
