"""``summarization_stand_in``: LangChain's SummarizationMiddleware in the growing replay (issue 27).

The summaries come from a stand-in (langchain-core's ``GenericFakeChatModel``, a fixed text), so
the replay measures what summarising does to the prompt: the prefix it rewrites and the tokens
sent, deterministically and with no model.
"""

from __future__ import annotations

from functools import cache

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from agent_latency.bench import Conversation, PromptRenderer, Question, growing_replay
from agent_latency.bench._evidence import question_call
from agent_latency.bench._growing import growing_calls, shared_prefix, uncached_tokens
from agent_latency.bench._strategies import (
    STAND_IN_SUMMARY,
    cache_first_strategies,
    summarization_stand_in,
)
from agent_latency.tokens import TokenCounter

BUDGET = 1000


@cache
def counter() -> TokenCounter:
    return TokenCounter.for_model("qwen-7b-chat")


def chat(turns: int = 80) -> Conversation:
    messages: list[BaseMessage] = []
    for n in range(1, turns + 1):
        kind = HumanMessage if n % 2 else AIMessage
        text = f"Turn {n}: we talked about the garden, the weather and item {n} at some length."
        messages.append(kind(content=text, id=f"D1:{n}"))
    question = Question("q1", "What did we say about item 3?", "x", ("D1:3",), "x")
    return Conversation("c1", tuple(messages), (question,))


def sent_per_call(budget: int = BUDGET) -> list[list[BaseMessage]]:
    send = summarization_stand_in(counter())(budget)
    return [send(call) for call in growing_calls(chat())]


STAND_IN_START, _ = STAND_IN_SUMMARY.split("{number}")


def is_summary(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) and STAND_IN_START in message.text


def test_it_is_one_of_the_bench_strategies_and_labelled_a_stand_in() -> None:
    assert "summarization_stand_in" in cache_first_strategies(counter())
    assert STAND_IN_SUMMARY.startswith("[stand-in summary {number}, not a model's]")


def test_the_agent_state_is_summarised_when_it_reaches_the_room_and_stays_within_the_budget() -> (
    None
):
    sent = sent_per_call()

    summarised = [i for i, messages in enumerate(sent) if any(map(is_summary, messages))]
    assert summarised and summarised[0] > 0  # not before the state reaches the room
    assert summarised[-1] == len(sent) - 1  # a summary, once made, stays in the state
    for messages in sent:
        assert counter().count_messages(messages) <= BUDGET
        assert sum(map(is_summary, messages)) <= 1  # a new summary replaces the old one
        assert isinstance(messages[0], SystemMessage) and messages[-1].type == "human"
    # Without a summary, everything is sent as is.
    assert all(len(sent[i]) == 2 * i + 2 for i in range(summarised[0]))


def test_a_summary_rewrites_the_prefix_once_then_calls_append_until_the_next() -> None:
    renderer = PromptRenderer(counter())
    sent = sent_per_call()
    prompts = [renderer.render(messages) for messages in sent]
    summaries = [
        i
        for i in range(1, len(sent))
        if any(map(is_summary, sent[i])) and sent[i][1].text != sent[i - 1][1].text
    ]
    assert len(summaries) >= 2  # each a new text: the first and a re-summary
    for i in range(1, len(prompts)):
        missed = uncached_tokens(prompts[i - 1], prompts[i])
        if i in summaries:  # everything from the summary on is prefilled again
            assert shared_prefix(prompts[i - 1], prompts[i]) < sum(map(len, prompts[i][:3]))
            assert missed > sum(map(len, prompts[i])) // 2
        else:  # the user turn and the answer before it are new, the rest is cached
            assert missed < 80


def test_the_replay_is_deterministic_and_leaves_the_input_messages_alone() -> None:
    calls = list(growing_calls(chat()))
    before = [m.model_copy() for m in calls[-1]]
    anonymous = [HumanMessage("no id here " * 30) for _ in range(40)]

    first = sent_per_call()
    again = sent_per_call()
    summarization_stand_in(counter())(300)([SystemMessage("Be brief."), *anonymous])

    assert [[m.text for m in s] for s in first] == [[m.text for m in s] for s in again]
    assert calls[-1] == before
    assert all(m.id is None for m in anonymous)


def test_a_call_that_does_not_extend_the_previous_starts_the_state_afresh() -> None:
    conversation = chat()
    send = summarization_stand_in(counter())(BUDGET)
    question = conversation.questions[0]
    first = send(question_call(conversation, question))
    other = Question("q2", "And item 5?", "x", ("D1:5",), "x")
    second = send(question_call(conversation, other))

    assert first[-1].text == question.text and second[-1].text == other.text
    assert sum(map(is_summary, second)) == 1  # the earlier question is not in the state
    assert all(m.text != question.text for m in second)


def test_in_the_replay_it_sends_less_than_everything() -> None:
    strategies = cache_first_strategies(counter())
    rows = growing_replay(
        [chat()],
        {k: strategies[k] for k in ("send_everything", "summarization_stand_in")},
        [BUDGET],
        renderer=PromptRenderer(counter()),
    )
    everything, summarised = rows
    assert summarised.mean_sent < everything.mean_sent
    assert summarised.uncached_tokens > everything.uncached_tokens  # each summary re-prefills
