"""coerce_messages and load_request_file: what users pass becomes LangChain messages, or a clear
error that names the item (and the file) and never quotes message content."""

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
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompt_values import StringPromptValue
from langchain_core.prompts import ChatPromptTemplate

from agent_latency._user_input import check_message_content, coerce_messages, load_request_file

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


SPOILED_CONTENT = {
    "a number": 7,
    "a part of another type": [CONTENT, 3],
    "a text part without text": [{"type": "text", "txt": CONTENT}],
}


@pytest.mark.parametrize("content", SPOILED_CONTENT.values(), ids=SPOILED_CONTENT)
def test_content_spoiled_in_place_is_named_alike_by_both_checks(content: Any) -> None:
    spoiled = HumanMessage("fine")
    spoiled.content = content
    messages = [SystemMessage("s"), spoiled]
    with pytest.raises(ValueError) as by_coerce:
        coerce_messages(messages)

    with pytest.raises(ValueError) as by_check:
        check_message_content(spoiled, 1)

    assert str(by_check.value) == str(by_coerce.value)
    assert str(by_check.value).startswith("Message 1 (human)")
    assert CONTENT not in str(by_check.value)


def test_content_left_to_the_caller_is_not_checked_but_dicts_still_are() -> None:
    spoiled = HumanMessage("fine")
    spoiled.content = 7  # type: ignore[assignment]
    messages = [SystemMessage("s"), spoiled]

    assert coerce_messages(messages, check_content=False) == messages
    assert coerce_messages(messages, check_content=False)[1] is spoiled
    dicts = [{"role": "user", "content": "ok"}, {"role": "user", "content": 3}]
    with pytest.raises(ValueError, match=r"Message 1 .*content"):
        coerce_messages(dicts, check_content=False)
    with pytest.raises(TypeError, match="Message 1"):
        coerce_messages([HumanMessage("ok"), object()], check_content=False)


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


# --- load_request_file -----------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [False, True])
def test_load_request_file(tmp_path: Path, wrap: bool) -> None:
    path = tmp_path / "conversation.json"
    data: Any = {"messages": OPENAI_CONVERSATION} if wrap else OPENAI_CONVERSATION
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

    _assert_openai_conversation(load_request_file(path).messages)


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
def test_load_request_file_errors_name_the_file(
    tmp_path: Path, content: str | bytes | None, expected: str
) -> None:
    path = tmp_path / "conversation.json"
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    elif isinstance(content, bytes):
        path.write_bytes(content)

    with pytest.raises(ValueError) as caught:
        load_request_file(path)

    assert str(caught.value).startswith(str(path))
    assert expected in str(caught.value)


def test_load_request_file_given_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape(str(tmp_path))):
        load_request_file(tmp_path)


def test_a_utf8_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "notepad.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(OPENAI_CONVERSATION).encode())
    _assert_openai_conversation(load_request_file(path).messages)


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
