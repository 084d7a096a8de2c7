"""The caches that make a warm trim cheap never change what a trim decides.

A trimmer reused across an agent loop remembers each conversation (counts, texts, units and what
is derived from them); a token counter remembers each message's count. Every test here edits or
rearranges a conversation between two trims with the same trimmer, and checks the second trim
against a new trimmer and counter that remember nothing.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency.tokens import TokenCounter
from agent_latency.trimming._rounds import AnalysisMemo, analysis
from agent_latency.trimming._trimmer import PriorityTrimmer, TrimResult

BUDGET = 400


def calls(*ids: str, name: str = "search") -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": {"q": i}, "id": i} for i in ids])


def result(call_id: str, words: int, word: str = "data") -> ToolMessage:
    return ToolMessage(" ".join([word] * words), tool_call_id=call_id)


def conversation() -> list[BaseMessage]:
    """Five rounds of a question, two tool steps and an answer; about 1,500 tokens.

    Round ``n`` starts at index ``1 + 7 * n``: the question, a call with two results, a call with
    one result, the answer. The third question has list content.
    """
    messages: list[BaseMessage] = [SystemMessage("You answer questions about the warehouse.")]
    for n in range(5):
        question = f"Question {n} about the Lyra warehouse door code and billing."
        messages += [
            HumanMessage([{"type": "text", "text": question}] if n == 2 else question),
            calls(f"a{n}", f"b{n}"),
            result(f"a{n}", 60, "door"),
            result(f"b{n}", 60, "billing"),
            calls(f"c{n}"),
            result(f"c{n}", 80),
            AIMessage(f"Answer {n}: the code is {n}{n}{n}."),
        ]
    return messages


def figures(trim: TrimResult, inputs: list[BaseMessage]) -> dict[str, Any]:
    """Everything a trim decided, with kept messages by their input position."""
    position = {id(m): i for i, m in enumerate(inputs)}
    return {
        "messages": [position.get(id(m), m.content) for m in trim.messages],
        "decisions": trim.decisions,
        "tokens_before": trim.tokens_before,
        "tokens_after": trim.tokens_after,
        "question_retention": trim.question_retention,
    }


def fresh(messages: list[BaseMessage], **options: Any) -> dict[str, Any]:
    trimmer = PriorityTrimmer(BUDGET, token_counter=TokenCounter(), **options)
    return figures(trimmer.trim(messages), messages)


def _edit_arguments(m: list[BaseMessage]) -> list[BaseMessage]:
    m[9].tool_calls[0]["args"]["q"] = "a much longer query " * 30  # type: ignore[attr-defined]
    return m


def _edit_call_id(m: list[BaseMessage]) -> list[BaseMessage]:
    m[10].tool_call_id = "answers_nothing"  # type: ignore[attr-defined]
    return m


def _add_call_in_place(m: list[BaseMessage]) -> list[BaseMessage]:
    # An answer becomes a tool call; the next message (a question) stays, so the call is left
    # unanswered: the unit is the call alone.
    m[7].tool_calls.append({"name": "search", "args": {"q": "x"}, "id": "late"})  # type: ignore[attr-defined]
    return m


def _edit_content(m: list[BaseMessage]) -> list[BaseMessage]:
    m[3].content = " ".join(["door"] * 400)
    return m


def _edit_list_content(m: list[BaseMessage]) -> list[BaseMessage]:
    m[15].content[0]["text"] = "door " * 300  # type: ignore[index]
    return m


def _replace_last(m: list[BaseMessage]) -> list[BaseMessage]:
    return [*m[:-1], AIMessage("A different last answer about billing.")]


def _remove_middle(m: list[BaseMessage]) -> list[BaseMessage]:
    return m[:8] + m[15:]


def _reuse_call_ids(m: list[BaseMessage]) -> list[BaseMessage]:
    # Some servers number calls per response ("call_0" every time): the latest issuer wins.
    return [*m[:-1], calls("a0"), result("a0", 30)]


EDITS: dict[str, Callable[[list[BaseMessage]], list[BaseMessage]]] = {
    "tool call arguments edited in place": _edit_arguments,
    "tool_call_id edited in place": _edit_call_id,
    "tool call appended in place": _add_call_in_place,
    "content set anew": _edit_content,
    "text part edited in place": _edit_list_content,
    "last message replaced": _replace_last,
    "messages removed from the middle": _remove_middle,
    "tool call ids reused": _reuse_call_ids,
}


@pytest.mark.parametrize(
    "selection",
    [{}, {"history_selection": "age"}, {"prefix_stable": False}],
    ids=["cache_first", "age", "ranked"],  # ranked: the history by relevance on every call
)
@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_a_reused_trimmer_decides_like_a_new_one_after_an_edit(
    edit: Callable[[list[BaseMessage]], list[BaseMessage]], selection: dict[str, Any]
) -> None:
    messages = conversation()
    trimmer = PriorityTrimmer(BUDGET, token_counter=TokenCounter(), **selection)
    trimmer.trim(messages)
    trimmer.trim([*messages, AIMessage("an extra message")])  # remembered longer than the next

    edited = edit(messages)

    assert figures(trimmer.trim(edited), edited) == fresh(edited, **selection)


def test_a_tool_call_id_edited_in_place_makes_an_orphan() -> None:
    messages = conversation()
    trimmer = PriorityTrimmer(10_000, token_counter=TokenCounter())
    assert trimmer.trim(messages).dropped_messages == 0

    messages[10].tool_call_id = "answers_nothing"  # type: ignore[attr-defined]

    trim = trimmer.trim(messages)
    assert trim.decisions[10].rule == "orphan_tool_result"
    assert trim.tokens_before == fresh(messages)["tokens_before"]


def test_counter_recounts_a_tool_call_id_edited_in_place() -> None:
    counter = TokenCounter()
    message = ToolMessage("result", tool_call_id="c")
    short = counter.count_message(message)

    message.tool_call_id = "a_much_longer_tool_call_identifier_" * 5

    assert counter.count_message(message) == TokenCounter().count_message(message) > short


def test_counter_recounts_a_tool_call_added_to_an_empty_list_in_place() -> None:
    counter = TokenCounter()
    message = AIMessage("calling")
    before = counter.count_message(message)

    message.tool_calls.append({"name": "search", "args": {"q": "data " * 20}, "id": "c"})

    assert counter.count_message(message) == TokenCounter().count_message(message) > before


def test_conversation_cache_matches_a_fresh_analysis_on_random_agent_loops() -> None:
    rng = random.Random(11)
    counter = TokenCounter()
    cache = AnalysisMemo(counter)
    base = conversation()
    for _ in range(200):
        messages = list(base)
        if rng.random() < 0.5:
            messages = messages[: rng.randrange(len(messages) + 1)]
        if rng.random() < 0.3 and messages:
            del messages[rng.randrange(len(messages))]
        if rng.random() < 0.5:
            ids = [f"x{rng.randrange(3)}", f"a{rng.randrange(5)}"]
            messages += [calls(*ids), *(result(i, rng.randrange(1, 20)) for i in ids)]

        facts, _ = cache.analyse(messages)

        assert facts.counts == [TokenCounter().count_message(m) for m in messages]
        assert facts.texts == [m.text for m in messages]
        # units and what they give (a fresh analysis is a grouping of another generation)
        assert facts._replace(generation=0) == analysis(TokenCounter(), messages)._replace(
            generation=0
        )
