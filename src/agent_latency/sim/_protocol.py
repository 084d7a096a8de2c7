"""The OpenAI chat-completions wire format: request validation and error bodies.

Requests are checked as strictly as OpenAI checks them, for the fields the simulator reads, so a
client that works against the simulator sends what a real server accepts. Every refusal is a
:class:`RequestError` that renders as OpenAI's ``{"error": {...}}`` body.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse

from agent_latency._chat_format import escape_surrogates
from agent_latency._validation import is_integer

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
TOOL_CHOICES = frozenset({"none", "auto", "required"})
# json.loads joins an escaped surrogate pair into one character: a surrogate left is a lone one.
_SURROGATE = re.compile("[\ud800-\udfff]")


class RequestError(Exception):
    """A request the server refuses, with the OpenAI-style error body it answers with.

    Args:
        status: The HTTP status code.
        message: A human-readable explanation; never contains the API key or message content.
        param: The request field at fault, e.g. ``"messages[2].role"``.
        code: OpenAI's machine-readable code, e.g. ``"invalid_api_key"``.
        error_type: OpenAI's error type.
        headers: Extra response headers (e.g. ``Retry-After``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        error_type: str = "invalid_request_error",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.error_type = error_type
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """Returns OpenAI's JSON body of the error (also what a stream sends as an event)."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        """Returns the error as OpenAI sends it."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def _invalid(param: str, message: str) -> RequestError:
    return RequestError(400, f"Invalid '{param}': {message}", param=param)


def _type_name(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), f"a {type(value).__name__}")


def _wrong_type(param: str, expected: str, value: object) -> RequestError:
    return RequestError(
        400,
        f"Invalid type for '{param}': expected {expected}, but got {_type_name(value)} instead.",
        param=param,
        code="invalid_type",
    )


@dataclass(frozen=True)
class ChatRequest:
    """The parts of a chat-completions request the simulator acts on.

    Attributes:
        model: The requested model name.
        messages: The conversation, as validated OpenAI-format dicts.
        tools: The offered tool definitions.
        tool_choice: ``"none"``, ``"auto"`` or ``"required"``.
        forced_tool: The tool the request names in ``tool_choice``, if any.
        parallel_tool_calls: Whether an answer may call several tools at once.
        stream: Whether the answer is streamed as server-sent events.
        include_usage: Whether a streamed answer ends with a usage chunk.
        max_tokens: The output cap from ``max_tokens`` / ``max_completion_tokens``, if any.
        cache_prompt: ``False`` when the request opts out of prefix caching (llama.cpp's field).
    """

    model: str
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...] = field(default=())
    tool_choice: str = "auto"
    forced_tool: str | None = None
    parallel_tool_calls: bool = True
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    cache_prompt: bool = True


def parse_chat_request(body: object) -> ChatRequest:
    """Validates a decoded JSON body of ``POST /v1/chat/completions``.

    Args:
        body: The decoded JSON body.

    Returns:
        The request's meaningful parts.

    Raises:
        RequestError: 400 naming the first field that is missing or malformed.
    """
    if not isinstance(body, dict):
        raise RequestError(
            400, f"The request body must be a JSON object, but got {_type_name(body)}."
        )
    _refuse_lone_surrogates(body)
    model = body.get("model")
    if model is None:
        raise RequestError(400, "You must provide a model parameter.", param="model")
    if not isinstance(model, str):
        raise _wrong_type("model", "a string", model)
    messages = body.get("messages")
    if messages is None:
        raise RequestError(
            400, "Missing required parameter: 'messages'.", param="messages", code="missing"
        )
    if not isinstance(messages, list):
        raise _wrong_type("messages", "an array of objects", messages)
    if not messages:
        raise RequestError(
            400,
            "Invalid 'messages': empty array. Expected an array with minimum length 1.",
            param="messages",
            code="empty_array",
        )
    for index, message in enumerate(messages):
        _check_message(message, f"messages[{index}]")
    _check_tool_results(messages)
    tools = _parse_tools(body.get("tools"))
    tool_choice, forced_tool = _parse_tool_choice(body.get("tool_choice"), tools)
    return ChatRequest(
        model=model,
        messages=tuple(messages),
        tools=tools,
        tool_choice=tool_choice,
        forced_tool=forced_tool,
        parallel_tool_calls=_optional_bool(body, "parallel_tool_calls", default=True),
        stream=_optional_bool(body, "stream", default=False),
        include_usage=_parse_include_usage(body.get("stream_options")),
        max_tokens=_parse_max_tokens(body),
        cache_prompt=_optional_bool(body, "cache_prompt", default=True),
    )


def _refuse_lone_surrogates(body: dict[str, Any]) -> None:
    """Refuses a string holding half a UTF-16 surrogate pair (``"\\ud800"``): it is no text.

    JSON's escapes can spell one (a truncated page decoded with ``json.loads`` holds them), but
    no UTF-8 text can: neither the tokenizer nor the answer could carry it.
    """
    for param, text in _strings(body, ""):
        found = None if text.isascii() else _SURROGATE.search(text)
        if found is not None:
            raise _invalid(
                param,
                f"the string holds a lone UTF-16 surrogate ({escape_surrogates(found.group())} at "
                f"character {found.start()}), which is not valid Unicode. Send UTF-8 text; a "
                "character beyond U+FFFF is escaped as a surrogate pair.",
            )


def _strings(value: object, param: str) -> Iterator[tuple[str, str]]:
    """Yields every string in a decoded JSON value, object keys included, with its path, in
    document order (a loop, not recursion: the body may nest as deep as the parser allows)."""
    pending: list[tuple[str, object]] = [(param, value)]
    while pending:
        at, item = pending.pop()
        if isinstance(item, str):
            yield at, item
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                key_at = f"{at}.{escape_surrogates(key)}" if at else escape_surrogates(key)
                children += [(key_at, key), (key_at, child)]
            pending.extend(reversed(children))
        elif isinstance(item, list):
            pending.extend((f"{at}[{i}]", child) for i, child in reversed(list(enumerate(item))))


def _optional_bool(body: Mapping[str, Any], name: str, *, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _wrong_type(name, "a boolean", value)
    return value


def _check_message(message: object, param: str) -> None:
    if not isinstance(message, dict):
        raise _wrong_type(param, "an object", message)
    role = message.get("role")
    if not isinstance(role, str):
        raise _wrong_type(f"{param}.role", "a string", role)
    if role not in ROLES:
        raise _invalid(
            f"{param}.role",
            f"unknown role {role!r}; supported roles are {', '.join(sorted(ROLES))}.",
        )
    content = message.get("content")
    if content is None and role not in ("assistant", "function"):
        raise RequestError(
            400, f"Missing required parameter: '{param}.content'.", param=f"{param}.content"
        )
    if content is not None and not isinstance(content, str | list):
        raise _wrong_type(f"{param}.content", "a string or an array of objects", content)
    if isinstance(content, list):
        for index, part in enumerate(content):
            _check_content_part(part, f"{param}.content[{index}]")
    name = message.get("name")
    if name is not None and not isinstance(name, str):
        raise _wrong_type(f"{param}.name", "a string", name)
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise _wrong_type(f"{param}.tool_call_id", "a string", message.get("tool_call_id"))
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant":
            raise _invalid(f"{param}.tool_calls", "only assistant messages carry tool calls.")
        if not isinstance(tool_calls, list):
            raise _wrong_type(f"{param}.tool_calls", "an array of objects", tool_calls)
        for index, call in enumerate(tool_calls):
            _check_tool_call(call, f"{param}.tool_calls[{index}]")


def _check_tool_results(messages: list[dict[str, Any]]) -> None:
    """Refuses, as OpenAI does, a tool message that answers no call of the message before."""
    calls: set[str] | None = None  # ids of the calls the current run of tool messages answers
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            if calls is None:
                raise RequestError(
                    400,
                    f"Invalid parameter: messages with role 'tool' must be a response to a "
                    f"preceding message with 'tool_calls' (messages[{index}]).",
                    param=f"messages[{index}].role",
                )
            if message["tool_call_id"] not in calls:
                raise _invalid(
                    f"messages[{index}].tool_call_id",
                    "it answers none of the 'tool_calls' of the preceding assistant message.",
                )
        elif message["role"] == "assistant" and message.get("tool_calls"):
            calls = {call["id"] for call in message["tool_calls"]}
        else:
            calls = None


def _check_content_part(part: object, param: str) -> None:
    if not isinstance(part, dict):
        raise _wrong_type(param, "an object", part)
    if not isinstance(part.get("type"), str):
        raise _wrong_type(f"{param}.type", "a string", part.get("type"))
    if part["type"] == "text" and not isinstance(part.get("text"), str):
        raise _wrong_type(f"{param}.text", "a string", part.get("text"))


def _check_tool_call(call: object, param: str) -> None:
    if not isinstance(call, dict):
        raise _wrong_type(param, "an object", call)
    if not isinstance(call.get("id"), str):
        raise _wrong_type(f"{param}.id", "a string", call.get("id"))
    function = call.get("function")
    if not isinstance(function, dict):
        raise _wrong_type(f"{param}.function", "an object", function)
    for key in ("name", "arguments"):
        if not isinstance(function.get(key), str):
            raise _wrong_type(f"{param}.function.{key}", "a string", function.get(key))


def _parse_tools(tools: object) -> tuple[Mapping[str, Any], ...]:
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise _wrong_type("tools", "an array of objects", tools)
    for index, tool in enumerate(tools):
        param = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise _wrong_type(param, "an object", tool)
        if tool.get("type") != "function":
            raise _invalid(f"{param}.type", "only 'function' tools are supported.")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise _wrong_type(f"{param}.function", "an object", function)
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise _wrong_type(f"{param}.function.name", "a non-empty string", function.get("name"))
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise _wrong_type(f"{param}.function.parameters", "an object", parameters)
    return tuple(tools)


def _parse_tool_choice(
    choice: object, tools: tuple[Mapping[str, Any], ...]
) -> tuple[str, str | None]:
    """Returns the tool-choice mode and the name of the forced tool, if any."""
    if choice is None:
        return "auto", None
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise _invalid("tool_choice", f"expected one of {', '.join(sorted(TOOL_CHOICES))}.")
        return choice, None
    if not isinstance(choice, dict):
        raise _wrong_type("tool_choice", "a string or an object", choice)
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise _wrong_type("tool_choice.function.name", "a string", name)
    if name not in {tool["function"]["name"] for tool in tools}:
        raise _invalid("tool_choice", f"tool {name!r} is not among the offered tools.")
    return "required", name


def _parse_include_usage(options: object) -> bool:
    if options is None:
        return False
    if not isinstance(options, dict):
        raise _wrong_type("stream_options", "an object", options)
    return _optional_bool(options, "include_usage", default=False)


def _parse_max_tokens(body: Mapping[str, Any]) -> int | None:
    caps: list[int] = []
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if not is_integer(value):
            raise _wrong_type(name, "an integer", value)
        if value < 1:
            raise _invalid(
                name, f"integer below minimum value. Expected a value >= 1, got {value}."
            )
        caps.append(value)
    return min(caps, default=None)
