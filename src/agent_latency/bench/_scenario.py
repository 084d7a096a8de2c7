"""What the bench sends: the scenario, the points where an agent called the model as it grew,
and the cache salt that keeps a server's prefix cache from serving a prompt meant to be prefilled.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage

from agent_latency._user_input import RequestFile, load_request_file

DEFAULT_SCENARIO: Final = "agent_8k.json"
"""The scenario shipped in ``agent_latency/scenarios``: an ~8,200-token agent request."""

_SALT_DIGITS: Final = 9  # cl100k splits digits in threes: always 3 tokens


def call_points(messages: Sequence[BaseMessage]) -> list[int]:
    """Returns the prompt lengths at which an agent called the model while this conversation grew.

    A model call produced each assistant message (consecutive assistant messages count once), so
    one call point is just before it; a conversation that does not end with an assistant message
    ends in one more call point: the request being benchmarked.
    """
    points = [
        index
        for index in range(1, len(messages))
        if isinstance(messages[index], AIMessage) and not isinstance(messages[index - 1], AIMessage)
    ]
    if messages and not isinstance(messages[-1], AIMessage):
        points.append(len(messages))
    return points


def load_scenario(path: str | Path | None = None) -> list[BaseMessage]:
    """Reads the conversation to benchmark: ``path``, or the shipped default scenario.

    Raises:
        ValueError: Naming the file, when it cannot be read or holds no valid messages.
    """
    return load_scenario_request(path).messages


def load_scenario_request(path: str | Path | None = None) -> RequestFile:
    """Reads the request to benchmark: ``path`` (a conversation or a whole request body, whose
    ``tools`` are sent and counted), or the shipped default scenario.

    Raises:
        ValueError: Naming the file, when it cannot be read or holds no valid messages.
    """
    if path is not None:
        request = load_request_file(path)
        if not request.messages:
            raise ValueError(f"{path}: the conversation is empty; give at least one message.")
        return request
    with resources.as_file(
        resources.files("agent_latency") / "scenarios" / DEFAULT_SCENARIO
    ) as file:
        return load_request_file(file)


def with_cache_salt(messages: Sequence[BaseMessage], salt: str) -> list[BaseMessage]:
    """Returns ``messages`` with a cache salt at the very start of the prompt (a new copy).

    A prompt that differs from every earlier one in its first tokens shares no prefix with them,
    so no server prefix cache can shorten its prefill: a fresh salt per call measures cold calls,
    one salt per session or conversation keeps its prefix its own. The input is not modified.
    """
    first, rest = messages[0], list(messages[1:])
    text = _salt_text(salt)
    content = first.content
    if isinstance(content, str):
        new_content: str | list[str | dict[str, Any]] = text + content
    else:
        new_content = [{"type": "text", "text": text}, *content]
    return [first.model_copy(update={"content": new_content}), *rest]


def without_cache_salt(messages: Sequence[BaseMessage], salt: str) -> list[BaseMessage]:
    """Returns ``messages`` without the salt :func:`with_cache_salt` put first (a new list).

    Messages that do not start with it are returned as they are. The input is not modified.
    """
    if not messages:
        return []
    first, rest = messages[0], list(messages[1:])
    text = _salt_text(salt)
    content = first.content
    if isinstance(content, str) and content.startswith(text):
        return [first.model_copy(update={"content": content.removeprefix(text)}), *rest]
    if isinstance(content, list) and content and content[0] == {"type": "text", "text": text}:
        return [first.model_copy(update={"content": content[1:]}), *rest]
    return [first, *rest]


def _salt_text(salt: str) -> str:
    return f"Request {salt}.\n\n"  # the words sent since the first figures: kept for them


def new_cache_salt() -> str:
    """Returns a fresh cache salt: nine random digits (always three cl100k tokens)."""
    return f"{secrets.randbelow(10**_SALT_DIGITS):0{_SALT_DIGITS}d}"
