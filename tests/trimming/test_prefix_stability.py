"""Prefix stability: while a conversation grows, the cut point moves in steps, not every call."""

from __future__ import annotations

import itertools

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency.tokens import TokenCounter
from agent_latency.trimming._trimmer import PriorityTrimmer

COUNTER = TokenCounter()
BUDGET = 1000
STEP = 250


def agent_turn(steps: int) -> list[BaseMessage]:
    """A system prompt, a question, then ``steps`` tool calls with results of 41-70 tokens."""
    messages: list[BaseMessage] = [SystemMessage("rules " * 20), HumanMessage("task " * 10)]
    for i in range(steps):
        call = {"name": "search", "args": {"page": i}, "id": f"call_{i}"}
        messages += [
            AIMessage("", tool_calls=[call]),
            ToolMessage("result " * (40 + (7 * i) % 30), tool_call_id=f"call_{i}"),
        ]
    return messages


def replay(trimmer: PriorityTrimmer, conversation: list[BaseMessage]) -> list[list[BaseMessage]]:
    """Trims the conversation as an agent loop would: after every tool result."""
    return [trimmer.trim(conversation[:end]).messages for end in range(4, len(conversation) + 1, 2)]


def extends(before: list[BaseMessage], now: list[BaseMessage]) -> bool:
    """Whether ``now`` starts with exactly the messages of ``before``: a prefix-cache hit."""
    return len(now) >= len(before) and all(a is b for a, b in zip(before, now, strict=False))


def cut_moves(outputs: list[list[BaseMessage]]) -> int:
    """How many calls changed the previous prompt somewhere before its end."""
    return sum(not extends(before, now) for before, now in itertools.pairwise(outputs))


def test_the_cut_moves_about_once_per_step_of_growth_instead_of_on_every_call() -> None:
    conversation = agent_turn(60)
    growth = COUNTER.count_messages(conversation) - BUDGET
    stable = replay(PriorityTrimmer(BUDGET, prefix_step_tokens=STEP), conversation)
    unstable = replay(PriorityTrimmer(BUDGET, prefix_stable=False), conversation)
    assert cut_moves(stable) <= growth // STEP + 1
    assert cut_moves(unstable) >= 3 * cut_moves(stable)
    for outputs in (stable, unstable):
        assert all(COUNTER.count_messages(o) <= BUDGET for o in outputs)


def test_between_moves_the_previous_prompt_is_a_prefix_of_the_next() -> None:
    outputs = replay(PriorityTrimmer(BUDGET, prefix_step_tokens=STEP), agent_turn(60))
    kept_prefix = [extends(before, now) for before, now in itertools.pairwise(outputs)]
    assert sum(kept_prefix) >= 0.6 * len(kept_prefix)


def test_a_larger_step_moves_the_cut_less_often_and_sends_less() -> None:
    conversation = agent_turn(60)
    small = replay(PriorityTrimmer(BUDGET, prefix_step_tokens=100), conversation)
    large = replay(PriorityTrimmer(BUDGET, prefix_step_tokens=500), conversation)
    assert cut_moves(large) < cut_moves(small)
    sent_small = sum(map(COUNTER.count_messages, small))
    sent_large = sum(map(COUNTER.count_messages, large))
    assert sent_large < sent_small


def test_after_a_move_the_prompt_is_within_one_step_and_one_message_below_the_budget() -> None:
    trimmer = PriorityTrimmer(BUDGET, prefix_step_tokens=STEP)
    largest = max(map(COUNTER.count_message, agent_turn(60))) * 2  # one call and its result
    for output in replay(trimmer, agent_turn(60))[10:]:
        assert BUDGET - STEP - largest <= COUNTER.count_messages(output) <= BUDGET


def test_rounding_up_to_the_step_never_reaches_into_a_class_the_exact_excess_spares() -> None:
    old_round = [HumanMessage("old question " * 10), AIMessage("old answer")]
    messages = [*old_round, *agent_turn(8)]
    history_tokens = COUNTER.count_messages(old_round) - 3
    budget = COUNTER.count_messages(messages) - history_tokens // 2  # dropping history suffices
    outcome = PriorityTrimmer(budget, prefix_step_tokens=budget).trim(messages)
    assert [d.index for d in outcome.decisions if d.action == "dropped"] == [0, 1]
