"""Token counting in the model's own tokens and chat template, offline, with per-message caches.

:class:`TokenCounter` implements the :class:`TokenCounting` protocol over a vocabulary
(``_vocabularies``) and a chat-template framing (``_framing``); ``TokenCounter()`` counts the way
OpenAI publishes for chat models (cl100k_base and OpenAI's framing).
"""

from __future__ import annotations

import re
import sys
import weakref
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from langchain_core.messages import BaseMessage

from agent_latency._caches import LRUCache, stamp, unchanged
from agent_latency._chat_format import content_key, wire_message, wire_role, wire_tools
from agent_latency._user_input import coerce_messages
from agent_latency.tokens._framing import (
    Piece,
    Special,
    framing_named,
    model_family,
)
from agent_latency.tokens._vocabularies import (
    TOKENIZER_CHOICES,
    Vocabulary,
    canonical_vocabulary_name,
    load_vocabulary,
    tokenizer_vocabulary,
)

__all__ = ["TokenCounter", "TokenCounting"]

_CONTENT_CACHE_BYTES = 64 * 1024 * 1024
_SYNTHETIC_IDS = 1 << 30  # ids of framing tokens a vocabulary lacks: past every real vocabulary
_OPAQUE_ID = _SYNTHETIC_IDS - 1
_ENTRY_BYTES = 200  # what a cache entry costs besides the strings it holds
_SURROGATE = re.compile("[\ud800-\udfff]")
_T = TypeVar("_T")


@runtime_checkable
class TokenCounting(Protocol):
    """Counts prompt tokens the way one model's server does: its vocabulary and chat template.

    Every ``count_*`` result is a number of prompt tokens; together,
    ``count_request(messages, tools, response_format)`` is what the server prefills.

    Attributes:
        name: The tokenizer, for diagnostics (e.g. ``"qwen + qwen framing"``).
        exact: Whether the vocabulary is the model's own (``False``: a cl100k estimate).

    A counter may also say, as ``TokenCounter.folds_system`` does, that its chat template takes
    one system message (the recall marker then goes into the first user message); one without
    that attribute is taken not to.
    """

    name: str
    exact: bool

    def encode(self, text: str) -> list[int]:
        """Returns the token ids of ``text``."""

    def decode(self, tokens: Sequence[int]) -> str:
        """Returns the text of ``tokens``."""

    def count_text(self, text: str) -> int:
        """Returns the number of tokens of ``text``, without framing."""

    def count_message(self, message: BaseMessage) -> int:
        """Returns the tokens one message adds to a prompt, its framing included."""

    def count_framing(self, messages: Sequence[BaseMessage]) -> int:
        """Returns what a request adds to its messages: BOS, default system prompt, priming."""

    def count_messages(self, messages: Sequence[BaseMessage | Mapping[str, Any]]) -> int:
        """Returns the messages' tokens plus :meth:`count_framing` (OpenAI dicts accepted)."""

    def count_tools(self, tools: Sequence[Any]) -> int:
        """Returns the tokens of tool definitions as the template renders them."""

    def count_response_format(self, response_format: Mapping[str, Any]) -> int:
        """Returns the prompt tokens of a ``response_format`` (0 where it is not in the prompt)."""

    def count_request(
        self,
        messages: Sequence[BaseMessage | Mapping[str, Any]],
        tools: Sequence[Any] = (),
        response_format: Mapping[str, Any] | None = None,
    ) -> int:
        """Returns the prompt tokens of a whole request (OpenAI dicts accepted)."""


class TokenCounter:
    """Counts prompt tokens the way an OpenAI-compatible chat endpoint bills them.

    Counts are cached per message, twice: by object identity, for as long as the message lives (a
    conversation passed again costs a dictionary look-up per message, however long it is; a
    message edited in place, even inside its list content, is counted again; the entry ends
    with the message), and by content (equal messages built anew, e.g. from OpenAI dicts, are
    not tokenised again; bounded by ``cache_size`` entries and 64 MiB of the strings they are
    keyed by, as ``sys.getsizeof`` counts them). Tool definitions are counted anew on every call
    (a trimmer's ``ExtrasCounter`` remembers its requests' counts).

    Args:
        encoding: A vocabulary name (``cl100k_base``, ``o200k_base``, ``qwen``, ``qwen3.6``,
            ``llama3``), a ``tokenizer.json`` path, another tiktoken encoding cached locally, or
            a :class:`~agent_latency.tokens.Vocabulary` object.
        cache_size: How many distinct message contents the content cache remembers.
        framing: The chat template's framing (``openai``, ``qwen``, ``qwen2.5``, ``qwen3``,
            ``chatml``, ``llama3``, ``llama3.1``, ``gemma``, ``mistral``).
        exact: Whether ``encoding`` is the model's own vocabulary (reported, not enforced).

    Raises:
        ValueError: When the vocabulary cannot be loaded offline, the framing is unknown or
            ``cache_size`` is not positive.
    """

    def __init__(
        self,
        encoding: str | Vocabulary = "cl100k_base",
        *,
        cache_size: int = 65_536,
        framing: str = "openai",
        exact: bool = True,
    ) -> None:
        if not isinstance(cache_size, int) or isinstance(cache_size, bool) or cache_size <= 0:
            raise ValueError(
                f"TokenCounter: cache_size must be a positive integer, got {cache_size!r}."
            )
        self._framing = framing_named(framing)
        self._vocab = _vocabulary(encoding)
        self.exact = exact
        self.name = f"{self._vocab.name} + {self._framing.name} framing"
        # id -> (weak reference, stamp, count)
        self._by_identity: dict[int, tuple[Any, ...]] = {}
        self._by_content = LRUCache(cache_size, _CONTENT_CACHE_BYTES)
        self.tokenized_messages = 0
        """How many messages were tokenised (cache misses) since creation; for tests and tuning."""

    @classmethod
    def for_model(
        cls,
        model: str,
        *,
        tokenizer: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 10.0,
        cache_size: int = 65_536,
    ) -> TokenCounter:
        """Returns the counter that counts like ``model``'s server, offline.

        The vocabulary and framing come from the model name: Qwen (exact, ChatML), OpenAI
        (o200k_base for gpt-4o/4.1/5 and o-series, cl100k_base for older), Llama 3 (exact),
        Gemma (a cl100k_base estimate with Gemma's framing), Mistral's instruct models and
        Llama 2 (a cl100k_base estimate with their ``[INST]`` framing), anything else a
        cl100k_base estimate with OpenAI's framing. ``model`` may also be a tokenizer name (as
        ``tokenizer`` below), which then brings its usual framing.

        Args:
            model: The model name, e.g. ``"qwen-7b-chat"`` or ``"meta-llama/Llama-3.1-8B"``.
            tokenizer: Overrides the vocabulary: a name of :data:`TOKENIZER_CHOICES`, the path
                of a local ``tokenizer.json`` (needs the ``tokenizers`` package), or ``"server"``
                for the endpoint's own tokenize route (needs ``base_url``).
            base_url: The endpoint, for ``tokenizer="server"``.
            api_key: Its key, for ``tokenizer="server"``; never logged or shown.
            timeout_s: Per-request timeout of the tokenize route, for ``tokenizer="server"``.
                A server that runs one request at a time (llama-cpp-python) answers only
                after the completion it is serving, so ``from_settings`` passes the
                endpoint's own ``llm.timeout_seconds``.
            cache_size: As for the constructor.

        Raises:
            ValueError: Naming the value and the choices for an unknown tokenizer name, or when
                a vocabulary cannot be loaded.
        """
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"TokenCounter.for_model: model must be a model name, got {model!r}.")
        family = model_family(model)
        if tokenizer is None and family is None and canonical_vocabulary_name(model):
            tokenizer = model
        if tokenizer is None:
            vocabulary, framing, exact = family or ("cl100k_base", "openai", False)
            return cls(vocabulary, cache_size=cache_size, framing=framing, exact=exact)
        vocab, default_framing, exact = tokenizer_vocabulary(
            tokenizer, model=model, base_url=base_url, api_key=api_key, timeout_s=timeout_s
        )
        framing = family[1] if family else default_framing
        if family and not exact:
            exact = family[0] == vocab.name and family[2]
        return cls(vocab, cache_size=cache_size, framing=framing, exact=exact)

    def __repr__(self) -> str:
        return (
            f"TokenCounter(name={self.name!r}, exact={self.exact}, cached={len(self._by_content)})"
        )

    @property
    def folds_system(self) -> bool:
        """Whether the chat template folds the system message into a user turn (Gemma, Mistral,
        Llama 2): it takes one system message, then user and assistant turns alternating from a
        user one."""
        return self._framing.folds_system

    def encode(self, text: str) -> list[int]:
        """Returns the token ids of ``text``."""
        return _tokenized(self._vocab.encode, text)

    def decode(self, tokens: Sequence[int]) -> str:
        """Returns the text of ``tokens``."""
        return self._vocab.decode(tokens)

    def count_text(self, text: str) -> int:
        """Returns the number of tokens in ``text``."""
        return _tokenized(self._vocab.count, text)

    def count_message(self, message: BaseMessage) -> int:
        """Returns the tokens one message adds to a prompt, framing included."""
        entry = self._by_identity.get(id(message))
        if entry is not None and entry[0]() is message and unchanged(message, entry[1]):
            return entry[2]  # type: ignore[no-any-return]
        key = content_key(message)
        count = self._by_content.get(key)
        if count is None:
            self.tokenized_messages += 1
            count = self._count_pieces(self._framing.message(wire_message(message)))
            self._by_content.put(key, count, _key_bytes(key))
        self._remember(message, count)
        return int(count)

    def count_framing(self, messages: Sequence[BaseMessage]) -> int:
        """Returns what a request adds to its messages: BOS, default system prompt, priming."""
        head, tail = self._framing.request(wire_role(messages[0]) if messages else None)
        return self._count_pieces([*head, *tail])

    def count_messages(self, messages: Sequence[BaseMessage | Mapping[str, Any]]) -> int:
        """Returns the prompt tokens of a whole conversation, framing and reply priming included.

        Args:
            messages: LangChain messages and/or OpenAI-format dicts (as the trimmer takes them).

        Raises:
            TypeError: When an item is not a message (naming its index).
            ValueError: When an OpenAI-format dict is malformed (naming its index).
        """
        converted = coerce_messages(messages)
        return sum(map(self.count_message, converted)) + self.count_framing(converted)

    def count_tools(self, tools: Sequence[Any]) -> int:
        """Returns the tokens of tool definitions as the template renders them.

        Args:
            tools: OpenAI wire dicts (``{"type": "function", "function": {...}}``), or anything
                ``convert_to_openai_tool`` accepts (LangChain tools, functions, schemas). A
                provider's built-in tool (``{"type": "local_shell"}``) is counted as given.
        """
        tools = list(tools)
        if not tools:
            return 0
        return self._count_pieces(self._framing.tools(wire_tools(tools)))

    def count_response_format(self, response_format: Mapping[str, Any]) -> int:
        """Returns the prompt tokens of a ``response_format`` (0 for template families)."""
        return self._count_pieces(self._framing.response_format(response_format))

    def count_request(
        self,
        messages: Sequence[BaseMessage | Mapping[str, Any]],
        tools: Sequence[Any] = (),
        response_format: Mapping[str, Any] | None = None,
    ) -> int:
        """Returns the prompt tokens of a whole request: messages (LangChain messages and/or
        OpenAI-format dicts, as for :meth:`count_messages`), framing, tools, format."""
        total = self.count_messages(messages) + self.count_tools(tools)
        if response_format is not None:
            total += self.count_response_format(response_format)
        return total

    # --- The rendering the simulator prefills, piece for piece what the counts add up. ------
    def render_message(self, message: Mapping[str, Any]) -> list[int]:
        """Returns the token ids of one wire-format message, framing included."""
        return self._ids(self._framing.message(message))

    def render_framing(self, first_role: str | None) -> tuple[list[int], list[int]]:
        """Returns the ids a request adds before its messages and after them."""
        head, tail = self._framing.request(first_role)
        return self._ids(head), self._ids(tail)

    def render_tools(self, tools: Sequence[Mapping[str, Any]]) -> list[int]:
        """Returns the ids of the tool definitions (wire dicts) of a request."""
        return self._ids(self._framing.tools(tools))

    def _count_pieces(self, pieces: Sequence[Piece]) -> int:
        count = 0
        for piece in pieces:
            if isinstance(piece, int):
                count += piece
            elif isinstance(piece, Special):
                count += 1
            elif piece:
                count += self.count_text(piece)
        return count

    def _ids(self, pieces: Sequence[Piece]) -> list[int]:
        ids: list[int] = []
        for piece in pieces:
            if isinstance(piece, int):
                ids += [_OPAQUE_ID] * piece
            elif isinstance(piece, Special):
                found = self._vocab.special_id(piece)
                ids.append(_synthetic_id(piece) if found is None else found)
            elif piece:
                ids += self.encode(piece)
        return ids

    def _remember(self, message: BaseMessage, count: int) -> None:
        try:
            seen = stamp(message)
        except Exception:  # content that cannot be copied is only cached by content
            return
        key = id(message)
        by_identity = self._by_identity

        def forget(ref: weakref.ref[BaseMessage]) -> None:
            # The message is gone: its id may be reused, and the entry must not outlive it.
            if by_identity.get(key, (None,))[0] is ref:
                by_identity.pop(key, None)

        by_identity[key] = (weakref.ref(message, forget), seen, count)


def _vocabulary(encoding: object) -> Vocabulary:
    if isinstance(encoding, str):
        return load_vocabulary(encoding)
    if all(hasattr(encoding, a) for a in ("name", "encode", "decode", "count", "special_id")):
        return encoding  # type: ignore[return-value]
    raise ValueError(
        f"TokenCounter: encoding must be a vocabulary name ({', '.join(TOKENIZER_CHOICES[:-2])}) "
        f"or a tokenizer.json path, got {type(encoding).__name__}."
    )


def _tokenized(tokenize: Callable[[str], _T], text: str) -> _T:
    """``tokenize(text)``; where the tokenizer refuses a lone UTF-16 surrogate (``json.loads`` of
    a truncated page gives them), of the text as the server reads it from the client's JSON: a
    pair as its character, a lone one as U+FFFD."""
    try:
        return tokenize(text)
    except (TypeError, ValueError):
        if _SURROGATE.search(text) is None:  # another refusal: the tokenizer's own error
            raise
        return tokenize(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))


def _key_bytes(key: tuple[Any, ...]) -> int:
    """What a content-cache entry holds: the strings of its key (content, name, id, calls)."""
    role, text, name, tool_call_id, calls = key
    strings = [role, text, name or "", tool_call_id or "", *(s for call in calls for s in call)]
    return _ENTRY_BYTES + sum(map(sys.getsizeof, strings))


def _synthetic_id(special: str) -> int:
    return _SYNTHETIC_IDS + zlib.crc32(special.encode()) % (1 << 24)
