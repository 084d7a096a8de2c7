"""coerce_messages and load_messages_file: what users pass becomes LangChain messages, or a clear
error that names the item and never quotes message content."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompt_values import StringPromptValue
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from support.wire import sent_request

from agent_latency._wire import (
    ServerUsage,
    coerce_messages,
    escape_surrogates,
    load_messages_file,
    load_request_file,
    role_of,
    usage_of_body,
    usage_of_message,
    wire_role,
    wire_tools,
)

CONTENT = "private-content-3f9a"  # must never appear in an error message

OPENAI_CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "北京天气？", "name": "alice"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "北京"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "晴"},
    {"role": "assistant", "content": "北京晴。"},
]


def _assert_openai_conversation(messages: list[BaseMessage]) -> None:
    assert [type(m) for m in messages] == [
        SystemMessage,
        HumanMessage,
        AIMessage,
        ToolMessage,
        AIMessage,
    ]
    assert messages[1].content == "北京天气？"
    assert messages[1].name == "alice"
    call_message = messages[2]
    assert isinstance(call_message, AIMessage)
    assert [(c["name"], c["args"], c["id"]) for c in call_message.tool_calls] == [
        ("get_weather", {"city": "北京"}, "call_1")
    ]
    tool_message = messages[3]
    assert isinstance(tool_message, ToolMessage)
    assert tool_message.tool_call_id == "call_1"


# --- Accepted inputs -------------------------------------------------------------------------


def test_list_of_messages_keeps_the_objects() -> None:
    messages = [SystemMessage("s"), HumanMessage("u")]

    coerced = coerce_messages(messages)

    assert coerced == messages
    assert coerced is not messages
    assert all(a is b for a, b in zip(coerced, messages, strict=True))


def test_tuple_of_messages() -> None:
    message = HumanMessage("u")

    assert coerce_messages((message,))[0] is message


def test_openai_dicts_with_tool_calls() -> None:
    _assert_openai_conversation(coerce_messages(OPENAI_CONVERSATION))


def test_openai_dicts_are_not_mutated() -> None:
    before = json.dumps(OPENAI_CONVERSATION)

    coerce_messages(OPENAI_CONVERSATION)

    assert json.dumps(OPENAI_CONVERSATION) == before


def test_mixed_messages_and_dicts() -> None:
    human = HumanMessage("u")

    coerced = coerce_messages([{"role": "system", "content": "s"}, human])

    assert isinstance(coerced[0], SystemMessage)
    assert coerced[1] is human


def test_chat_prompt_value() -> None:
    prompt = ChatPromptTemplate.from_messages([("system", "be {style}"), ("human", "{question}")])

    coerced = coerce_messages(prompt.invoke({"style": "brief", "question": "why?"}))

    assert [(type(m), m.content) for m in coerced] == [
        (SystemMessage, "be brief"),
        (HumanMessage, "why?"),
    ]


def test_string_prompt_value() -> None:
    coerced = coerce_messages(StringPromptValue(text="hello"))

    assert [(type(m), m.content) for m in coerced] == [(HumanMessage, "hello")]


def test_dict_with_messages_key() -> None:
    human = HumanMessage("u")

    assert coerce_messages({"messages": [human], "other_state": 1})[0] is human
    _assert_openai_conversation(coerce_messages({"messages": OPENAI_CONVERSATION}))


# --- Errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["text", b"bytes", None, 42, HumanMessage("u")])
def test_not_a_list_is_a_type_error(value: object) -> None:
    with pytest.raises(TypeError, match="list of messages"):
        coerce_messages(value)


def test_dict_without_messages_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="'messages' key"):
        coerce_messages({"role": "user", "content": CONTENT})


@pytest.mark.parametrize(
    ("items", "index", "error"),
    [
        ([HumanMessage(CONTENT), 5], 1, TypeError),
        ([None], 0, TypeError),
        (
            [{"role": "user", "content": CONTENT}, {"role": "wizard", "content": CONTENT}],
            1,
            ValueError,
        ),
        ([{"content": CONTENT}], 0, ValueError),
        ([{"role": ["user"], "content": CONTENT}], 0, ValueError),
        ([{"role": {"r": CONTENT}, "content": CONTENT}], 0, ValueError),
        ([{"role": "user", "content": 7}], 0, ValueError),
        ([{"role": "user", "content": [CONTENT, None]}], 0, ValueError),
        ([{"role": "tool", "content": CONTENT}], 0, ValueError),
        ([{"role": "assistant", "content": CONTENT, "tool_calls": "call"}], 0, ValueError),
        ([{"role": "assistant", "content": CONTENT, "tool_calls": [7]}], 0, ValueError),
        # A call without its function (non-JSON arguments are accepted, as ChatOpenAI does).
        ([{"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}], 0, ValueError),
        ([{"role": "user", "content": [{"type": "text", "text": 5}]}], 0, ValueError),
    ],
)
def test_bad_item_names_its_index_and_hides_content(
    items: list[Any], index: int, error: type[Exception]
) -> None:
    with pytest.raises(error) as caught:
        coerce_messages(items)

    assert str(caught.value).startswith(f"Message {index}")
    assert CONTENT not in str(caught.value)


# Roles as OpenAI and LangChain spell them, and anything else.
ROLES = st.sampled_from(
    ["system", "developer", "user", "human", "assistant", "ai", "tool", "function", "wizard"]
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
# Values that carry the content marker somewhere, as content, arguments or a bad role.
WITH_CONTENT = st.sampled_from(
    [CONTENT, [CONTENT], [{"type": "text", "text": CONTENT}], {"text": CONTENT}, [CONTENT, 1]]
)
TOOL_CALLS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "id": st.text(max_size=5) | JSON_VALUES,
            "type": st.just("function") | JSON_VALUES,
            "function": st.fixed_dictionaries(
                {},
                optional={
                    "name": st.text(max_size=8) | JSON_VALUES,
                    "arguments": st.sampled_from(['{"a": 1}', "{", "[1]", "{" + CONTENT])
                    | WITH_CONTENT
                    | JSON_VALUES,
                },
            )
            | JSON_VALUES,
        },
    )
    | JSON_VALUES,
    max_size=2,
)
OPENAI_DICTS = st.fixed_dictionaries(
    {"role": ROLES | WITH_CONTENT.filter(lambda v: not isinstance(v, str)) | JSON_VALUES},
    optional={
        "content": WITH_CONTENT | JSON_VALUES,
        "tool_calls": TOOL_CALLS | JSON_VALUES,
        "tool_call_id": st.text(max_size=5) | JSON_VALUES,
        "name": st.text(max_size=5) | JSON_VALUES,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(OPENAI_DICTS | JSON_VALUES, max_size=4))
def test_random_dicts_give_messages_or_an_indexed_error(items: list[Any]) -> None:
    try:
        messages = coerce_messages(items)
    except (TypeError, ValueError) as exc:
        assert re.match(r"Message \d+\b", str(exc)), str(exc)
        assert CONTENT not in str(exc)
    else:
        assert len(messages) == len(items)
        assert all(isinstance(m, BaseMessage) for m in messages)


# --- load_messages_file ----------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [False, True])
def test_load_messages_file(tmp_path: Path, wrap: bool) -> None:
    path = tmp_path / "conversation.json"
    data: Any = {"messages": OPENAI_CONVERSATION} if wrap else OPENAI_CONVERSATION
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

    _assert_openai_conversation(load_messages_file(path))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "file not found"),
        ('[{"role": "user",\n "content": }]', "line 2"),
        (b"\xff\xfe[\x00]\x00", "the file is UTF-16 text. Fix: save it as UTF-8"),
        (b"[\x93]", "not UTF-8 text (byte 1). Fix: save it as UTF-8"),
        ('[{"type": "wizard", "data": {"content": "hi"}}]', "a LangChain message dump"),
        ('[{"role": "user", "content": "ok"}, {"role": "wizard", "content": "x"}]', "Message 1"),
        ('"just a string"', "list of messages"),
    ],
)
def test_load_messages_file_errors_name_the_file(
    tmp_path: Path, content: str | bytes | None, expected: str
) -> None:
    path = tmp_path / "conversation.json"
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    elif isinstance(content, bytes):
        path.write_bytes(content)

    with pytest.raises(ValueError) as caught:
        load_messages_file(path)

    assert str(caught.value).startswith(str(path))
    assert expected in str(caught.value)


def test_load_messages_file_given_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape(str(tmp_path))):
        load_messages_file(tmp_path)


# --- What the server reported: ServerUsage --------------------------------------------------


def test_openai_usage_with_cached_tokens() -> None:
    body = {
        "usage": {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 1920},
        }
    }
    usage = usage_of_body(body)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (2006, 300, 1920)
    assert usage.prefilled_tokens == 86 and usage.invalid == ()


def test_deepseek_cache_hits_count_as_cached() -> None:
    body = {"usage": {"prompt_tokens": 900, "prompt_cache_hit_tokens": 640}}
    assert usage_of_body(body).cached_tokens == 640


def test_llama_cpp_timings_give_the_prefill() -> None:
    body = {
        "usage": {"prompt_tokens": 1845, "completion_tokens": 30},
        "timings": {"cache_n": 1800, "prompt_n": 45, "prompt_ms": 310.5, "predicted_n": 30},
    }
    usage = usage_of_body(body)
    assert usage.cached_tokens == 1800  # usage said nothing of the cache: timings do
    assert (usage.prefill_ms, usage.prefill_tokens, usage.prefilled_tokens) == (310.5, 45, 45)


def test_usage_beats_timings_for_the_cached_count() -> None:
    body = {
        "usage": {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 64}},
        "timings": {"cache_n": 99},
    }
    assert usage_of_body(body).cached_tokens == 64


@pytest.mark.parametrize(
    ("usage", "invalid"),
    [
        ({"prompt_tokens": 10**12}, ("prompt_tokens",)),
        ({"prompt_tokens": -5}, ("prompt_tokens",)),
        ({"prompt_tokens": True}, ("prompt_tokens",)),
        ({"prompt_tokens": float("nan")}, ("prompt_tokens",)),
        ({"prompt_tokens": 12.5}, ("prompt_tokens",)),
        ({"prompt_tokens": "12"}, ("prompt_tokens",)),
        ({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}}, ("cached_tokens",)),
    ],
)
def test_impossible_counts_are_named_and_dropped(
    usage: dict[str, object], invalid: tuple[str, ...]
) -> None:
    read = usage_of_body({"usage": usage})
    assert read.invalid == invalid
    assert getattr(read, invalid[0]) is None


def test_whole_float_counts_are_read() -> None:
    assert usage_of_body({"usage": {"prompt_tokens": 12.0}}).prompt_tokens == 12


def test_impossible_prefill_time_is_named() -> None:
    read = usage_of_body({"timings": {"prompt_ms": -1}})
    assert read.prefill_ms is None and read.invalid == ("prefill_ms",)


@pytest.mark.parametrize("body", [None, [], "x", {"usage": "x"}, {"usage": None}, {}])
def test_bodies_without_usage_say_nothing(body: object) -> None:
    assert usage_of_body(body) == ServerUsage()


def test_a_langchain_message_with_usage_metadata_and_timings() -> None:
    message = AIMessage(
        "hi",
        usage_metadata={
            "input_tokens": 500,
            "output_tokens": 7,
            "total_tokens": 507,
            "input_token_details": {"cache_read": 448, "priority_cache_read": 16},
        },
        response_metadata={"timings": {"prompt_ms": 12.0, "prompt_n": 36}},
    )
    usage = usage_of_message(message)
    assert (usage.prompt_tokens, usage.completion_tokens) == (500, 7)
    assert usage.cached_tokens == 464  # service-tier variants are summed
    assert (usage.prefill_ms, usage.prefill_tokens) == (12.0, 36)


def test_a_blocking_deepseek_message_keeps_its_raw_cache_hits() -> None:
    message = AIMessage(
        "hi",
        usage_metadata={"input_tokens": 900, "output_tokens": 1, "total_tokens": 901},
        response_metadata={"token_usage": {"prompt_tokens": 900, "prompt_cache_hit_tokens": 832}},
    )
    assert usage_of_message(message).cached_tokens == 832


def test_a_message_without_usage_metadata_reads_the_raw_usage() -> None:
    message = AIMessage("hi", response_metadata={"token_usage": {"prompt_tokens": 42}})
    assert usage_of_message(message).prompt_tokens == 42
    assert usage_of_message(AIMessage("hi")) == ServerUsage()


# --- Out: roles and tools as ChatOpenAI sends them -------------------------------------------


@pytest.mark.parametrize(
    ("message", "role"),
    [
        (ChatMessage(role="user", content="q"), "user"),
        (ChatMessage(role="system", content="s"), "system"),
        (ChatMessage(role="developer", content="s"), "system"),
        (SystemMessage("s", additional_kwargs={"__openai_role__": "developer"}), "system"),
        (ChatMessage(role="assistant", content="a"), "assistant"),
        (HumanMessage("q"), "user"),
        (ToolMessage("r", tool_call_id="c"), "tool"),
    ],
)
def test_roles_are_the_openai_roles_whatever_the_python_type(
    message: BaseMessage, role: str
) -> None:
    assert role_of(message) == role


def test_a_developer_system_message_is_sent_with_its_role() -> None:
    developer = SystemMessage("Be brief.", additional_kwargs={"__openai_role__": "developer"})

    assert wire_role(developer) == "developer"
    assert sent_request([developer, HumanMessage("hi")], [])["messages"][0]["role"] == "developer"


def test_langchain_tools_convert_to_the_wire_definitions_chat_openai_sends() -> None:
    @tool
    def get_weather(city: str, date: str = "today") -> str:
        """Returns the forecast for a city and a date."""
        return "sunny"

    assert wire_tools([get_weather]) == sent_request([HumanMessage("hi")], [get_weather])["tools"]


def test_llama_cpp_decode_time_is_read() -> None:
    body = {"timings": {"prompt_ms": 40.0, "prompt_n": 8, "predicted_ms": 610.5}}
    assert usage_of_body(body).decode_ms == 610.5


def test_vllm_per_request_metrics_split_the_call_where_timings_are_absent() -> None:
    body = {
        "usage": {"prompt_tokens": 3000, "prompt_tokens_details": {"cached_tokens": 2048}},
        "metrics": {"time_to_first_token_ms": 95.0, "generation_time_ms": 800.0},
    }
    usage = usage_of_body(body)
    assert (usage.prefill_ms, usage.decode_ms, usage.prefilled_tokens) == (95.0, 800.0, 952)
    both = {**body, "timings": {"prompt_ms": 60.0, "predicted_ms": 700.0}}
    assert (usage_of_body(both).prefill_ms, usage_of_body(both).decode_ms) == (60.0, 700.0)
    message = AIMessage("hi", response_metadata={"metrics": body["metrics"]})
    assert usage_of_message(message).prefill_ms == 95.0


def test_impossible_vllm_metrics_are_named() -> None:
    read = usage_of_body({"metrics": {"time_to_first_token_ms": "fast", "generation_time_ms": -3}})
    assert (read.prefill_ms, read.decode_ms) == (None, None)
    assert set(read.invalid) == {"prefill_ms", "decode_ms"}


def test_a_utf8_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "notepad.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(OPENAI_CONVERSATION).encode())
    _assert_openai_conversation(load_messages_file(path))


@pytest.mark.parametrize(
    ("tool", "named"),
    [
        ({"type": "function"}, "tools[0].function must be an object with a 'name'"),
        (
            {"type": "function", "function": {"name": "f", "parameters": "notadict"}},
            "tools[0].function.parameters must be a JSON schema object",
        ),
        ("get_weather", "tools[0] must be an object with a 'type'"),
    ],
)
def test_a_request_file_with_a_tool_openai_refuses_names_it(
    tmp_path: Path, tool: object, named: str
) -> None:
    path = tmp_path / "request.json"
    path.write_text(json.dumps({"messages": OPENAI_CONVERSATION, "tools": [tool]}))
    with pytest.raises(ValueError, match=re.escape(named)):
        load_request_file(path)


def test_another_kind_of_tool_is_left_to_the_server(tmp_path: Path) -> None:
    path = tmp_path / "request.json"
    custom = {"type": "custom", "custom": {"name": "grammar"}}
    path.write_text(json.dumps({"messages": OPENAI_CONVERSATION, "tools": [custom]}))
    assert load_request_file(path).tools == [custom]


def test_wire_tools_names_a_tool_it_cannot_convert() -> None:
    with pytest.raises(ValueError, match=r"tool 1 \(int\) cannot be converted"):
        wire_tools([{"type": "function", "function": {"name": "f"}}, 42])


@pytest.mark.parametrize("text", ["plain", "naïve 中文", "half \ud800 pair", "\udfff"])
def test_escape_surrogates_gives_utf8_that_json_reads_back(text: str) -> None:
    escaped = escape_surrogates(text)
    escaped.encode("utf-8")  # never raises
    assert json.loads(f'"{escaped}"') == text
