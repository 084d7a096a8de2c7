"""Attacks on a checkpointed agent's history read back as new objects, from the user's side.

The analysis of a conversation is also remembered by value (``_rounds.AnalysisMemo``) and
shortened texts by their type, ids and text (``_shortening.MessageShortener``): a trim of
copies read back must decide exactly as a fresh trimmer does. Each defect found has a test that
failed on 7ed3e51; the others pin what held.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from support.conversations import figures, read_back

from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer


def _two_lookups(first: dict[str, Any], second: dict[str, Any]) -> list[BaseMessage]:
    """A history of two tool calls with these arguments, ids fixed (a thread's, read back)."""
    messages: list[BaseMessage] = [
        SystemMessage("Answer from the records.", id="s"),
        HumanMessage("What do the records say?", id="h"),
    ]
    for n, args in enumerate([first, second]):
        call = {"name": "lookup", "args": args, "id": f"c{n}", "type": "tool_call"}
        messages += [
            AIMessage("", tool_calls=[call], id=f"a{n}"),
            ToolMessage(f"record {n}: " + "shelf " * 30, tool_call_id=f"c{n}", id=f"t{n}"),
        ]
    return [*messages, HumanMessage("And the total?", id="q")]


def _trimmed_alike(seen: list[BaseMessage], then: list[BaseMessage]) -> None:
    """A trimmer that trimmed ``seen`` trims ``then`` as a fresh trimmer does."""
    warm = PriorityTrimmer(3000, token_counter=TokenCounter())
    warm.trim(seen)

    trimmed = warm.trim(then)

    fresh = PriorityTrimmer(3000, token_counter=TokenCounter()).trim(then)
    assert figures(trimmed, then) == figures(fresh, then)
    assert trimmed.message_tokens == fresh.message_tokens


SAME = {"q": "a"}
# Per case, the arguments of both calls as analysed, then as read back: equal (==) in the first
# call, but sent otherwise: each case failed on 7ed3e51, counted as the analysed call was.
SENT_OTHERWISE: dict[str, tuple[dict[str, Any], ...]] = {
    # With the second call's arguments changed too: the change is found, the type before it was
    # taken over.
    "1 then 1.0, a later call changed": ({"n": 1}, {"q": "a"}, {"n": 1.0}, {"q": "a longer one"}),
    # json.dumps writes keys in their order.
    "keys in another order": ({"type": 1, "name": ""}, SAME, {"name": "", "type": 1}, SAME),
    # Sent as str() writes it.
    "a Decimal written otherwise": ({"n": Decimal("1.0")}, SAME, {"n": Decimal("1.00000")}, SAME),
}


@pytest.mark.parametrize("args", SENT_OTHERWISE.values(), ids=SENT_OTHERWISE)
def test_arguments_equal_but_sent_otherwise_are_counted_as_sent(
    args: tuple[dict[str, Any], ...],
) -> None:
    seen_first, seen_second, first, second = args
    _trimmed_alike(_two_lookups(seen_first, seen_second), read_back(_two_lookups(first, second)))
