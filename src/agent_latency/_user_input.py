"""What users pass, as LangChain messages: in memory (:func:`coerce_messages`, without copying)
and from JSON files (:func:`load_request_file`), with errors that name the file and the item and
never quote message content."""

from __future__ import annotations

import copy
import json
import operator
import sys
from collections.abc import Mapping, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, Final, NamedTuple

from langchain_core.exceptions import OutputParserException
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    InvalidToolCall,
    convert_to_messages,
    messages_from_dict,
)
from langchain_core.output_parsers.openai_tools import make_invalid_tool_call, parse_tool_call
from langchain_core.prompt_values import PromptValue

from agent_latency._caches import LRUCache
from agent_latency._validation import file_problem

_KNOWN_ROLES = frozenset(
    {"system", "developer", "user", "human", "assistant", "ai", "tool", "function"}
)


def coerce_messages(
    value: object, *, check_content: bool = True, converted: ConvertedDicts | None = None
) -> list[BaseMessage]:
    """Returns the messages held by ``value`` without copying message objects.

    Args:
        value: A sequence of LangChain messages and/or OpenAI-format dicts, a ``PromptValue``, or
            a mapping with a ``"messages"`` key holding such a sequence.
        check_content: Check the content of the message objects given as such (LangChain does
            not check content set in place). ``False`` when the caller checks each message's
            with :func:`check_message_content` before reading it: when all items are message
            objects, only their types are then checked here (one pass in C; a trimmer's
            analysis checks the messages it reads anew, not every message on every call).
        converted: Where the messages made of dicts are remembered (see
            :class:`ConvertedDicts`); ``None``: each dict is converted anew.

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
    # Most items are messages with text content: nothing to check or convert (an agent passes
    # hundreds of them on every model call). Their few types are checked, not each item: an
    # isinstance of a pydantic model goes through ABCMeta.
    if all(issubclass(kind, BaseMessage) for kind in set(map(type, messages))) and (
        not check_content or all(map(isinstance, map(_CONTENT, messages), repeat(str)))
    ):
        return messages
    if converted is not None:
        return converted.messages(messages)
    return [_coerce_item(item, index) for index, item in enumerate(messages)]


class ConvertedDicts:
    """The messages made of OpenAI-format dicts, each remembered while its dict is unchanged.

    The raw OpenAI SDK keeps a conversation as a list of dicts that grows by appending (the
    article's setup): a trimmer given it on every call would convert, and so analyse, every
    message anew (about 14 ms a call at 650 messages, against 0.4 ms for message objects). A
    dict met again, equal to the deep copy taken when it was converted, gives the same message
    object, which the trimmer's analysis then finds unchanged; a dict edited in place, however
    deep, is converted anew. A dict given twice in one list is converted each time after the
    first. Safe to share between threads.

    Args:
        max_dicts: How many dicts are remembered at most.
        max_bytes: About how many bytes of their text they hold at most (the dicts' own
            strings, shared with the copies and the messages).
    """

    def __init__(self, max_dicts: int = 16_384, max_bytes: int = 16 * 1024 * 1024) -> None:
        self._memo = LRUCache(max_dicts, max_bytes)

    def messages(self, items: list[object]) -> list[BaseMessage]:
        """``items`` as messages (see :func:`coerce_messages`), the dicts met before as then."""
        messages = []
        met: set[int] = set()
        for index, item in enumerate(items):
            if type(item) is not dict or id(item) in met:
                messages.append(_coerce_item(item, index))
                continue
            met.add(id(item))
            found: tuple[dict[str, Any], BaseMessage] | None = self._memo.get(id(item))
            if found is not None and _equal(found[0], item):
                messages.append(found[1])
                continue
            message = _coerce_item(item, index)
            messages.append(message)
            try:
                snapshot = copy.deepcopy(item)
            except Exception:  # something in it cannot be copied: converted on every call
                continue
            content = item.get("content")
            weight = sys.getsizeof(content) if isinstance(content, str) else 1024
            self._memo.put(id(item), (snapshot, message), weight)
        return messages


def _equal(snapshot: dict[str, Any], item: dict[str, Any]) -> bool:
    """Whether ``item`` is as ``snapshot`` (a value whose comparison fails: not the same)."""
    try:
        return bool(snapshot == item)
    except Exception:
        return False


_CONTENT = operator.attrgetter("content")


def check_message_content(message: BaseMessage, index: int) -> None:
    """Checks the content of a message object as :func:`coerce_messages` does.

    Raises:
        ValueError: Naming the message (at ``index``) and the fix, when its content was set in
            place to something no chat API accepts. Message content is never quoted.
    """
    content = message.content
    if type(content) is not str:
        _check_content(content, index, message.type)


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
    """Returns the calls of ``message``, valid then invalid, as ChatOpenAI sends them (LangChain
    checks them when the message is built, not when they are set in place afterwards).

    Raises:
        ValueError: Naming the message (at ``index``) and the fix, when ``tool_calls`` or
            ``invalid_tool_calls`` is not a list of dicts with those keys.
    """
    found: list[Mapping[str, Any]] = []
    for field, keys in _CALL_KEYS:
        calls = getattr(message, field, None)  # None: deleted from the message in place
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
        check_message_content(item, index)
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
    """An assistant dict whose calls have non-JSON ``arguments``, as ChatOpenAI parses it (into
    ``invalid_tool_calls``, where ``convert_to_messages`` would raise); ``None`` when all parse."""
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

    Only a regular file of at most ``MAX_FILE_BYTES`` is read (see ``file_problem``); ``what``
    the file should be goes into the fix (e.g. ``"a --json file of an earlier run"``).
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
