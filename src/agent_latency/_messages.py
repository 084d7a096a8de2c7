"""Turning what users pass (messages, OpenAI dicts, prompt values) into LangChain messages."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages
from langchain_core.prompt_values import PromptValue

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
    return [_coerce_item(item, index) for index, item in enumerate(value)]


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


def _coerce_item(item: object, index: int) -> BaseMessage:
    if isinstance(item, BaseMessage):
        # Messages are not validated when mutated after construction.
        _check_content(item.content, index, item.type)
        return item
    if not isinstance(item, Mapping):
        raise TypeError(
            f"Message {index}: expected a LangChain message or an OpenAI-format dict, got "
            f"{type(item).__name__}."
        )
    role = item.get("role", item.get("type"))
    if not isinstance(role, str) or role not in _KNOWN_ROLES:
        shown = repr(role) if isinstance(role, str) else f"of type {type(role).__name__}"
        raise ValueError(
            f"Message {index}: unknown role {shown}; use one of {sorted(_KNOWN_ROLES)}."
        )
    _check_content(item.get("content"), index, role)
    try:
        return convert_to_messages([dict(item)])[0]
    except (ValueError, TypeError, KeyError, AttributeError, NotImplementedError) as exc:
        # LangChain's own message quotes the whole dict, content included: keep only the kind.
        raise ValueError(
            f"Message {index} ({role}): not a valid OpenAI-format message "
            f"({type(exc).__name__}); check its tool_calls and tool_call_id fields."
        ) from None


def read_json_file(path: str | Path, what: str = "a JSON file") -> Any:
    """Parses a JSON file, turning every way it can fail into a ValueError naming the file.

    Args:
        path: The file.
        what: What the file should be, for the fix (e.g. ``"a --json file of an earlier run"``).
    """
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: file not found; give the path of {what}.") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}."
        ) from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read ({type(exc).__name__}).") from None


def load_messages_file(path: str | Path) -> list[BaseMessage]:
    """Reads an OpenAI-format conversation from a JSON file.

    The file holds either a list of messages or an object with a ``"messages"`` list.

    Raises:
        ValueError: Naming the file when it cannot be read, is not JSON, or holds bad messages.
    """
    data = read_json_file(path, "an OpenAI-format conversation")
    try:
        return coerce_messages(data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
