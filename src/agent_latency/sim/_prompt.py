"""Prompt tokens as a server sees them, and the prefix cache that spares re-prefilling them.

A request is rendered as the configured model's chat template lays it out (``tokenizer`` of
:class:`~agent_latency.sim.SimulatorConfig`: a tokenizer name such as ``cl100k`` or ``qwen``, or
a model name, as ``TokenCounter.for_model`` takes them): what the template puts before the
messages (BOS, a default system prompt), the tool definitions, each message with its framing,
then the reply priming. The rendering is the counter's own, piece for piece, so
``usage.prompt_tokens`` equals ``count_messages + count_tools`` of the same counter for the
same request. Because every message is tokenised on its own, an unchanged message yields the
same tokens in every request, which is what makes token-prefix caching work across a growing
conversation. Each distinct message's tokens are kept for the next request (at most 4,096
messages and 64 MiB of tokens, the least recently used let go first), known by a digest of the
message, so the cache holds no message text.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from agent_latency._caches import LRUCache
from agent_latency.tokens import TokenCounter

from ._config import SimulatorConfig
from ._protocol import ChatRequest

_TOKEN_BYTES = 4  # array typecode "I"
_MESSAGE_CACHE_ENTRIES = 4096
_MESSAGE_CACHE_BYTES = 64 * 1024 * 1024
_KEY_BYTES = 16


def _ordered_json(value: object) -> str:
    # Key order is kept: it is part of what the template renders (tool JSON).
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _packed(ids: list[int]) -> bytes:
    return array("I", ids).tobytes()


class PromptTokenizer:
    """Turns chat requests into prompt token sequences, caching each distinct message.

    Args:
        counter: The counter whose vocabulary and framing the prompt is rendered with.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter
        self._blocks = LRUCache(_MESSAGE_CACHE_ENTRIES, _MESSAGE_CACHE_BYTES)
        self._framing = lru_cache(maxsize=16)(self._framing_tokens)

    @classmethod
    def for_config(cls, config: SimulatorConfig) -> PromptTokenizer:
        """Returns the tokenizer a :class:`~agent_latency.sim.SimulatorConfig` asks for: its
        ``prompt_tokenizer`` (``tokenizer``, else the served model's own).

        Raises:
            ValueError: When it cannot be used offline (e.g. ``"server"``).
        """
        name = config.prompt_tokenizer
        if name.strip().lower() == "server":
            raise ValueError(
                "SimulatorConfig: tokenizer 'server' would make the simulator ask itself. "
                "Fix: use a tokenizer name (cl100k, o200k, qwen, llama3) or a model name."
            )
        return cls(TokenCounter.for_model(name))

    @property
    def counter(self) -> TokenCounter:
        """The counter the prompts are rendered with."""
        return self._counter

    def tokens(self, request: ChatRequest) -> bytes:
        """Returns the prompt tokens of ``request``, packed as 4-byte unsigned integers."""
        first_role = str(request.messages[0]["role"]) if request.messages else None
        head, tail = self._framing(first_role)
        blocks = [head]
        if request.tools:
            tools = list(request.tools)
            # Keyed as a list, where messages are objects: the two never collide.
            blocks.append(self._block(self._counter.render_tools, tools, ["tools", tools]))
        blocks.extend(self._block(self._counter.render_message, m, m) for m in request.messages)
        blocks.append(tail)
        return b"".join(blocks)

    def _block(self, render: Callable[[Any], list[int]], item: Any, keyed_as: object) -> bytes:
        """Returns the packed tokens of one message (or the tools), rendered once."""
        rendered = _ordered_json(keyed_as).encode("utf-8", "surrogatepass")
        key = hashlib.blake2b(rendered, digest_size=_KEY_BYTES).digest()
        tokens: bytes | None = self._blocks.get(key)
        if tokens is None:
            tokens = _packed(render(item))
            self._blocks.put(key, tokens, _KEY_BYTES + len(tokens))
        return tokens

    def _framing_tokens(self, first_role: str | None) -> tuple[bytes, bytes]:
        head, tail = self._counter.render_framing(first_role)
        return _packed(head), _packed(tail)


def token_count(tokens: bytes) -> int:
    """Returns how many tokens a packed sequence from :class:`PromptTokenizer` holds."""
    return len(tokens) // _TOKEN_BYTES
