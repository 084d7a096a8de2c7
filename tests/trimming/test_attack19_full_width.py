"""Attacks on recall with text typed through a Chinese or Japanese input method (helper attack19).

An IME in full-width mode writes letters and digits as their full-width forms (``ＸＫ７７３１``
for ``XK7731``), which NFKC folds to ASCII; tools and systems write the ASCII forms. The terms
kept the full-width forms apart (``ｘｋ７７３１`` against ``xk7731``; NFD accents and Hangul
were folded, widths were not), so a question naming an order in full width recalled nothing,
and the recall tool found nothing for it, where the same question in ASCII recalls the tool
result that names the order (``xfail(strict=True)`` tests here until 5a2a997: letters and
digits in another shape, widths among them, are now folded to their plain form,
``_relevance._FOLDS``).
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency.trimming import PriorityTrimmer
from agent_latency.trimming._recall import RecallingTrimmer

ORDER = "order XK7731: held at customs in Osaka"


def orders_chat(question: str) -> list[BaseMessage]:
    """120 rounds of shelf notes; round 30 looked the order up with a tool."""
    messages: list[BaseMessage] = [SystemMessage("You help.")]
    for i in range(120):
        if i == 30:
            messages += [
                HumanMessage("Please check the orders.", id="u"),
                AIMessage("", tool_calls=[{"name": "orders", "args": {}, "id": "c1"}], id="c"),
                ToolMessage(ORDER, tool_call_id="c1", id="t"),
                AIMessage("Checked.", id="a"),
            ]
        else:
            said = f"Note {i}: shelf {i} restocked with item-{i * 7} " + "fine " * 20
            messages += [HumanMessage(said, id=f"h{i}"), AIMessage(f"Noted {i}.", id=f"a{i}")]
    return [*messages, HumanMessage(question, id="q")]


def sends_the_order(question: str) -> bool:
    result = PriorityTrimmer(1500).trim(orders_chat(question))
    return any(m.content == ORDER for m in result.messages)


def test_the_order_is_left_out_at_the_cut_and_an_ascii_question_recalls_it() -> None:
    assert not sends_the_order("How is the weather today?")
    assert sends_the_order("Where is XK7731 now?")
    assert sends_the_order("XK7731は今どこ？")


@pytest.mark.parametrize("question", ["Where is ＸＫ７７３１ now?", "ＸＫ７７３１は今どこ？"])
def test_a_question_typed_in_full_width_recalls_what_its_ascii_form_recalls(question: str) -> None:
    assert sends_the_order(question)


def test_the_recall_tool_finds_an_order_named_in_full_width() -> None:
    recalling = RecallingTrimmer(PriorityTrimmer(1500))
    messages = orders_chat("How is the weather today?")
    left_out = recalling.left_out(messages)
    assert recalling.read(left_out, "XK7731", conversation=messages).startswith("[id t]")
    assert recalling.read(left_out, "ＸＫ７７３１", conversation=messages).startswith("[id t]")
