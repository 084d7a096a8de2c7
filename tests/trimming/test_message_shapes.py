"""PriorityTrimmer on messages beyond plain text (ChatMessage roles, image parts, calls whose
arguments are not JSON, malformed parts), and on a span processor that fails: a test each."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer

COUNTER = TokenCounter()
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}}


def text(tokens: int, word: str = "data") -> str:
    return " ".join([word] * tokens)


def history(rounds: int, tokens: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for r in range(rounds):
        messages += [HumanMessage(f"q{r} " + text(tokens)), AIMessage(f"a{r} " + text(tokens))]
    return messages


def test_chat_messages_are_classified_by_their_openai_role() -> None:
    system = ChatMessage(role="system", content="You are terse.")
    question = ChatMessage(role="user", content="What is the capital of France?")
    messages = [system, *history(6, 80), question]
    outcome = PriorityTrimmer(300, token_counter=COUNTER).trim(messages)
    assert outcome.messages[0] is system and outcome.messages[-1] is question
    classes = [d.priority_class for d in outcome.decisions]
    assert classes[0] == "system" and classes[-1] == "latest_user"
    assert set(classes[1:-1]) == {"history"}
    assert [d.rule for d in outcome.decisions][-1] == "must_keep"
    assert not outcome.over_budget


@pytest.mark.parametrize(
    "tool_result",
    [
        ToolMessage([{"type": "text", "text": text(400)}, *[IMAGE] * 4], tool_call_id="c1"),
        ToolMessage(text(400), tool_call_id="c1"),
    ],
    ids=["images", "long tool_call_id"],
)
def test_shortening_is_planned_at_the_size_that_is_sent(tool_result: ToolMessage) -> None:
    if isinstance(tool_result.content, str):  # the same message, answering a very long call id
        long_id = "call_" + "9f3a" * 120
        tool_result = tool_result.model_copy(update={"tool_call_id": long_id})
    call = AIMessage("", tool_calls=[{"name": "look", "args": {}, "id": tool_result.tool_call_id}])
    messages = [SystemMessage("s"), *history(6, 60), HumanMessage("latest"), call, tool_result]
    trimmer = PriorityTrimmer(800, token_counter=COUNTER, prefix_stable=False)
    outcome = trimmer.trim(messages)
    # A fitting output exists (the must-keep part alone fits): the history makes room for the
    # shortened result's real size, so nothing is over budget.
    assert not outcome.over_budget
    assert outcome.tokens_after == COUNTER.count_messages(outcome.messages) <= 800
    decision = outcome.decisions[-1]
    assert decision.action == "shortened"
    assert decision.tokens_after == COUNTER.count_message(outcome.messages[-1])


def test_shortening_a_question_with_images_never_grows_it_nor_loses_its_text() -> None:
    question = HumanMessage([{"type": "text", "text": "What is in these pictures?"}, *[IMAGE] * 8])
    outcome = PriorityTrimmer(100, token_counter=COUNTER).trim([SystemMessage("s"), question])
    assert outcome.messages[-1] is question  # the marker would cost more than the text
    assert outcome.tokens_after <= outcome.tokens_before
    assert outcome.over_budget and outcome.decisions[-1].action == "kept"


def test_shortening_a_long_question_with_images_keeps_the_head_of_its_text() -> None:
    question = HumanMessage(
        [{"type": "text", "text": "Compare these charts. " + text(600)}, *[IMAGE] * 2]
    )
    outcome = PriorityTrimmer(400, token_counter=COUNTER).trim([SystemMessage("s"), question])
    shortened = outcome.messages[-1]
    assert shortened is not question and shortened.text.startswith("Compare these charts.")
    assert isinstance(shortened.content, list) and shortened.content[1:] == [IMAGE, IMAGE]
    assert COUNTER.count_message(shortened) < COUNTER.count_message(question)
    assert not outcome.over_budget


def test_a_tool_result_answering_an_invalid_tool_call_is_not_an_orphan() -> None:
    call = AIMessage(
        "",
        invalid_tool_calls=[
            {
                "type": "invalid_tool_call",
                "name": "search",
                "args": '{"q": "unterminated',
                "id": "call_bad",
                "error": "not JSON",
            }
        ],
    )
    answer = ToolMessage("arguments were malformed", tool_call_id="call_bad", status="error")
    messages = [HumanMessage("find it"), call, answer, HumanMessage("and now?")]
    outcome = PriorityTrimmer(1000, token_counter=COUNTER).trim(messages)
    assert outcome.messages == messages and not outcome.changed
    # Over budget, the call and its answer go together, as one unit.
    tight = PriorityTrimmer(40, token_counter=COUNTER).trim([*history(2, 30), *messages])
    actions = {d.index: d.action for d in tight.decisions}
    assert actions[5] == actions[6]


def test_openai_dicts_with_arguments_that_are_not_json_are_accepted_as_chatopenai_does() -> None:
    dicts: list[dict[str, Any]] = [
        {"role": "user", "content": "find it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_bad",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "unterminated'},
                },
                {"id": "call_ok", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_bad", "content": "malformed"},
        {"role": "tool", "tool_call_id": "call_ok", "content": "done"},
    ]
    outcome = PriorityTrimmer(1000, token_counter=COUNTER).trim(dicts)
    assert len(outcome.messages) == 4 and not outcome.changed
    call = outcome.messages[1]
    assert isinstance(call, AIMessage)
    assert [c["id"] for c in call.tool_calls] == ["call_ok"]
    assert [(c["id"], c["args"]) for c in call.invalid_tool_calls] == [
        ("call_bad", '{"q": "unterminated')
    ]


class _FailingProcessor(SpanProcessor):
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        raise RuntimeError("span processor down")

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("span processor down")


@pytest.mark.parametrize("failing", ["on_start", "on_end"])
def test_a_failing_span_processor_never_fails_a_trim(
    failing: str, caplog: pytest.LogCaptureFixture
) -> None:
    provider = TracerProvider()
    processor = _FailingProcessor()
    if failing == "on_end":
        processor.on_start = lambda span, parent_context=None: None  # type: ignore[method-assign]
    provider.add_span_processor(processor)
    trimmer = PriorityTrimmer(100, token_counter=COUNTER, tracer_provider=provider)
    messages = [SystemMessage("s"), *history(4, 40), HumanMessage("latest")]
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        outcome = trimmer.trim(messages)
        assert trimmer.invoke(messages) == outcome.messages
    assert outcome.changed and "trim span failed" in caplog.text
    # The caller's own errors still propagate unchanged.
    with pytest.raises(TypeError, match="Message 0"):
        trimmer.trim([42])


@pytest.mark.parametrize(
    ("part", "problem"),
    [
        ({"type": "image_url"}, "image_url part needs"),
        ({"type": "image_url", "image_url": {"detail": "low"}}, "image_url part needs"),
        ({"type": "text", "text": 5}, "text part needs a string"),
        ({"foo": "bar"}, "needs a string 'type'"),
    ],
)
def test_malformed_content_parts_are_refused_naming_message_and_part(
    part: dict[str, Any], problem: str
) -> None:
    dicts = [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, part]},
    ]
    with pytest.raises(ValueError, match=rf"Message 1 \(user\), content part 1: .*{problem}"):
        PriorityTrimmer(1000, token_counter=COUNTER).trim(dicts)
    with pytest.raises(ValueError, match=r"Message 0 .*content part 0"):
        PriorityTrimmer(1000, token_counter=COUNTER).trim([HumanMessage([part])])
