"""What tells the parts of a prompt the same from one call to the next, in any process.

The cost-aware trimmer's record of a conversation outlives the message objects: a checkpointer
restores the conversation as new objects, and another replica never had them. So what was sent
is told by content: a digest of each message as ChatOpenAI sends it
(:func:`~agent_latency._wire.wire_message`), worked out once per message object and again only
after the message was edited in place (the one rule for that: ``_caches.MessageCache``, by
``stamp``/``unchanged``); and a digest of what precedes the messages in the prompt: the tool
definitions sent and the response format.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import BaseMessage

from agent_latency._caches import MessageCache
from agent_latency._wire import wire_message
from agent_latency.trimming._result import TrimResult

DIGEST_BYTES: Final = 16
_MAX_MESSAGES: Final = 16_384  # digests remembered; an entry ends with its message


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


def _json(value: object) -> bytes:
    # ASCII: a lone surrogate (a truncated page's json.loads) is escaped, never an encode error.
    return json.dumps(value, sort_keys=True, default=str).encode("ascii")


class MessageDigests:
    """Digests of messages as they are sent, each worked out once while the message is unchanged.

    Bounded (:data:`_MAX_MESSAGES` entries, each let go with its message) and safe to share
    between threads.
    """

    def __init__(self) -> None:
        self._cache = MessageCache(_MAX_MESSAGES)

    def of(self, message: BaseMessage) -> bytes:
        """The digest of ``message`` as ChatOpenAI sends it."""
        key = id(message)
        found: bytes | None = self._cache.get(message, key)
        if found is None:
            found = _digest(_json(wire_message(message)))
            self._cache.put(message, key, found)
        return found

    def of_all(self, messages: Sequence[BaseMessage]) -> list[bytes]:
        """The digest of each message, in order."""
        return list(map(self.of, messages))

    def same(self, a: BaseMessage, b: BaseMessage) -> bool:
        """Whether two messages are sent alike."""
        return a is b or self.of(a) == self.of(b)


def sequence_digest(digests: Sequence[bytes]) -> bytes:
    """One digest of a sequence of messages' digests, in order."""
    return _digest(b"".join(digests))


def request_digest(result: TrimResult, request: Mapping[str, Any]) -> bytes:
    """The digest of what a trimmed request sends before its messages.

    The names of the tools sent (those a tool budget kept, or the request's own) and of the
    output tools, the strictness, and the tokens of the tool definitions and of the response
    format: an edit that changes a tool's definition changes its count.
    """
    tools = result.tools if result.tools is not None else request.get("tools") or ()
    names = [_tool_name(tool) for tool in (*tools, *(request.get("output_tools") or ()))]
    return _digest(
        _json(
            [
                names,
                request.get("strict_tools"),
                result.tool_tokens,
                result.response_format_tokens,
            ]
        )
    )


def _tool_name(tool: object) -> str:
    if isinstance(tool, Mapping):
        function = tool.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
        return str(name)
    return str(getattr(tool, "name", None) or getattr(tool, "__name__", type(tool).__name__))
