"""Messages and tools as ChatOpenAI puts them on the wire, for counting what is sent."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

_TYPE_ROLES: Final = (
    (HumanMessage, "user"),
    (AIMessage, "assistant"),
    (SystemMessage, "system"),
    (ToolMessage, "tool"),
    (FunctionMessage, "function"),
)


def wire_role(message: BaseMessage) -> str:
    """Returns the role ChatOpenAI sends for ``message`` (e.g. ``"developer"``)."""
    if isinstance(message, ChatMessage):
        return str(message.role)
    if isinstance(message, SystemMessage):
        return str(message.additional_kwargs.get("__openai_role__") or "system")
    for kind, role in _TYPE_ROLES:
        if isinstance(message, kind):
            return role
    return str(message.type)


def _arguments_json(args: object) -> str:
    """Serialises tool-call arguments as ChatOpenAI sends them."""
    return json.dumps(args, ensure_ascii=False, default=str)


def _wire_calls(message: BaseMessage) -> list[tuple[str, str]]:
    """Returns ``(name, JSON arguments)`` of each call ChatOpenAI sends for ``message``."""
    if not isinstance(message, AIMessage):
        return []
    calls = [(str(c["name"]), _arguments_json(c["args"])) for c in message.tool_calls]
    # ChatOpenAI sends the calls it could not parse too, with their raw arguments.
    calls += [
        (str(c.get("name") or ""), str(c.get("args") or "")) for c in message.invalid_tool_calls
    ]
    return calls


def wire_message(message: BaseMessage) -> dict[str, Any]:
    """Returns the fields of ``message`` that ChatOpenAI sends, in OpenAI's wire format."""
    wire: dict[str, Any] = {"role": wire_role(message), "content": message.content}
    if message.name:
        wire["name"] = message.name
    if isinstance(message, ToolMessage):
        wire["tool_call_id"] = message.tool_call_id
    calls = _wire_calls(message)
    if calls:
        wire["tool_calls"] = [{"function": {"name": n, "arguments": a}} for n, a in calls]
    return wire


def wire_tools(tools: Sequence[Any]) -> list[Mapping[str, Any]]:
    """Returns tool definitions as OpenAI wire dicts (``{"type": "function", ...}``).

    Args:
        tools: Wire dicts, or anything ``convert_to_openai_tool`` accepts (LangChain tools,
            functions, JSON or Pydantic schemas), as ``bind_tools`` converts them.
    """
    from langchain_core.utils.function_calling import convert_to_openai_tool

    return [
        tool
        if isinstance(tool, Mapping) and tool.get("type") == "function"
        else convert_to_openai_tool(tool)
        for tool in tools
    ]


def content_key(message: BaseMessage) -> tuple[Any, ...]:
    """Returns a hashable key of everything a message's count depends on."""
    content = message.content
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True, default=str)
    return (
        wire_role(message),
        text,
        message.name,
        getattr(message, "tool_call_id", None),
        tuple(_wire_calls(message)),
    )
