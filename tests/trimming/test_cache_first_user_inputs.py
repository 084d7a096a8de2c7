"""Cache-first (the default) on the inputs users really send, call after call (issue 27).

Every test grows a conversation and trims each call through ``PriorityTrimmer`` with its
default options, or through ``TrimmingMiddleware``, and checks what a server needs of the
request (every tool call answered right after it, no result without its call, the question
sent) and what a user expects (the fit, edits seen, no cross-talk, replicas alike).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from support.conversations import assert_openai_order, call_ids, filler
from support.fakes import ToolCallingFake

from agent_latency.tokens import TokenCounter
from agent_latency.trimming._middleware import TrimmingMiddleware
from agent_latency.trimming._trimmer import PriorityTrimmer, TrimResult

COUNTER = TokenCounter()
BUDGET = 1200
SYSTEM = "You are the support assistant of a bookshop; answer from the conversation."
IMAGE_PART = {
    "type": "image_url",
    "image_url": {"url": "data:image/png;base64," + "iVBOR" * 400, "detail": "low"},
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Searches the catalogue.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}


def trimmer(budget: int = BUDGET, **options: Any) -> PriorityTrimmer:
    return PriorityTrimmer(budget, token_counter=COUNTER, **options)


def assert_fits_or_says_so(result: TrimResult) -> None:
    assert result.tokens_after <= result.budget or result.over_budget
    assert result.over_budget == (result.tokens_after > result.effective_budget)


def is_user(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) or (
        isinstance(message, ChatMessage) and message.role == "user"
    )


def latest_user_text(messages: Sequence[BaseMessage]) -> Any:
    return next(m.content for m in reversed(messages) if is_user(m))


def grow(rounds: int, *, start: int = 0, topic: str = "shelves") -> Iterator[list[BaseMessage]]:
    """A growing agent conversation (with ids), one list per call: a tool step every 3rd round."""
    messages: list[BaseMessage] = [SystemMessage(SYSTEM, id="sys")]
    for r in range(start, start + rounds):
        messages.append(HumanMessage(filler(r, topic), id=f"{topic}-h{r}"))
        yield list(messages)
        if r % 3 == 2:
            call = {"name": "search", "args": {"q": f"{topic} {r}"}, "id": f"{topic}-c{r}"}
            messages.append(AIMessage("", tool_calls=[call], id=f"{topic}-a{r}"))
            messages.append(
                ToolMessage(
                    filler(r, "catalogue"), tool_call_id=f"{topic}-c{r}", id=f"{topic}-t{r}"
                )
            )
            yield list(messages)
        messages.append(AIMessage(f"Done {r}.", id=f"{topic}-d{r}"))


def sent_by(middleware: TrimmingMiddleware, messages: list[BaseMessage]) -> ModelRequest[Any]:
    """The request the model gets from the middleware (outside an agent run)."""
    received: list[ModelRequest[Any]] = []

    def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        received.append(request)
        return ModelResponse(result=[AIMessage("ok")])

    system = messages[0] if isinstance(messages[0], SystemMessage) else None
    original = ModelRequest(
        model=ToolCallingFake(messages=iter([])),
        messages=messages[1:] if system is not None else messages,  # type: ignore[arg-type]
        system_message=system,
        tools=list(middleware.tools),
    )
    middleware.wrap_model_call(original, handler)
    return received[0]


# --- the kinds of message users send ----------------------------------------------------------


def test_chat_messages_of_every_role_are_trimmed_by_their_role() -> None:
    t = trimmer()
    messages: list[BaseMessage] = [ChatMessage(role="system", content=SYSTEM)]
    for r in range(40):
        messages.append(ChatMessage(role="user", content=filler(r)))
        result = t.trim(messages)
        assert_fits_or_says_so(result)
        sent = result.messages
        assert sent[0] is messages[0]  # the system prompt, whatever its class
        assert sent[-1] is messages[-1]  # the question
        messages.append(ChatMessage(role="assistant", content=f"Done {r}."))
    assert result.dropped_messages > 0


@pytest.mark.parametrize("budget", [400, 700, 1200])
def test_a_chat_message_tool_result_and_its_call_are_sent_together_or_not_at_all(
    budget: int,
) -> None:
    # ChatMessage(role="tool") names its call only in additional_kwargs (ChatOpenAI does not
    # even send that): the trimmer must still not split it from the call it follows.
    t = trimmer(budget)
    messages: list[BaseMessage] = [SystemMessage(SYSTEM)]
    for r in range(30):
        messages.append(HumanMessage(filler(r)))
        messages.append(AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": f"c{r}"}]))
        result = filler(r, "books") * (1 + r % 3)
        messages.append(
            ChatMessage(role="tool", content=result, additional_kwargs={"tool_call_id": f"c{r}"})
        )
        sent = t.trim(messages).messages
        calls = {c["id"] for m in sent if isinstance(m, AIMessage) for c in m.tool_calls}
        results = {m.additional_kwargs["tool_call_id"] for m in sent if isinstance(m, ChatMessage)}
        assert calls == results
        messages.append(AIMessage(f"Done {r}."))


def test_openai_format_dicts_with_tool_calls_keep_their_pairs_and_the_question() -> None:
    t = trimmer(800)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for r in range(30):
        messages.append({"role": "user", "content": filler(r)})
        result = t.trim(messages)
        assert_fits_or_says_so(result)
        assert_openai_order(result.messages)
        assert result.messages[-1].content == messages[-1]["content"]
        call = {
            "id": f"c{r}",
            "type": "function",
            "function": {"name": "search", "arguments": "{}"},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{r}", "content": filler(r, "books")})
        messages.append({"role": "assistant", "content": f"Done {r}."})
    assert result.dropped_messages > 0


def test_images_are_counted_and_the_question_with_its_image_is_sent_whole() -> None:
    t = trimmer()
    messages: list[BaseMessage] = [SystemMessage(SYSTEM)]
    for r in range(25):
        messages.append(HumanMessage([{"type": "text", "text": filler(r)}, IMAGE_PART]))
        result = t.trim(messages)
        assert_fits_or_says_so(result)
        assert result.messages[-1] is messages[-1]
        messages.append(AIMessage(f"I see picture {r}."))
    assert result.dropped_messages > 0


def test_invalid_tool_calls_keep_their_results_and_their_results_keep_them() -> None:
    t = trimmer(700)
    messages: list[BaseMessage] = [SystemMessage(SYSTEM)]
    for r in range(30):
        messages.append(HumanMessage(filler(r)))
        bad = {"name": "search", "args": "{not json", "id": f"bad{r}", "error": "bad JSON"}
        messages.append(AIMessage("", invalid_tool_calls=[bad]))  # type: ignore[list-item]
        messages.append(ToolMessage("Error: arguments are not JSON.", tool_call_id=f"bad{r}"))
        messages.append(AIMessage(f"Sorry, retrying {r}."))
        messages.append(HumanMessage(f"Question {r}?"))
        result = t.trim(messages)
        assert_openai_order(result.messages)
        messages.pop()


def test_parallel_tool_calls_are_never_split_call_after_call() -> None:
    t = trimmer(900)
    messages: list[BaseMessage] = [SystemMessage(SYSTEM)]
    for r in range(25):
        messages.append(HumanMessage(filler(r)))
        ids = [f"c{r}-{k}" for k in range(3)]
        messages.append(
            AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": i} for i in ids])
        )
        size = 30 if r % 2 else 300  # some results large enough to be shortened
        messages += [ToolMessage("found " * size, tool_call_id=i) for i in ids]
        result = t.trim(messages)  # the call that reads the results
        assert_fits_or_says_so(result)
        assert_openai_order(result.messages)
        assert [m.tool_call_id for m in result.messages[-3:]] == ids  # type: ignore[attr-defined]
        messages.append(AIMessage(f"Done {r}."))


# --- what users do between calls --------------------------------------------------------------


def test_an_earlier_message_edited_in_place_is_sent_edited() -> None:
    t = trimmer()
    calls = list(grow(24))
    for messages in calls[:-1]:
        t.trim(messages)
    last = calls[-1]
    # The user edits the first question and the latest answer of the agent, in place.
    first_question = next(m for m in last if isinstance(m, HumanMessage))
    first_question.content = "EDITED: " + str(first_question.content)
    answer = [m for m in last if isinstance(m, AIMessage) and not m.tool_calls][-1]
    answer.content = "EDITED answer"
    result = t.trim(last)
    fresh = trimmer().trim(last)
    assert [m.content for m in result.messages] == [m.content for m in fresh.messages]
    assert any(m.content == "EDITED answer" for m in result.messages)


def test_interleaved_conversations_through_one_trimmer_do_not_talk_across() -> None:
    shared = trimmer()
    topics = ["shelves", "invoices", "deliveries"]
    streams = [list(grow(20, topic=topic)) for topic in topics]
    alone = {topic: trimmer() for topic in topics}
    for step in range(max(map(len, streams))):
        for topic, calls in zip(topics, streams, strict=True):
            if step < len(calls):
                got = shared.trim(calls[step]).messages
                expected = alone[topic].trim(calls[step]).messages
                assert [m.content for m in got] == [m.content for m in expected]
                assert all(m.id == "sys" or str(m.id).startswith(topic) for m in got)


def test_two_replicas_send_the_same_whatever_calls_each_saw_before() -> None:
    calls = list(grow(30))
    a, b = trimmer(), trimmer()
    for i, messages in enumerate(calls):
        if i % 2 == 0:
            a.trim(messages)  # replica A serves the even calls, B the odd ones
        else:
            b.trim(messages)
        assert [m.content for m in a.trim(messages).messages] == [
            m.content for m in b.trim(messages).messages
        ]


REPLICA = """
import hashlib, json, random, sys
sys.path[:0] = [{tests!r}, {here!r}]
from test_cache_first_user_inputs import KINDS_ALL, build, trimmer
rng = random.Random(7)
sent = []
for _ in range(25):
    kinds = [rng.choice(KINDS_ALL) for _ in range(rng.randint(5, 30))]
    full, t = build(kinds), trimmer(rng.randint(150, 2500))
    for end in range(2, len(full) + 1):
        sent.append([str(m.content) for m in t.trim(full[:end]).messages])
print(hashlib.sha256(json.dumps(sent).encode()).hexdigest())
"""


def test_replicas_in_processes_with_other_hash_seeds_send_the_same() -> None:
    # Replicas are processes: sets and dicts of strings iterate in another order in each
    # (PYTHONHASHSEED), which must not change a tie or a choice.
    here = Path(__file__).resolve().parent
    code = REPLICA.format(tests=str(here.parent), here=str(here))
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert len(digests) == 1 and all(len(d) == 64 for d in digests)


def test_messages_without_ids_or_with_duplicate_ids_are_trimmed_as_with_unique_ids() -> None:
    calls = list(grow(24))
    unique, none, duplicate = trimmer(), trimmer(), trimmer()
    for messages in calls:
        expected = [m.content for m in unique.trim(messages).messages]
        no_ids = [m.model_copy(update={"id": None}) for m in messages]
        same_ids = [m.model_copy(update={"id": "msg"}) for m in messages]
        assert [m.content for m in none.trim(no_ids).messages] == expected
        assert [m.content for m in duplicate.trim(same_ids).messages] == expected


def test_empty_strings_anywhere_are_trimmed_without_error() -> None:
    t = trimmer(500)
    messages: list[BaseMessage] = [SystemMessage("")]
    for r in range(40):
        messages += [HumanMessage("" if r % 3 == 0 else filler(r)), AIMessage("")]
        messages.append(HumanMessage(""))
        result = t.trim(messages)
        assert_fits_or_says_so(result)
        assert result.messages[-1] is messages[-1]
        messages.pop()


@pytest.mark.parametrize(
    "text",
    [
        "a\x00b " * 50,
        "half an emoji \ud83d pasted " * 20,  # a lone surrogate, as browsers can send
        "x" * 20_000,
        "مرحبا " * 300,
        "👩‍👩‍👧‍👦" * 500,
    ],
    ids=["nul", "lone-surrogate", "no-spaces", "rtl", "zwj-emoji"],
)
def test_odd_text_as_the_question_or_in_history_is_trimmed_to_fit(text: str) -> None:
    history = [HumanMessage(filler(i)) for i in range(10)]
    for messages in (
        [SystemMessage(SYSTEM), *history, HumanMessage(text)],
        [SystemMessage(SYSTEM), HumanMessage(text), AIMessage("ok"), *history],
    ):
        result = trimmer(600).trim(messages)
        assert result.tokens_after <= 600 and not result.over_budget


def test_a_system_message_in_the_middle_is_sent_in_its_place() -> None:
    t = trimmer()
    for messages in grow(30):
        if len(messages) < 10:
            continue
        inputs = [*messages[:8], SystemMessage("Policy change: be terse.", id="mid"), *messages[8:]]
        result = t.trim(inputs)
        assert_openai_order(result.messages)
        ids = [m.id for m in result.messages]
        assert "mid" in ids  # system messages are kept by default, wherever they are
        index = ids.index("mid")
        assert set(ids[:index]) <= {m.id for m in inputs[:8]}
        assert set(ids[index + 1 :]) <= {m.id for m in inputs[9:]}
    assert result.dropped_messages > 0


# --- more than the budget holds ---------------------------------------------------------------


def test_a_tool_result_bigger_than_the_whole_budget_is_shortened_to_fit_with_its_call() -> None:
    t = trimmer(800)
    messages: list[BaseMessage] = [SystemMessage(SYSTEM), HumanMessage("Find the price list.")]
    messages.append(AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": "big"}]))
    messages.append(ToolMessage("price row; " * 3000, tool_call_id="big"))
    result = t.trim(messages)
    assert_openai_order(result.messages)
    assert result.tokens_after <= 800 and not result.over_budget
    assert isinstance(result.messages[-1], ToolMessage) and result.shortened_messages == 1


def test_tools_bigger_than_the_budget_are_reported_over_budget_with_the_question_sent() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{k}",
                "description": "Does a thing with many words. " * 40,
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for k in range(8)
    ]
    t = trimmer(600, tools=tools)
    messages = [SystemMessage(SYSTEM), HumanMessage("Hello?")]
    result = t.trim(messages)
    assert result.over_budget and result.tool_tokens > 600
    assert result.messages[-1] is messages[-1] and result.messages[0] is messages[0]


def test_a_budget_smaller_than_system_and_question_sends_both_and_says_over_budget() -> None:
    t = trimmer(40)
    for messages in grow(6):
        result = t.trim(messages)
        assert result.over_budget
        assert result.messages[0] is messages[0]
        assert latest_user_text(result.messages) == latest_user_text(messages)
        assert result.messages[-1].id == messages[-1].id  # the question, or the result it awaits
        assert_openai_order(result.messages)


# --- through TrimmingMiddleware ---------------------------------------------------------------


def test_the_middleware_over_a_growing_conversation_sends_valid_requests_within_budget() -> None:
    middleware = TrimmingMiddleware(trimmer())
    for messages in grow(30):
        request = sent_by(middleware, messages)
        system = [request.system_message] if request.system_message is not None else []
        sent = [*system, *request.messages]
        assert_openai_order(sent)
        assert latest_user_text(sent) == latest_user_text(messages)
        tokens = COUNTER.count_messages(sent) + COUNTER.count_tools(request.tools)
        assert tokens <= BUDGET


@pytest.mark.parametrize("budget", [30, 40, 50, 55])
def test_with_recall_a_budget_hardly_larger_than_the_marker_still_trims(
    budget: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Defect found: the marker's reserve left a budget smaller than the prefix step, the
    # reserved trimmer refused its options, and the middleware sent everything untrimmed
    # (the pre-model hook raised).
    middleware = TrimmingMiddleware(trimmer(budget))
    hook = trimmer(budget).as_pre_model_hook(prompt=SYSTEM)
    for messages in grow(8):
        request = sent_by(middleware, messages)
        assert len(request.messages) < len(messages) - 1 or len(messages) <= 3
        assert request.messages[-1].id == messages[-1].id
        assert_openai_order([request.system_message, *request.messages])
        sent = hook({"messages": messages[1:]})["llm_input_messages"]
        assert sent[-1].id == messages[-1].id
    assert "Trimming failed" not in caplog.text


def test_the_middleware_takes_chat_messages_as_their_roles() -> None:
    middleware = TrimmingMiddleware(trimmer())
    messages: list[BaseMessage] = [SystemMessage(SYSTEM)]
    for r in range(30):
        messages.append(ChatMessage(role="user", content=filler(r)))
        request = sent_by(middleware, messages)
        assert request.messages[-1] is messages[-1]
        messages.append(ChatMessage(role="assistant", content=f"Done {r}."))


# --- a property: random growing conversations of every kind of input -------------------------

KINDS_ALL = [
    *("user", "chat_user", "dict_user", "image", "ai", "tools", "invalid", "empty", "system"),
    *("ask", "ask"),
]
KINDS = st.lists(st.sampled_from(KINDS_ALL), min_size=1, max_size=40)


def build(kinds: list[str]) -> list[Any]:
    """A conversation of ``kinds``; an ``ask`` names a code an earlier message holds (recall)."""
    messages: list[Any] = [SystemMessage(SYSTEM)]
    for n, kind in enumerate(kinds):
        if kind == "ask":
            messages.append(HumanMessage(f"What was code-{n // 2}x about again?"))
        elif kind == "system":
            messages.append(SystemMessage(f"Policy {n}: be terse."))
        elif kind == "user":
            messages.append(HumanMessage(filler(n)))
        elif kind == "chat_user":
            messages.append(ChatMessage(role="user", content=filler(n)))
        elif kind == "dict_user":
            messages.append({"role": "user", "content": filler(n)})
        elif kind == "image":
            messages.append(HumanMessage([{"type": "text", "text": filler(n)}, IMAGE_PART]))
        elif kind == "ai":
            messages.append(AIMessage(filler(n, "answers")))
        elif kind == "empty":
            messages.append(AIMessage(""))
        elif kind == "tools":
            calls = [{"name": "search", "args": {"q": str(n)}, "id": f"c{n}-{k}"} for k in range(2)]
            messages.append(AIMessage("", tool_calls=calls))
            messages += [
                ToolMessage(filler(n, "books") * (1 + k * 5), tool_call_id=c["id"])
                for k, c in enumerate(calls)
            ]
        else:
            bad = {"name": "search", "args": "{", "id": f"bad{n}", "error": None}
            messages.append(AIMessage("", invalid_tool_calls=[bad]))
            messages.append(ToolMessage("Error: bad arguments.", tool_call_id=f"bad{n}"))
    messages.append(HumanMessage("And now?"))
    return messages


@settings(max_examples=60, deadline=None)
@given(kinds=KINDS, budget=st.integers(150, 2500))
def test_any_growing_mix_of_inputs_gives_valid_requests_that_fit_or_say_so(
    kinds: list[str], budget: int
) -> None:
    t = trimmer(budget)
    full = build(kinds)
    snapshot = copy.deepcopy(full)
    for end in range(2, len(full) + 1):
        prefix = full[:end]
        if isinstance(prefix[-1], ToolMessage) or (
            isinstance(prefix[-1], AIMessage) and call_ids(prefix[-1])
        ):
            continue  # a call is made after a user message or after all results
        result = t.trim(prefix)
        assert_openai_order(result.messages)
        assert_fits_or_says_so(result)
        # A replica that saw none of the earlier calls sends the same.
        replica = trimmer(budget).trim(prefix)
        assert [m.content for m in result.messages] == [m.content for m in replica.messages]
    assert full == snapshot  # never modified
