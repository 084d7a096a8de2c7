"""OpenAI's chat format as ChatOpenAI sends it: roles, tools, and text that leaves as JSON."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from support.wire import sent_request

from agent_latency._chat_format import (
    escape_surrogates,
    openai_message,
    role_of,
    wire_role,
    wire_tools,
)


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


def test_wire_tools_names_a_tool_it_cannot_convert() -> None:
    with pytest.raises(ValueError, match=r"tool 1 \(int\) cannot be converted"):
        wire_tools([{"type": "function", "function": {"name": "f"}}, 42])


@pytest.mark.parametrize("text", ["plain", "naïve 中文", "half \ud800 pair", "\udfff"])
def test_escape_surrogates_gives_utf8_that_json_reads_back(text: str) -> None:
    escaped = escape_surrogates(text)
    escaped.encode("utf-8")  # never raises
    assert json.loads(f'"{escaped}"') == text


def test_a_message_with_calls_that_are_not_json_keeps_them_all_and_is_not_changed() -> None:
    message = AIMessage(
        "",
        tool_calls=[{"name": "search", "args": {"q": "port"}, "id": "c1"}],
        invalid_tool_calls=[{"name": "search", "args": "{not json", "id": "c2", "error": None}],
    )
    before = message.model_dump()
    wire = openai_message(message)
    assert [call["id"] for call in wire["tool_calls"]] == ["c1", "c2"]
    assert wire["tool_calls"][1]["function"] == {"name": "search", "arguments": "{not json"}
    assert message.model_dump() == before
    assert openai_message(message) == wire  # and a second call finds the message as it was
