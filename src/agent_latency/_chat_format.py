"""OpenAI's chat format as ChatOpenAI puts it on the wire: what every count is made of."""

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


def _wire_calls(message: BaseMessage) -> list[tuple[str, str]]:
    """Returns ``(name, JSON arguments)`` of each call ChatOpenAI sends for ``message``."""
    if not isinstance(message, AIMessage):
        return []
    calls = [
        (str(c["name"]), json.dumps(c["args"], ensure_ascii=False, default=str))
        for c in message.tool_calls
    ]
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


def wire_tools(tools: Sequence[Any], *, strict: bool | None = None) -> list[Mapping[str, Any]]:
    """Returns tool definitions as ChatOpenAI sends them: OpenAI wire dicts.

    A provider's built-in tool that ``convert_to_openai_tool`` does not know (a dict whose
    ``type`` is not ``function``: ``{"type": "local_shell"}``, sent with ``.bind(tools=...)``)
    is returned as given, as it is sent; see :func:`builtin_tool_type`.

    Args:
        tools: Wire dicts (``{"type": "function", ...}``), or anything ``convert_to_openai_tool``
            accepts (LangChain tools, functions, JSON or Pydantic schemas), as ``bind_tools``
            converts them.
        strict: ``bind_tools``' ``strict``: when given, every definition is converted with it.

    Raises:
        ValueError: Naming the index of a tool that cannot be converted.
    """
    from langchain_core.utils.function_calling import convert_to_openai_tool

    converted: list[Mapping[str, Any]] = []
    for index, tool in enumerate(tools):
        if strict is None and isinstance(tool, Mapping) and tool.get("type") == "function":
            converted.append(tool)
            continue
        try:
            converted.append(convert_to_openai_tool(tool, strict=strict))
        except Exception as exc:  # LangChain raises ValueError, TypeError or pydantic's errors
            if builtin_tool_type(tool) is not None:
                converted.append(tool)
                continue
            raise ValueError(
                f"tool {index} ({type(tool).__name__}) cannot be converted to an OpenAI tool "
                f"definition ({type(exc).__name__}); pass a BaseTool, a function with a "
                "docstring, a pydantic model or an OpenAI tool dict."
            ) from None
    return converted


def builtin_tool_type(tool: object) -> str | None:
    """The ``type`` of a provider's built-in tool (``"web_search_preview"``, ``"local_shell"``):
    a dict whose ``type`` is a string other than ``function``; ``None`` for any other tool.

    Such a tool has no name, description or parameters of ours to weigh: the provider runs it.
    """
    if not isinstance(tool, Mapping):
        return None
    kind = tool.get("type")
    return kind if isinstance(kind, str) and kind != "function" else None


def openai_message(message: BaseMessage) -> dict[str, Any]:
    """Returns ``message`` as a whole OpenAI-format dict, as a request body holds it.

    With the calls whose arguments are not JSON: ChatOpenAI sends them, and
    ``convert_to_openai_messages`` alone would leave them out, orphaning their results.
    """
    from langchain_core.messages import convert_to_openai_messages

    wire: dict[str, Any] = convert_to_openai_messages(message)
    for call in getattr(message, "invalid_tool_calls", None) or ():
        function = {"name": call["name"], "arguments": call["args"]}
        wire.setdefault("tool_calls", []).append(
            {"id": call["id"], "type": "function", "function": function}
        )
    return wire


def escape_surrogates(text: str) -> str:
    """``text`` with each lone UTF-16 surrogate (``json.loads`` of a truncated page gives them),
    which no UTF-8 holds, written as its escape (``\\ud800``), as it can leave the process."""
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


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


_ROLE_ALIASES: Final = {"human": "user", "ai": "assistant", "developer": "system"}


def role_of(message: BaseMessage) -> str:
    """Returns the OpenAI role a message plays, whatever its Python type (``"developer"`` is
    ``"system"``, LangChain's ``"human"``/``"ai"`` are ``"user"``/``"assistant"``)."""
    role = wire_role(message).strip().lower()
    return _ROLE_ALIASES.get(role, role)
