"""Attack on 746b82b (helper attack19b): the recall tool finds the ids a query names however
the model writes them (``_recall._named_ids``).

With short ids (a chat store's row numbers: ``"1"``, ``"2"``, ...), any number in the query is
read as an id, and the messages it names come before every word match. A model that passes the
user's question as its query (``Which shelf holds the lamps in aisle 3?``) gets message ``3``
read back first, an unrelated note about chairs, and at a tool-result cap of 150 tokens that is
all it gets: the note that answers the question (shelf 24, lamps, aisle 3) is only listed by id.
Before 746b82b, ``3?`` was no id (only whitespace-separated words were); a bare ``3`` was, so the
query without its question mark fails in the same way, before and now.

Fixed: an id that is a plain number or word names a message in prose only where the query says
so (``[id 3]``, ``id 3``), or when the query names nothing else (``3, 5``).
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from agent_latency import PriorityTrimmer
from agent_latency.tokens import TokenCounter
from agent_latency.trimming._recall import _named_ids

COUNTER = TokenCounter.for_model("gpt-4o")
GOODS = ["lamps", "chairs", "desks", "rugs"]


def conversation() -> list[BaseMessage]:
    """Forty shelf notes with numbered ids, then a question whose call asked recall."""
    messages: list[BaseMessage] = []
    for i in range(40):
        said = f"Shelf {i} holds {GOODS[i % 4]} in aisle {i % 7}. " + "more words " * 20
        messages += [
            HumanMessage(said, id=str(2 * i + 1)),
            AIMessage(f"Noted shelf {i}.", id=str(2 * i + 2)),
        ]
    recall = {"name": "recall", "args": {"query": "x"}, "id": "call_1", "type": "tool_call"}
    return [
        *messages,
        HumanMessage("Which shelf holds the lamps in aisle 3?"),
        AIMessage("", tool_calls=[recall]),
    ]


# Failed before plain ids (numbers, words) in prose stopped naming messages.
@pytest.mark.parametrize(
    "query",
    ["Which shelf holds the lamps in aisle 3?", "lamps in aisle 3."],
)
def test_attack19b_a_number_in_a_recall_query_is_not_a_message_id(query: str) -> None:
    trimmer = PriorityTrimmer(1_500, token_counter=COUNTER, max_tool_result_tokens=150)
    answer = trimmer.as_pre_model_hook().read_back(conversation(), "call_1", query)
    assert "Shelf 24 holds lamps in aisle 3." in answer  # message 49, the one that answers
    assert not answer.startswith("[id 3]")


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("[id 3] and [id 5]", {"3", "5"}),  # as the tool writes them
        ("3, 5", {"3", "5"}),  # nothing but ids
        ("read id 3 back", {"3"}),
        ("read id 30 back", {"30"}),  # not the 3 it begins with
        ("lamps in aisle 3", set()),
    ],
)
def test_a_plain_id_is_named_where_the_query_says_so_or_names_nothing_else(
    query: str, named: set[str]
) -> None:
    messages = [HumanMessage(f"note {n}", id=str(n)) for n in range(1, 41)]
    assert _named_ids(query, messages) == named
