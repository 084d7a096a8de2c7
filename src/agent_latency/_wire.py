"""OpenAI's chat format, both ways: what users pass in, and what ChatOpenAI puts on the wire.

In: :func:`coerce_messages` turns what users pass (LangChain messages, OpenAI-format dicts, prompt
values, a state dict) into LangChain messages without copying them, and the ``load_*`` functions
read such messages from JSON files, with errors that name the file and the item. Out:
:func:`wire_message`, :func:`wire_tools` and :func:`wire_role` give the fields ChatOpenAI sends,
which every count is made of; :func:`role_of` is the role a message plays, whatever its type.
Back: :class:`ServerUsage` is what a server reported about one call (its usage, its prefix
cache, llama.cpp's prefill timings), read from a raw response body (:func:`usage_of_body`) or
from a LangChain message (:func:`usage_of_message`): the one reader of every provider's shape.
"""

from __future__ import annotations

import json
import operator
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, Final, NamedTuple

from langchain_core.exceptions import OutputParserException
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    InvalidToolCall,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    messages_from_dict,
)
from langchain_core.output_parsers.openai_tools import make_invalid_tool_call, parse_tool_call
from langchain_core.prompt_values import PromptValue

from agent_latency._validation import file_problem, is_number

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


def wire_tools(tools: Sequence[Any], *, strict: bool | None = None) -> list[Mapping[str, Any]]:
    """Returns tool definitions as ChatOpenAI sends them: OpenAI wire dicts.

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
            raise ValueError(
                f"tool {index} ({type(tool).__name__}) cannot be converted to an OpenAI tool "
                f"definition ({type(exc).__name__}); pass a BaseTool, a function with a "
                "docstring, a pydantic model or an OpenAI tool dict."
            ) from None
    return converted


def openai_message(message: BaseMessage) -> dict[str, Any]:
    """Returns ``message`` as a whole OpenAI-format dict, as a request body holds it.

    With the calls whose arguments are not JSON: ChatOpenAI sends them, and
    ``convert_to_openai_messages`` alone would leave them out, orphaning their results.
    """
    from langchain_core.messages import convert_to_openai_messages

    wire: dict[str, Any] = convert_to_openai_messages(message)
    invalid = getattr(message, "invalid_tool_calls", None)
    if invalid:
        wire["tool_calls"] = [
            *wire.get("tool_calls", []),
            *(
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["args"]},
                }
                for call in invalid
            ),
        ]
    return wire


def escape_surrogates(text: str) -> str:
    """``text`` with each lone UTF-16 surrogate written as its escape (``\\ud800``).

    ``json.loads`` of a truncated page gives such strings, and no UTF-8 can hold them: where
    text leaves the process (a span, a file, an error body) they are written as the escape,
    which JSON reads back as the same string.
    """
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
    """Returns the OpenAI role a message plays, whatever its Python type.

    ``ChatMessage(role="user")`` is ``"user"``; ``"developer"`` messages and
    ``ChatMessage(role="system")`` are ``"system"``; LangChain's ``"human"``/``"ai"`` map to
    ``"user"``/``"assistant"``.
    """
    role = wire_role(message).strip().lower()
    return _ROLE_ALIASES.get(role, role)


# --- In: what users pass, as LangChain messages ----------------------------------------
_KNOWN_ROLES = frozenset(
    {"system", "developer", "user", "human", "assistant", "ai", "tool", "function"}
)


def coerce_messages(value: object) -> list[BaseMessage]:
    """Returns the messages held by ``value`` without copying message objects.

    Args:
        value: A sequence of LangChain messages and/or OpenAI-format dicts, a ``PromptValue``, or
            a mapping with a ``"messages"`` key holding such a sequence.

    Returns:
        A new list; message objects given as such are the same objects.

    Raises:
        TypeError: When ``value`` or one of its items is of an unsupported type; the message names
            the item's index.
        ValueError: When a dict item is malformed (unknown role, missing content, bad tool calls);
            the message names the item's index. Message content is never quoted.
    """
    if isinstance(value, PromptValue):
        return value.to_messages()
    if isinstance(value, Mapping):
        if "messages" not in value:
            raise TypeError(
                "Expected a list of messages or a dict with a 'messages' key; got a dict with "
                f"keys {sorted(map(str, value))[:10]}."
            )
        value = value["messages"]
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(
            "Expected a list of messages (LangChain messages or OpenAI-format dicts), a "
            f"PromptValue, or a dict with a 'messages' key; got {type(value).__name__}."
        )
    messages = list(value)
    # Most items are messages with text content: nothing to check or convert, found in C (an
    # agent passes hundreds of them on every model call).
    if all(map(isinstance, messages, repeat(BaseMessage))) and all(
        map(isinstance, map(_CONTENT, messages), repeat(str))
    ):
        return messages
    return [_coerce_item(item, index) for index, item in enumerate(messages)]


_CONTENT = operator.attrgetter("content")


def _check_content(content: object, index: int, role: object) -> None:
    """Refuses content that no chat API accepts, naming the item instead of failing later."""
    valid = content is None or isinstance(content, str)
    if isinstance(content, list):
        valid = all(isinstance(part, str | Mapping) for part in content)
    if not valid:
        raise ValueError(
            f"Message {index} ({role}): content must be a string, a list of parts (strings or "
            f"dicts) or null, got {type(content).__name__}"
            + (" with other items" if isinstance(content, list) else "")
            + "."
        )
    for number, part in enumerate(content if isinstance(content, list) else ()):
        problem = _part_problem(part)
        if problem is not None:
            raise ValueError(
                f"Message {index} ({role}), content part {number}: {problem}; write "
                '{"type": "text", "text": "..."} or {"type": "image_url", "image_url": '
                '{"url": "..."}}.'
            )


# The keys every call must have: ChatOpenAI sends them, a ToolMessage answers a call by its id.
_CALL_KEYS: Final = (("tool_calls", ("name", "args", "id")), ("invalid_tool_calls", ("id",)))


def tool_calls_of(message: AIMessage, index: int) -> tuple[Mapping[str, Any], ...]:
    """Returns the calls of ``message``, valid then invalid, as ChatOpenAI sends them.

    LangChain checks them when the message is built, not when they are set in place afterwards;
    a trim reads them once per message it has not seen (the fast path of
    :func:`coerce_messages` does not look inside messages).

    Raises:
        ValueError: Naming the message (at ``index``) and the fix, when ``tool_calls`` or
            ``invalid_tool_calls`` is not a list of dicts with those keys.
    """
    found: list[Mapping[str, Any]] = []
    for field, keys in _CALL_KEYS:
        calls = getattr(message, field)
        if not isinstance(calls, list):
            raise ValueError(
                f"Message {index} (ai): {field} must be a list of calls, got "
                f"{type(calls).__name__}. Fix: set it to a list ([] for no calls)."
            )
        for number, call in enumerate(calls):
            if not isinstance(call, Mapping) or not all(key in call for key in keys):
                raise ValueError(
                    f"Message {index} (ai), {field} item {number}: a call needs the keys "
                    f"{', '.join(map(repr, keys))}. Fix: keep each call as the model returned it "
                    "(a ToolMessage answers a call by its id)."
                )
        found += calls
    return tuple(found)


def _part_problem(part: object) -> str | None:
    """What is wrong with a content part, or ``None`` (other part types are passed on as is)."""
    if not isinstance(part, Mapping):
        return None  # a plain string
    kind = part.get("type")
    if not isinstance(kind, str):
        return "a part needs a string 'type'"
    if kind == "text" and not isinstance(part.get("text"), str):
        return "a text part needs a string 'text'"
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        if not isinstance(url, str) or not url:
            return "an image_url part needs an 'image_url' with a 'url'"
    return None


def _coerce_item(item: object, index: int) -> BaseMessage:
    if isinstance(item, BaseMessage):
        # Messages are not validated when mutated after construction.
        _check_content(item.content, index, item.type)
        return item
    if isinstance(item, str):
        return HumanMessage(item)  # as LangChain's chat models read a bare string
    if isinstance(item, tuple | list) and len(item) == 2 and isinstance(item[1], str | list):
        # LangChain's (role, content) form: ("user", "hi"), ["system", "..."].
        item = {"role": item[0], "content": item[1]}
    if not isinstance(item, Mapping):
        raise TypeError(
            f"Message {index}: expected a LangChain message, an OpenAI-format dict, a string or "
            f"a (role, content) pair, got {type(item).__name__}."
        )
    role = item.get("role", item.get("type"))
    if not isinstance(role, str) or role not in _KNOWN_ROLES:
        shown = repr(role) if isinstance(role, str) else f"of type {type(role).__name__}"
        raise ValueError(
            f"Message {index}: unknown role {shown}; use one of {sorted(_KNOWN_ROLES)}."
        )
    if "content" not in item and isinstance(item.get("data"), Mapping):
        raise ValueError(
            f"Message {index}: a LangChain message dump ({{'type': ..., 'data': {{...}}}}), not "
            "an OpenAI-format message. Fix: load it with "
            "langchain_core.messages.messages_from_dict, or write {'role': ..., 'content': ...}."
        )
    if "content" not in item:
        if not item.get("tool_calls"):
            raise ValueError(
                f"Message {index} ({role}): no 'content'. Fix: add 'content' (a string or a list "
                "of parts; only an assistant message with tool_calls may leave it out)."
            )
        item = {**item, "content": ""}  # OpenAI's calls without text; LangChain wants the key
    _check_content(item.get("content"), index, role)
    try:
        return _with_invalid_calls(item) or convert_to_messages([dict(item)])[0]
    except (ValueError, TypeError, KeyError, AttributeError, NotImplementedError) as exc:
        # LangChain's own message quotes the whole dict, content included: keep only the kind.
        raise ValueError(
            f"Message {index} ({role}): not a valid OpenAI-format message "
            f"({type(exc).__name__}); check its tool_calls and tool_call_id fields."
        ) from None


def _with_invalid_calls(item: Mapping[str, Any]) -> BaseMessage | None:
    """An assistant dict whose calls have non-JSON ``arguments``, as ChatOpenAI parses it.

    OpenAI can return such calls; ChatOpenAI keeps them in ``AIMessage.invalid_tool_calls`` (and
    sends them back as they were), where ``convert_to_messages`` would raise. ``None`` for a
    dict whose calls all parse (or that has none).
    """
    calls = item.get("tool_calls")
    if item.get("role") not in ("assistant", "ai") or not isinstance(calls, list):
        return None
    valid: list[Any] = []
    invalid: list[InvalidToolCall] = []
    for call in calls:
        try:
            parse_tool_call(call, return_id=True)
        except OutputParserException as exc:
            invalid.append(make_invalid_tool_call(call, str(exc)))
        else:
            valid.append(call)
    if not invalid:
        return None
    message = convert_to_messages([{**item, "tool_calls": valid}])[0]
    return message.model_copy(update={"invalid_tool_calls": invalid})


def read_json_file(path: str | Path, what: str = "a JSON file") -> Any:
    """Parses a JSON file, turning every way it can fail into a ValueError naming the file.

    Only a regular file of at most ``MAX_FILE_BYTES`` is read (see ``file_problem``).

    Args:
        path: The file.
        what: What the file should be, for the fix (e.g. ``"a --json file of an earlier run"``).
    """
    path = Path(path)
    problem = file_problem(path)  # /dev/zero would fill the memory, a FIFO hang the read
    if problem is not None:
        raise ValueError(f"{path}: {problem}. Fix: give the path of {what}.")
    try:
        raw = path.read_bytes()
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise ValueError(f"{path}: the file is UTF-16 text. Fix: save it as UTF-8.")
        return json.loads(raw.decode("utf-8-sig"))  # a BOM (Windows Notepad writes one) is fine
    except FileNotFoundError:
        raise ValueError(f"{path}: file not found; give the path of {what}.") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}."
        ) from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read.") from None
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: not UTF-8 text (byte {exc.start}). Fix: save it as UTF-8."
        ) from None
    except ValueError as exc:
        if str(exc).startswith(f"{path}:"):
            raise
        raise ValueError(
            f"{path}: a number has more than {sys.get_int_max_str_digits()} digits. "
            "Fix: shorten it to a real value."
        ) from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({type(exc).__name__}).") from None


def load_messages_file(path: str | Path) -> list[BaseMessage]:
    """Reads an OpenAI-format conversation from a JSON file.

    The file holds either a list of messages or an object with a ``"messages"`` list.

    Raises:
        ValueError: Naming the file when it cannot be read, is not JSON, or holds bad messages.
    """
    return load_request_file(path).messages


class RequestFile(NamedTuple):
    """A Chat Completions request read from a file: what a trim counts.

    Attributes:
        messages: The conversation.
        tools: The ``tools`` of the request (OpenAI tool dicts), if any.
        response_format: Its ``response_format``, if any.
        document: The JSON document as read (a list of messages, or the request object).
    """

    messages: list[BaseMessage]
    tools: list[Mapping[str, Any]]
    response_format: Mapping[str, Any] | None
    document: Any


def load_request_file(path: str | Path) -> RequestFile:
    """Reads a conversation, or a whole Chat Completions request body, from a JSON file.

    The file holds a list of messages, or an object with a ``"messages"`` list and optionally
    ``"tools"`` (a list of OpenAI tool dicts) and ``"response_format"`` (an object). The
    messages are OpenAI-format dicts, or a LangChain ``messages_to_dict`` dump.

    Raises:
        ValueError: Naming the file (and the item) when it cannot be read, is not JSON, or holds
            bad messages, tools or response format.
    """
    data = read_json_file(path, "an OpenAI-format conversation")
    try:
        messages = coerce_messages(_from_dump(data))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    request: Mapping[str, Any] = data if isinstance(data, Mapping) else {}
    tools = request.get("tools") or []
    if not isinstance(tools, list):
        raise ValueError(f"{path}: 'tools' must be a list of OpenAI tool objects.")
    for index, tool in enumerate(tools):
        problem = _tool_problem(tool)
        if problem is not None:
            raise ValueError(
                f"{path}: tools[{index}]{problem}, e.g. "
                '{"type": "function", "function": {"name": ..., "parameters": {...}}}.'
            )
    response_format = request.get("response_format")
    if response_format is not None and not isinstance(response_format, Mapping):
        raise ValueError(
            f"{path}: 'response_format' must be an object, e.g. "
            '{"type": "json_schema", "json_schema": {...}}.'
        )
    return RequestFile(messages, tools, response_format, data)


def _from_dump(data: Any) -> Any:
    """The messages of a LangChain ``messages_to_dict`` dump (alone or under ``"messages"``);
    anything else as it is."""
    items = data.get("messages") if isinstance(data, Mapping) else data
    if not isinstance(items, list) or not items or not all(map(_is_dump, items)):
        return data
    try:
        messages = messages_from_dict(items)
    except (ValueError, TypeError, KeyError) as exc:  # pydantic's ValidationError: a ValueError
        # Its message quotes the input, content included: keep only the kind.
        raise ValueError(
            f"a LangChain message dump that messages_from_dict cannot read "
            f"({type(exc).__name__}). Fix: write it with langchain_core.messages.messages_to_dict."
        ) from None
    return messages if items is data else {**data, "messages": messages}


def _is_dump(item: object) -> bool:
    return (
        isinstance(item, Mapping)
        and "content" not in item
        and isinstance(item.get("type"), str)
        and isinstance(item.get("data"), Mapping)
    )


def _tool_problem(tool: object) -> str | None:
    """What makes ``tool`` a definition OpenAI refuses (HTTP 400), or ``None``."""
    if not isinstance(tool, Mapping) or not isinstance(tool.get("type"), str):
        return " must be an object with a 'type'"
    if tool["type"] != "function":
        return None  # another kind of tool (e.g. "custom"): OpenAI's to judge
    function = tool.get("function")
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        return ".function must be an object with a 'name'"
    if "parameters" in function and not isinstance(function["parameters"], Mapping):
        return ".function.parameters must be a JSON schema object"
    return None


# --- Back: what the server reported about a call ---------------------------------------------

MAX_REPORTED_TOKENS: Final = 100_000_000
"""More tokens than any context window holds: a reported count above it is impossible."""
_DAY_MS: Final = 86_400_000.0


@dataclass(frozen=True, slots=True)
class ServerUsage:
    """What a server reported about one call; ``None`` where it said nothing (never a stand-in 0).

    Attributes:
        prompt_tokens: ``usage.prompt_tokens`` (cached ones included).
        completion_tokens: ``usage.completion_tokens``.
        cached_tokens: Prompt tokens read from the prefix cache: OpenAI's
            ``prompt_tokens_details.cached_tokens`` (and service-tier variants), DeepSeek's
            ``prompt_cache_hit_tokens``, or llama.cpp's ``timings.cache_n``.
        cache_creation_tokens: Prompt tokens written to the cache (Anthropic-style).
        prefill_ms: How long the server says it prefilled: llama.cpp's ``timings.prompt_ms``, or
            vLLM's ``metrics.time_to_first_token_ms`` (``--enable-per-request-metrics``: from
            scheduling to the first token, its queue excluded).
        prefill_tokens: How many tokens that prefill took in (``timings.prompt_n``).
        decode_ms: How long the server says it generated the answer, from its first output token
            to its last: ``timings.predicted_ms``, or vLLM's ``metrics.generation_time_ms``.
        invalid: The reported fields that were impossible (negative, not a whole number, above
            :data:`MAX_REPORTED_TOKENS`, more cached than prompt tokens); their values are
            ``None`` here.
    """

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cache_creation_tokens: int | None = None
    prefill_ms: float | None = None
    prefill_tokens: int | None = None
    decode_ms: float | None = None
    invalid: tuple[str, ...] = ()

    @property
    def prefilled_tokens(self) -> int | None:
        """Prompt tokens the server had to prefill: those it did not read from its cache."""
        if self.prefill_tokens is not None:
            return self.prefill_tokens
        if self.prompt_tokens is None or self.cached_tokens is None:
            return None
        return self.prompt_tokens - self.cached_tokens


class _Reader:
    """Reads counts from loosely typed mappings, noting the impossible ones by name."""

    def __init__(self) -> None:
        self.invalid: list[str] = []

    def count(self, source: object, field: str, name: str) -> int | None:
        value = source.get(field) if isinstance(source, Mapping) else None
        if value is None:
            return None
        # llama.cpp and some proxies send whole counts as floats (12.0).
        if is_number(value) and value == int(value) and 0 <= value <= MAX_REPORTED_TOKENS:
            return int(value)
        self.invalid.append(name)
        return None

    def detail(self, details: object, kind: str) -> int | None:
        """Sums ``kind`` and its service-tier variants (``priority_cache_read``) in ``details``."""
        if not isinstance(details, Mapping):
            return None
        name = "cache_creation_tokens" if kind == "cache_creation" else "cached_tokens"
        found = [
            self.count(details, key, name)
            for key in details
            if isinstance(key, str) and (key == kind or key.endswith(f"_{kind}"))
        ]
        counts = [c for c in found if c is not None]
        return sum(counts) if counts else None

    def milliseconds(self, source: object, field: str, name: str) -> float | None:
        value = source.get(field) if isinstance(source, Mapping) else None
        if value is None:
            return None
        if is_number(value) and 0 <= value <= _DAY_MS:
            return float(value)
        self.invalid.append(name)
        return None

    def usage(self, **fields: Any) -> ServerUsage:
        prompt, cached = fields.get("prompt_tokens"), fields.get("cached_tokens")
        if prompt is not None and cached is not None and cached > prompt:
            self.invalid.append("cached_tokens")
            fields["cached_tokens"] = None
        return ServerUsage(**fields, invalid=tuple(dict.fromkeys(self.invalid)))


def usage_of_body(body: object) -> ServerUsage:
    """Reads a raw OpenAI-compatible response body or final stream chunk.

    ``usage`` gives the counts (OpenAI's ``prompt_tokens_details``, DeepSeek's
    ``prompt_cache_hit_tokens``); llama.cpp's ``timings`` gives the prefill time and, where
    ``usage`` says nothing of the cache, ``cache_n``; vLLM's ``metrics``, the prefill and
    decode times.
    """
    fields = body if isinstance(body, Mapping) else {}
    timings = _Timings(fields.get("timings"), fields.get("metrics"))
    return _read_raw(_Reader(), fields.get("usage"), timings)


def usage_of_message(message: object) -> ServerUsage:
    """Reads a LangChain ``AIMessage`` (a whole answer, or a streamed one merged).

    ``usage_metadata`` first (LangChain's mapping of OpenAI's fields), then the raw
    ``token_usage`` that blocking calls keep in ``response_metadata`` (DeepSeek's cache hits),
    then llama.cpp's ``timings`` and vLLM's ``metrics``, which ``build_chat_model``'s model
    keeps there.
    """
    read = _Reader()
    metadata = getattr(message, "response_metadata", None)
    metadata = metadata if isinstance(metadata, Mapping) else {}
    raw = metadata.get("token_usage")
    timings = _Timings(metadata.get("timings"), metadata.get("metrics"))
    usage = getattr(message, "usage_metadata", None)
    if not isinstance(usage, Mapping) or not usage:
        return _read_raw(read, raw, timings)
    details = usage.get("input_token_details")
    return read.usage(
        prompt_tokens=read.count(usage, "input_tokens", "prompt_tokens"),
        completion_tokens=read.count(usage, "output_tokens", "completion_tokens"),
        cached_tokens=_cached(read, read.detail(details, "cache_read"), raw, timings.llama),
        cache_creation_tokens=read.detail(details, "cache_creation"),
        **timings.read(read),
    )


class _Timings(NamedTuple):
    """A server's own timing of a call: llama.cpp's ``timings``, vLLM's per-request ``metrics``."""

    llama: object
    vllm: object

    def read(self, read: _Reader) -> dict[str, Any]:
        """The prefill time and tokens and the decode time, llama.cpp's figures first."""
        llama, vllm = self.llama, self.vllm
        prefill_ms = read.milliseconds(llama, "prompt_ms", "prefill_ms")
        decode_ms = read.milliseconds(llama, "predicted_ms", "decode_ms")
        return {
            "prefill_ms": (
                prefill_ms
                if prefill_ms is not None
                else read.milliseconds(vllm, "time_to_first_token_ms", "prefill_ms")
            ),
            "prefill_tokens": read.count(llama, "prompt_n", "prefill_tokens"),
            "decode_ms": (
                decode_ms
                if decode_ms is not None
                else read.milliseconds(vllm, "generation_time_ms", "decode_ms")
            ),
        }


def _read_raw(read: _Reader, usage: object, timings: _Timings) -> ServerUsage:
    """Reads OpenAI's raw ``usage`` object, with DeepSeek's, llama.cpp's and vLLM's fields."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, Mapping) else None
    return read.usage(
        prompt_tokens=read.count(usage, "prompt_tokens", "prompt_tokens"),
        completion_tokens=read.count(usage, "completion_tokens", "completion_tokens"),
        cached_tokens=_cached(read, read.detail(details, "cached_tokens"), usage, timings.llama),
        cache_creation_tokens=None,
        **timings.read(read),
    )


def _cached(read: _Reader, reported: int | None, raw: object, timings: object) -> int | None:
    """The cached tokens: as ``usage`` reports them, else DeepSeek's, else llama.cpp's."""
    if reported is not None:
        return reported
    deepseek = read.count(raw, "prompt_cache_hit_tokens", "cached_tokens")
    return deepseek if deepseek is not None else read.count(timings, "cache_n", "cached_tokens")
