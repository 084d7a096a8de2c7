"""Prompt tokens as a server sees them, and the prefix cache that spares re-prefilling them.

A request is rendered the way chat templates lay it out: the tool definitions first, then each
message as ``<start> role <sep> content <end>``, then the reply priming ``<start> assistant
<sep>``. The framing tokens are ids outside the text vocabulary. Per message this costs what
:class:`~agent_latency._tokens.TokenCounter` charges (3 framing tokens, the role, the content, the
name plus one, the tool-call id, each tool call as 3 + name + arguments, 85 per image), so
``usage.prompt_tokens`` of a request without tools equals ``TokenCounter.count_messages``.
Because every message is tokenised on its own, an unchanged message yields the same tokens in
every request, which is what makes token-prefix caching work across a growing conversation.
"""

from __future__ import annotations

import json
from array import array
from collections import deque
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from agent_latency._tokens import IMAGE_PART_TYPES, TOKENS_PER_IMAGE, TokenCounter

from ._protocol import ChatRequest

# Ids past cl100k's vocabulary (100,277 entries): they can never collide with text tokens.
_START, _SEP, _END, _NAME, _IMAGE = 200_001, 200_002, 200_003, 200_004, 200_005
_TOKEN_BYTES = 4  # array typecode "I"
_MESSAGE_CACHE_SIZE = 4096


def _canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class PromptTokenizer:
    """Turns chat requests into prompt token sequences, caching each distinct message.

    Args:
        counter: The tokenizer of the text inside messages.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter
        self._message_tokens = lru_cache(maxsize=_MESSAGE_CACHE_SIZE)(self._tokenize_rendered)
        # The reply priming is the head of the answer's own frame: <start> assistant <sep>.
        priming = array("I", [_START])
        priming.extend(self._encode("assistant"))
        priming.append(_SEP)
        self._priming = priming.tobytes()

    def tokens(self, request: ChatRequest) -> bytes:
        """Returns the prompt tokens of ``request``, packed as 4-byte unsigned integers."""
        blocks: list[bytes] = []
        if request.tools:
            # A list, where messages are objects: the two renderings never collide.
            blocks.append(self._message_tokens(_canonical_json(["tools", request.tools])))
        blocks.extend(self._message_tokens(_canonical_json(m)) for m in request.messages)
        blocks.append(self._priming)
        return b"".join(blocks)

    def _tokenize_rendered(self, rendered: str) -> bytes:
        item: Mapping[str, Any] | list[Any] = json.loads(rendered)
        if isinstance(item, list):
            tools = _canonical_json(item[1])
            return _framed(self._encode("tools"), self._encode(tools)).tobytes()
        head = self._encode(item["role"])
        if isinstance(item.get("name"), str):
            head.extend(self._encode(item["name"]))
            head.append(_NAME)
        body = self._content_tokens(item.get("content"))
        if isinstance(item.get("tool_call_id"), str):
            body.extend(self._encode(item["tool_call_id"]))
        for call in item.get("tool_calls") or ():
            function = call["function"]
            body.extend(
                _framed(self._encode(function["name"]), self._encode(function["arguments"]))
            )
        return _framed(head, body).tobytes()

    def _encode(self, text: str) -> array[int]:
        return array("I", self._counter.encode(text))

    def _content_tokens(self, content: object) -> array[int]:
        if isinstance(content, str):
            return self._encode(content)
        tokens = array("I")
        for part in content if isinstance(content, list) else ():
            if part.get("type") in IMAGE_PART_TYPES:
                tokens.extend([_IMAGE] * TOKENS_PER_IMAGE)
            elif isinstance(part.get("text"), str):
                tokens.extend(self._encode(part["text"]))
        return tokens


def _framed(head: array[int], body: array[int]) -> array[int]:
    """Returns ``<start> head <sep> body <end>``."""
    framed = array("I", [_START])
    framed.extend(head)
    framed.append(_SEP)
    framed.extend(body)
    framed.append(_END)
    return framed


def token_count(tokens: bytes) -> int:
    """Returns how many tokens a packed sequence from :class:`PromptTokenizer` holds."""
    return len(tokens) // _TOKEN_BYTES


def _common_prefix_tokens(a: bytes, b: bytes) -> int:
    """Returns how many leading tokens two packed sequences share (binary search, C compares)."""
    low, high = 0, min(len(a), len(b)) // _TOKEN_BYTES
    while low < high:
        middle = (low + high + 1) // 2
        end = middle * _TOKEN_BYTES
        if a[:end] == b[:end]:
            low = middle
        else:
            high = middle - 1
    return low


class PrefixCache:
    """Remembers recent prompts and finds the longest token prefix a new prompt shares.

    Like vLLM and llama.cpp, at least the last prompt token is always prefilled (the model needs
    its logits), so a repeated prompt reuses all tokens but one.

    Args:
        entries: How many recent prompts are remembered.
    """

    def __init__(self, entries: int) -> None:
        self._prompts: deque[bytes] = deque(maxlen=entries)

    def reusable_tokens(self, tokens: bytes) -> int:
        """Returns how many leading tokens of ``tokens`` need no prefill."""
        shared = max((_common_prefix_tokens(tokens, seen) for seen in self._prompts), default=0)
        return min(shared, token_count(tokens) - 1)

    def remember(self, tokens: bytes) -> None:
        """Adds a prefilled prompt, evicting the least recently added one when full."""
        if tokens in self._prompts:
            self._prompts.remove(tokens)
        self._prompts.append(tokens)
