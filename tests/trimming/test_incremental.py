"""A growing conversation's trim reads what the analysis kept, and decides as a fresh trim does.

The analysis of a conversation (``_rounds.AnalysisMemo``) is extended by the new messages only,
with the classes, rounds and round owners a trim needs; the plan reads its history rounds from
it (:meth:`Plan.history_rounds`). Random growing conversations with random edits in place check
both against what is worked out afresh: a new trimmer's decisions, and the rounds walked from the
units (as ``_cache_first`` walked them).
"""

from __future__ import annotations

from itertools import compress
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from support.conversations import GrowingConversation, figures, read_back, same_facts

from agent_latency.tokens import TokenCounter
from agent_latency.trimming._options import TrimOptions
from agent_latency.trimming._plan import Plan, cap_tool_results, classify, mark_kept
from agent_latency.trimming._rounds import AnalysisMemo, analysis
from agent_latency.trimming._shortening import MessageShortener
from agent_latency.trimming._trimmer import PriorityTrimmer


@pytest.mark.parametrize(
    "selection",
    [
        {"history_selection": "cache_first"},
        {"prefix_stable": False},  # the history ranked by relevance on every call
        {"history_selection": "age"},
    ],
    ids=["cache_first", "ranked", "age"],
)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("read_back_mostly", [False, True], ids=["kept", "read back"])
def test_a_growing_conversation_edited_in_place_is_trimmed_as_a_fresh_trimmer_trims_it(
    seed: int, selection: dict[str, Any], read_back_mostly: bool
) -> None:
    # Read back: new objects equal to the conversation kept (a checkpointed agent's new turn),
    # every fourth call the same objects again (a tool loop within a turn); an edit in place of
    # the conversation kept makes the next copy differ by value from what was analysed.
    conversation = GrowingConversation(seed)
    options: dict[str, Any] = {**selection, "compact_tool_results": seed % 2 == 1}
    warm = PriorityTrimmer(500, token_counter=TokenCounter(), **options)
    for call in range(120):
        conversation.grow()
        if call % 5 == 4:
            conversation.edit()
        messages = list(conversation.messages)
        if read_back_mostly and call % 4:
            messages = read_back(messages)
        fresh = PriorityTrimmer(500, token_counter=TokenCounter(), **options)

        expected = figures(fresh.trim(messages), messages)

        assert figures(warm.trim(messages), messages) == expected, call


def _plan(messages: list[BaseMessage], memo: AnalysisMemo, counter: TokenCounter) -> Plan:
    """A plan classified and marked, its large tool results shortened (as a trim starts)."""
    plan = Plan(
        messages,
        memo.analyse(messages)[0],
        overhead=0,
        framing=lambda first: counter.count_framing(() if first is None else (first,)),
        budget=300,
        shortener=MessageShortener(counter),
    )
    classify(plan)
    mark_kept(plan, TrimOptions(budget=300))
    cap_tool_results(plan, 60)
    return plan


@pytest.mark.parametrize("seed", range(6))
def test_history_rounds_read_from_the_analysis_are_those_walked_from_the_units(seed: int) -> None:
    conversation = GrowingConversation(100 + seed)
    counter = TokenCounter()
    memo = AnalysisMemo(counter)
    for call in range(150):
        conversation.grow()
        if call % 7 == 6:
            conversation.edit()
        messages = list(conversation.messages)
        plan = _plan(messages, memo, counter)
        walked = plan._walked_history_rounds()

        rounds = plan.history_rounds()

        # A call still waiting for its result is not sent (OpenAI: 400); dropping it leaves the
        # analysis' rounds, which hold it, for the walked ones. So does keeping a call whose
        # result came after the latest user message (written while the tool ran) with its
        # question: history kept as must-keep.
        left_out = [r == "unanswered_tool_call" for r in compress(plan.rules, plan.dropped)]
        facts = plan.facts
        asked = facts.units[facts.users[-1]].indices[0] if facts.users else -1
        wrote_while_a_tool_ran = any(call < asked < late for late, call in facts.late.items())
        assert plan.as_analysed is not (any(left_out) or wrote_while_a_tool_ran)
        if walked is None:
            assert rounds is None
        else:
            assert rounds == walked, call


def test_history_rounds_follow_drops_and_must_keeps_the_analysis_does_not_know() -> None:
    conversation = GrowingConversation(7)
    for _ in range(40):
        conversation.grow()
    messages = conversation.messages
    counter = TokenCounter()
    plan = _plan(messages, AnalysisMemo(counter), counter)
    before = plan.history_rounds()
    assert before is not None and len(before.indices) > 2
    first, second = before.indices[0], before.indices[1]

    plan.drop(first, "dropped_for_budget")
    plan.keep(second, "must_keep")

    rounds = plan.history_rounds()
    walked = plan._walked_history_rounds()
    assert not plan.as_analysed and rounds is not None and walked is not None
    assert rounds == walked
    assert rounds.indices == before.indices[2:]


# --- Edits of messages the analysis went past several calls ago: each is read again from the
# message on every call (its fields, or its __dict__ as a whole), not from the last call's. ----


def _first(messages: list[BaseMessage], kind: type[BaseMessage]) -> BaseMessage:
    return next(m for m in messages[1:] if type(m) is kind and m.content)


def _name_set(messages: list[BaseMessage]) -> None:
    _first(messages, AIMessage).name = "alice"


def _call_appended(messages: list[BaseMessage]) -> None:
    message = next(m for m in messages if isinstance(m, AIMessage) and not m.tool_calls)
    message.tool_calls.append({"name": "search", "args": {"q": "door " * 30}, "id": "late"})


def _result_renamed(messages: list[BaseMessage]) -> None:
    _first(messages, ToolMessage).tool_call_id = "nobody"  # type: ignore[attr-defined]


def _replaced_keeping_its_content(messages: list[BaseMessage]) -> None:
    # Another message with the very same content and name objects: only its identity differs.
    index = next(
        i
        for i, m in enumerate(messages)
        if i > len(messages) // 2 and type(m) is HumanMessage and isinstance(m.content, str)
    )
    messages[index] = AIMessage(messages[index].content)


def _reinitialised(messages: list[BaseMessage]) -> None:
    message = _first(messages, AIMessage)
    message.__init__(content=message.content, name="bob")  # type: ignore[misc]


def _calls_replaced(messages: list[BaseMessage]) -> None:
    message = next(m for m in messages if isinstance(m, AIMessage) and not m.tool_calls)
    message.invalid_tool_calls = [
        {"name": "search", "args": "{", "id": "bad", "error": None, "type": "invalid_tool_call"}
    ]


EDITS_AFTER_GROWTH = {
    "name set": _name_set,
    "tool call appended to an empty list": _call_appended,
    "empty invalid calls replaced": _calls_replaced,
    "tool_call_id of a result": _result_renamed,
    "replaced by another message with the same content object": _replaced_keeping_its_content,
    "re-initialised in place": _reinitialised,
}


@pytest.mark.parametrize("edit", EDITS_AFTER_GROWTH.values(), ids=EDITS_AFTER_GROWTH)
def test_an_edit_of_a_message_analysed_calls_ago_is_found(edit: Any) -> None:
    conversation = GrowingConversation(11)
    counter = TokenCounter()
    memo = AnalysisMemo(counter)
    for _ in range(40):  # the memo extended call after call, past every message edited
        conversation.grow()
        memo.analyse(list(conversation.messages))
    messages = list(conversation.messages)
    before = memo.analyse(messages)[0]
    edit(messages)

    facts = memo.analyse(messages)[0]

    assert same_facts(facts, analysis(counter, messages))
    assert facts != before  # the edit mattered


def _old_text_spoiled(messages: list[BaseMessage]) -> None:
    _first(messages, AIMessage).content = 7  # type: ignore[assignment]


def _old_part_spoiled(messages: list[BaseMessage]) -> None:
    message = next(m for m in messages if isinstance(m.content, list))
    message.content[0]["text"] = None  # type: ignore[index]


def _new_message_spoiled(messages: list[BaseMessage]) -> None:
    message = HumanMessage("next question")
    message.content = [{"type": "image_url"}]
    messages.append(message)


SPOILED = {
    "text of a message seen calls ago": _old_text_spoiled,
    "part of a message seen calls ago": _old_part_spoiled,
    "a new message": _new_message_spoiled,
}


def grown_memo() -> tuple[GrowingConversation, TokenCounter, AnalysisMemo]:
    """A conversation grown over 40 calls, each analysed by the memo returned."""
    conversation = GrowingConversation(11)
    counter = TokenCounter()
    memo = AnalysisMemo(counter)
    for _ in range(40):
        conversation.grow()
        memo.analyse(list(conversation.messages))
    return conversation, counter, memo


@pytest.mark.parametrize("spoil", SPOILED.values(), ids=SPOILED)
def test_content_spoiled_in_place_is_named_by_the_analysis_as_a_trim_names_it(
    spoil: Any,
) -> None:
    # So a trim may leave content unchecked by coerce_messages: each message the analysis
    # reads anew is checked, the others are the objects it checked, unchanged.
    conversation, counter, memo = grown_memo()
    messages = list(conversation.messages)
    kept = [m.model_copy(deep=True) for m in messages]
    spoil(messages)
    with pytest.raises(ValueError) as expected:  # as a trim names it
        PriorityTrimmer(400, token_counter=TokenCounter()).trim(messages)

    with pytest.raises(ValueError) as caught:
        memo.analyse(messages)

    assert str(caught.value) == str(expected.value)
    with pytest.raises(ValueError):  # still, on the next call
        memo.analyse(messages)
    assert same_facts(memo.analyse(kept)[0], analysis(counter, kept))


def test_lists_held_before_a_cut_are_still_followed_after_it() -> None:
    # An edit in place cuts the memo there (what it holds of the messages before is cut too);
    # then a message before the cut has a call appended to its empty list.
    conversation, counter, memo = grown_memo()
    messages = list(conversation.messages)
    quiet = [i for i, m in enumerate(messages) if isinstance(m, AIMessage) and not m.tool_calls]
    first, later = quiet[0], quiet[-1]
    messages[later].content = "edited " * 20
    before = memo.analyse(messages)[0]
    assert same_facts(before, analysis(counter, messages))
    messages[first].tool_calls.append({"name": "search", "args": {}, "id": "late"})  # type: ignore[attr-defined]

    facts = memo.analyse(messages)[0]

    assert same_facts(facts, analysis(counter, messages))
    kinds = [{u.indices[0]: u.kind for u in f.units}[first] for f in (before, facts)]
    assert kinds == ["message", "tool_call"]
