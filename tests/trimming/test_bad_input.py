"""PriorityTrimmer given bad or odd input: clear errors naming the item, or documented tolerance."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompt_values import ChatPromptValue
from langchain_openai.chat_models.base import _convert_message_to_dict

from agent_latency.tokens import TokenCounter
from agent_latency.trimming._shortening import MessageShortener
from agent_latency.trimming._trimmer import PriorityTrimmer

COUNTER = TokenCounter()


def trimmer(budget: int = 1000) -> PriorityTrimmer:
    return PriorityTrimmer(budget, token_counter=COUNTER)


@pytest.mark.parametrize(
    ("value", "error", "pattern"),
    [
        (None, TypeError, "got NoneType"),
        ("hello", TypeError, "got str"),
        (42, TypeError, "got int"),
        ({"input": []}, TypeError, "'messages' key"),
        ([HumanMessage("a"), object()], TypeError, "Message 1: .*got object"),
        ([HumanMessage("a"), None], TypeError, "Message 1: .*got NoneType"),
        ([{"role": "wizard", "content": "x"}], ValueError, "Message 0: unknown role 'wizard'"),
        (
            [{"role": "user", "content": "ok"}, {"role": "user", "content": 3}],
            ValueError,
            "Message 1 .*content",
        ),
        ([{"role": "assistant", "tool_calls": "nope"}], ValueError, "Message 0"),
        ([{"role": "user"}], ValueError, "Message 0 \\(user\\): no 'content'. Fix: add"),
        ([("user",)], TypeError, "Message 0: .*a \\(role, content\\) pair, got tuple"),
        ([("wizard", "x")], ValueError, "Message 0: unknown role 'wizard'"),
    ],
)
def test_bad_input_raises_a_clear_error_naming_the_item(
    value: object, error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        trimmer().trim(value)
    with pytest.raises(error, match=pattern):
        trimmer().invoke(value)


def test_errors_never_quote_message_content() -> None:
    with pytest.raises(ValueError) as caught:
        trimmer().trim([{"role": "wizard", "content": "top secret"}])
    assert "top secret" not in str(caught.value)


def test_openai_dicts_prompt_values_and_message_dicts_are_accepted() -> None:
    dicts = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    from_dicts = trimmer().trim(dicts).messages
    assert [m.type for m in from_dicts] == ["system", "human", "ai", "tool"]
    prompt_value = ChatPromptValue(messages=from_dicts)
    assert trimmer().trim(prompt_value).messages == from_dicts
    assert trimmer().trim({"messages": from_dicts}).messages == from_dicts


def test_langchains_short_forms_are_accepted_as_its_chat_models_read_them() -> None:
    # Strings and (role, content) pairs, as ChatOpenAI.invoke takes them; OpenAI's assistant
    # message with calls and no content key.
    messages: list[Any] = [
        ("system", "s"),
        ["user", "first"],
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        "next question",
    ]
    sent = trimmer().trim(messages).messages
    assert [(m.type, m.content) for m in sent] == [
        ("system", "s"),
        ("human", "first"),
        ("ai", ""),
        ("tool", "done"),
        ("human", "next question"),
    ]
    assert sent[2].tool_calls[0]["id"] == "c1"  # type: ignore[attr-defined]


def test_orphan_tool_results_are_dropped_and_reported_even_when_the_input_fits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    messages = [
        HumanMessage("hi"),
        ToolMessage("early", tool_call_id="later"),  # answers a call made after it
        AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "later"}]),
        ToolMessage("result", tool_call_id="later"),
        ToolMessage("stray", tool_call_id="unknown"),
    ]
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        outcome = trimmer().trim(messages)
    assert outcome.messages == [messages[0], messages[2], messages[3]]
    assert [d.rule for d in outcome.decisions] == [
        "fits",
        "orphan_tool_result",
        "fits",
        "fits",
        "orphan_tool_result",
    ]
    assert outcome.dropped_messages == 2 and outcome.changed
    assert "2 tool result(s)" in caplog.text and "[1, 4]" in caplog.text
    assert "stray" not in caplog.text


def call(id_: str) -> dict[str, Any]:
    return {"name": "lookup", "args": {"key": id_}, "id": id_}


def test_a_tool_call_missing_some_results_is_sent_without_the_unanswered_calls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parallel = AIMessage("", tool_calls=[call("a"), call("b")])
    messages = [
        HumanMessage("x " * 300),
        parallel,
        ToolMessage("only a", tool_call_id="a"),
        AIMessage("reply " * 200),
        HumanMessage("latest"),
    ]
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        fits = trimmer(2000).trim(messages)
    # An endpoint answers a call without its result with HTTP 400: the call goes, even when
    # everything fits, and the answered call stays with its result.
    sent = fits.messages[1]
    assert isinstance(sent, AIMessage) and [c["id"] for c in sent.tool_calls] == ["a"]
    assert [c["id"] for c in _convert_message_to_dict(sent)["tool_calls"]] == ["a"]
    assert fits.messages[0] is messages[0] and fits.messages[2:] == messages[2:]
    assert [c["id"] for c in parallel.tool_calls] == ["a", "b"]  # the input is not changed
    decision = fits.decisions[1]
    assert (decision.action, decision.rule) == ("shortened", "unanswered_tool_call")
    assert decision.tokens_after < decision.tokens
    assert fits.tokens_after == COUNTER.count_messages(fits.messages)
    assert "1 tool call(s)" in caplog.text and "[1]" in caplog.text
    assert "lookup" not in caplog.text  # nothing of the call itself
    trimmed = PriorityTrimmer(40, token_counter=COUNTER).trim(messages)
    assert [d.action for d in trimmed.decisions[1:3]] == ["dropped", "dropped"]


@pytest.mark.parametrize(
    ("message", "sent"),
    [
        (AIMessage("", tool_calls=[call("gone")]), None),  # nothing left to send: dropped
        (AIMessage([], tool_calls=[call("gone")]), None),
        (AIMessage("Looking it up.", tool_calls=[call("gone")]), "Looking it up."),
        (
            AIMessage(
                "",
                invalid_tool_calls=[
                    {"name": "lookup", "args": "{oops", "id": "gone", "error": "bad JSON"}
                ],
            ),
            None,
        ),
        (  # as ChatOpenAI builds it: the raw calls also in additional_kwargs
            AIMessage(
                "Checking.",
                additional_kwargs={
                    "tool_calls": [
                        {
                            "id": "gone",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"key": "k"}'},
                        }
                    ]
                },
            ),
            "Checking.",
        ),
    ],
)
def test_a_tool_call_whose_result_was_removed_is_not_sent(
    message: AIMessage, sent: str | None
) -> None:
    messages = [SystemMessage("s"), HumanMessage("look k up"), message, HumanMessage("and?")]
    outcome = trimmer().trim(messages)
    if sent is None:
        assert outcome.messages == [messages[0], messages[1], messages[3]]
        assert outcome.decisions[2].action == "dropped"
    else:
        copy = outcome.messages[2]
        assert copy.content == sent
        assert "tool_calls" not in _convert_message_to_dict(copy)
        assert outcome.decisions[2].action == "shortened"
    assert outcome.decisions[2].rule == "unanswered_tool_call"
    assert outcome.tokens_after == COUNTER.count_messages(outcome.messages)


@pytest.mark.parametrize(
    "content",
    [
        "",
        [],
        [{"type": "text", "text": ""}],
        [{"type": "reasoning", "summary": "no text field"}],
        ["a bare string part", {"type": "text", "text": "a text part"}],
        [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
    ],
)
def test_odd_but_valid_content_is_counted_and_trimmed(content: str | list[Any]) -> None:
    messages = [
        SystemMessage("s"),
        HumanMessage(content),
        AIMessage(content),
        HumanMessage("latest " * 50),
    ]
    outcome = PriorityTrimmer(60, token_counter=COUNTER).trim(messages)
    assert outcome.tokens_after == COUNTER.count_messages(outcome.messages)
    assert not outcome.over_budget


def test_shortening_chinese_text_never_leaves_a_broken_character() -> None:
    message = ToolMessage("开始" + "数据分析结果显示用户请求增加" * 300 + "结束", tool_call_id="c")
    shortened, count = MessageShortener(COUNTER).shorten(message, 120)
    assert count == COUNTER.count_message(shortened) <= 120
    assert "\ufffd" not in shortened.text
    assert shortened.text.startswith("开始") and shortened.text.endswith("结束")


def test_shortening_list_content_keeps_the_image_parts() -> None:
    image = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"},
    }
    message = HumanMessage(
        [{"type": "text", "text": "look " * 500}, image, {"type": "text", "text": "end"}]
    )
    before = message.model_dump()
    shortened, count = MessageShortener(COUNTER).shorten(message, 200)
    assert isinstance(shortened.content, list) and shortened.content[1:] == [image]
    assert count <= 200 and shortened.text.endswith("end")
    assert message.model_dump() == before


def test_an_anthropic_style_tool_result_block_is_shortened_like_text() -> None:
    # The counter counts a tool_result block's nested content as the text it is (ChatOpenAI
    # passes the block on); the shortener took the block for an image-like part it keeps
    # whole, so the 3,000-token result stayed whole and the request went over budget.
    nested = [{"type": "text", "text": "row " * 1500 + "total: 42"}]
    messages = [
        HumanMessage("Sum the rows."),
        AIMessage("", tool_calls=[{"name": "rows", "args": {}, "id": "toolu_1"}]),
        ToolMessage(
            [{"type": "tool_result", "tool_use_id": "toolu_1", "content": nested}],
            tool_call_id="toolu_1",
        ),
    ]

    result = PriorityTrimmer(500, token_counter=COUNTER).trim(messages)

    assert not result.over_budget and result.tokens_after <= 500
    assert result.tokens_after == COUNTER.count_messages(result.messages)
    sent = result.messages[-1]
    assert sent.tool_call_id == "toolu_1" and "tokens removed" in sent.text
    assert sent.text.startswith("row") and sent.text.endswith("total: 42")


def test_a_target_below_the_marker_yields_the_marker_alone() -> None:
    message = ToolMessage("word " * 400, tool_call_id="call_with_a_long_identifier")
    shortened, count = MessageShortener(COUNTER).shorten(message, 5)
    assert "tokens removed" in shortened.text and "word" not in shortened.text
    assert count == COUNTER.count_message(shortened) > 5


def test_shortening_is_remembered_per_message_and_target() -> None:
    shortener = MessageShortener(COUNTER)
    message = ToolMessage("word " * 400, tool_call_id="c")
    first, _ = shortener.shorten(message, 100)
    assert shortener.shorten(message, 100)[0] is first
    assert shortener.shorten(message, 120)[0] is not first
    equal_but_new = ToolMessage("word " * 400, tool_call_id="c")
    assert shortener.shorten(equal_but_new, 100)[0] is not first


@pytest.mark.parametrize("model", ["gpt-3.5-turbo", "qwen-7b-chat", "llama-3.1-8b"])
def test_a_lone_surrogate_in_any_message_is_counted_and_trimmed(model: str) -> None:
    # json.loads of a page cut inside an emoji gives a lone surrogate; before, every trim
    # crashed with the tokenizer's TypeError naming no message.
    cut = json.loads('"\\ud83d"')
    counter = TokenCounter.for_model(model)
    messages: list[Any] = [
        SystemMessage(f"Answer briefly {cut}"),
        HumanMessage(f"Summarise the page {cut}"),
        AIMessage("", tool_calls=[{"name": "fetch", "args": {"url": f"x{cut}"}, "id": "c1"}]),
        ToolMessage(("page text " * 400) + cut, tool_call_id="c1"),
        {"role": "user", "content": f"and the title? {cut}"},
    ]

    result = PriorityTrimmer(300, token_counter=counter).trim(messages)

    assert not result.over_budget and result.decisions[3].action == "shortened"
    assert result.tokens_before == counter.count_messages(messages)
    assert result.tokens_after == counter.count_messages(result.messages)
