"""The cache-first bench's parts: the strategies, evidence retention and the growing replay."""

from __future__ import annotations

from functools import cache

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from agent_latency.bench import (
    Conversation,
    PromptRenderer,
    Question,
    cache_first_strategies,
    evidence_retention,
    growing_replay,
)
from agent_latency.bench._evidence import question_call
from agent_latency.bench._growing import growing_calls, prompt_tokens, uncached_tokens
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer

TOPICS = ["gardening", "football", "cooking", "travel", "music", "weather", "movies", "books"]


@cache
def counter() -> TokenCounter:
    return TokenCounter.for_model("qwen-7b-chat")


def chat(turns: int = 60) -> Conversation:
    """A chat of ``turns`` turns about ordinary things, the port stated once at turn D1:21."""
    messages: list[BaseMessage] = []
    for n in range(1, turns + 1):
        topic = TOPICS[n % len(TOPICS)]
        text = f"Let us talk about {topic} again, item {n}, with a few more words of chatter."
        if n == 21:
            text = "By the way, the database port of the billing service is 5432."
        kind = HumanMessage if n % 2 else AIMessage
        messages.append(kind(content=text, id=f"D1:{n}"))
    question = Question(
        "q1", "Which database port does the billing service use?", "5432", ("D1:21",), "x"
    )
    return Conversation("c1", tuple(messages), (question,))


def test_the_rendered_prompt_is_what_the_counter_counts() -> None:
    messages = question_call(chat(), chat().questions[0])

    prompt = PromptRenderer(counter()).render(messages)

    assert prompt_tokens(prompt) == counter().count_messages(messages)


def test_a_growing_prompt_misses_only_its_new_turns_and_a_changed_head_misses_everything() -> None:
    renderer = PromptRenderer(counter())
    system = SystemMessage(content="Be brief.")
    turns = list(chat().messages)
    before = renderer.render([system, *turns[:3]])
    after = renderer.render([system, *turns[:5]])  # an assistant turn and a user turn appended

    # The reply priming of the first prompt opens the appended assistant turn: all of it reused.
    assert uncached_tokens(before, after) == prompt_tokens(after) - prompt_tokens(before)
    assert uncached_tokens(None, after) == prompt_tokens(after)
    assert uncached_tokens(after, after) == 1  # the last token is always prefilled
    changed = renderer.render([SystemMessage(content="Be very brief."), *turns[:5]])
    assert uncached_tokens(after, changed) > prompt_tokens(changed) - 10


def test_growing_calls_end_on_each_user_turn_of_the_first_turns() -> None:
    calls = list(growing_calls(chat(), turns=9))

    assert len(calls) == 5  # turns 1, 3, 5, 7, 9 are the user's
    assert [len(call) for call in calls] == [2, 4, 6, 8, 10]
    assert all(isinstance(call[-1], HumanMessage) for call in calls)
    assert all(call[0].type == "system" for call in calls)


def test_evidence_counts_as_kept_only_when_every_evidence_turn_is_sent() -> None:
    conversation = chat()
    strategies = {
        "all": lambda _budget: list,
        "last_four": lambda _budget: lambda messages: [messages[0], *messages[-4:]],
    }

    rows = evidence_retention([conversation], strategies, [1000])

    assert [(r.strategy, r.questions, r.kept, r.percent) for r in rows] == [
        ("all", 1, 1, 100.0),
        ("last_four", 1, 0, 0.0),
    ]


def test_the_strategies_are_the_peers_in_table_order() -> None:
    strategies = cache_first_strategies(counter())

    assert list(strategies) == [
        "send_everything",
        "age_1_1",
        "default",
        "trim_messages",
        "clear_tool_uses",
        "bm25_neighbours",
        "summarization_stand_in",
    ]
    messages = question_call(chat(), chat().questions[0])
    # "default" is PriorityTrimmer with its defaults of the day.
    expected = PriorityTrimmer(budget=400, token_counter=counter()).trim(messages).messages
    assert [m.id for m in strategies["default"](400)(messages)] == [m.id for m in expected]
    # A chat has no tool results: ClearToolUsesEdit as shipped changes nothing.
    assert strategies["clear_tool_uses"](400)(messages) == messages
    for name in ("age_1_1", "default", "trim_messages", "bm25_neighbours"):
        sent = strategies[name](400)(messages)
        assert counter().count_messages(sent) <= 400, name
        assert sent[-1] is messages[-1], name


def test_bm25_keeps_the_hit_with_its_neighbours_then_the_newest_turns_in_order() -> None:
    messages = question_call(chat(), chat().questions[0])
    bm25 = cache_first_strategies(counter())["bm25_neighbours"]

    sent = bm25(300)(messages)

    ids = [m.id for m in sent]
    assert {"D1:20", "D1:21", "D1:22"} <= set(ids)
    assert ids[0] == "system" and ids[-1] == "question:q1" and "D1:60" in ids
    turns = [int(str(i).split(":")[1]) for i in ids[1:-1]]
    assert turns == sorted(turns)
    assert counter().count_messages(sent) <= 300
    assert len(sent) < len(messages)


def test_the_replay_sums_each_strategy_per_budget_with_an_empty_slot_per_conversation() -> None:
    strategies = cache_first_strategies(counter())
    conversations = [chat(), chat(40)]

    rows = growing_replay(
        conversations, strategies, [300, 600], renderer=PromptRenderer(counter()), turns=30
    )

    assert [(r.budget, r.strategy) for r in rows] == [
        (b, s) for b in (300, 600) for s in strategies
    ]
    by_name = {(r.strategy, r.budget): r for r in rows}
    everything = by_name["send_everything", 300]
    assert everything.calls == 30 == len(everything.trim_ms)  # 15 user turns in each
    # Sending everything appends: each call misses only its two new turns, and the first call
    # of each conversation misses its whole prompt.
    assert everything.cached_percent > 80
    first = PromptRenderer(counter()).render(next(growing_calls(chat(), 1)))
    assert everything.uncached_tokens > 2 * prompt_tokens(first)
    assert by_name["age_1_1", 300].mean_sent <= 300
    assert by_name["age_1_1", 300].mean_sent < by_name["age_1_1", 600].mean_sent
    assert by_name["age_1_1", 300].mean_uncached <= by_name["age_1_1", 300].mean_sent
    row = by_name["default", 600].as_dict()
    assert set(row) == {
        "strategy",
        "budget",
        "calls",
        "mean_sent",
        "mean_uncached",
        "cached_percent",
        "median_trim_ms",
    }


@pytest.mark.parametrize("budget", [250, 500])
def test_a_prefix_stable_age_cut_misses_fewer_tokens_than_a_sliding_window(budget: int) -> None:
    strategies = cache_first_strategies(counter())
    picked = {name: strategies[name] for name in ("age_1_1", "trim_messages")}

    age, window = growing_replay([chat(120)], picked, [budget], renderer=PromptRenderer(counter()))

    assert age.mean_uncached < window.mean_uncached
