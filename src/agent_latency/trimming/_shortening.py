"""Shortening a message to a token target by cutting the middle out of its text.

The head and the tail of a long tool result or user message usually carry what matters (the
headers, the question, the conclusion, the error at the end); the middle is replaced by a marker
that says how many tokens were removed. Only the text changes: the copy keeps the message's type,
id, name, tool-call id and non-text parts (images), so it still answers the same tool call.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage

from agent_latency._caches import CopiesByValue, MessageCache
from agent_latency.tokens import IMAGE_PART_TYPES, TokenCounting

MARKER = "\n[... {removed} tokens removed ...]\n"
"""Put where the middle of a shortened text was."""

MIN_SHORTENED_TOKENS = 32
"""The fewest tokens a shortened copy has: framing, a marker and a little text (in every
language: a cut inside a character can lose a token or two, which are given back)."""

_CHARS_PER_TOKEN_WINDOW = 8
"""Characters read per wanted token before tokenising a head or tail; doubled when too few."""
_MAX_ATTEMPTS = 6
CACHE_BYTES = 16 * 1024 * 1024
"""The most text the shortened copies remembered by one shortener hold."""


class MessageShortener:
    """Cuts the middle out of message text, remembering recent results.

    A conversation is trimmed again on every model call with mostly the same message objects, so
    each (message, target) pair is shortened once and then looked up, as long as the message is
    alive and unchanged (:func:`~agent_latency._caches.stamp`: an edit in place of its
    content, name or tool-call id makes a new copy). A checkpointed agent's history comes back
    at each new turn as new objects: a tool result or user message of text equal to one
    shortened before (its type, text, name and tool-call id) gets a copy with that text again.
    A trim plans with :meth:`size` and asks for copies (:meth:`copy`) of the messages it sends
    only: most of an old history's shortened results are then cut, and one read back is
    remembered by identity only once its copy is asked for.

    Args:
        counter: Counts the tokens of the shortened copies.
        cache_size: How many shortened messages are remembered.
    """

    def __init__(
        self, counter: TokenCounting, *, cache_size: int = 256, cache_bytes: int = CACHE_BYTES
    ) -> None:
        self._counter = counter
        self._cache = MessageCache(cache_size, cache_bytes)  # thread-safe on its own
        self._by_value = CopiesByValue(cache_size, cache_bytes)

    def count(self, message: BaseMessage) -> int:
        """The tokens of ``message`` (a copy made elsewhere), counted as this shortener counts."""
        return self._counter.count_message(message)

    def size(self, message: BaseMessage, target: int) -> int:
        """The tokens of the copy :meth:`shorten` returns for ``message`` and ``target``."""
        found: tuple[BaseMessage | None, int] | None = self._cache.get(
            message, (id(message), target)
        )
        if found is not None:
            return found[1]
        return self._by_value.count_of(message, target, lambda m: self._anew(m, target))

    def copy(self, message: BaseMessage, target: int) -> BaseMessage:
        """The copy :meth:`shorten` returns for ``message`` and ``target``."""
        return self.shorten(message, target)[0]

    def shorten(self, message: BaseMessage, target: int) -> tuple[BaseMessage, int]:
        """Returns a copy of ``message`` of at most ``target`` tokens, and its token count.

        The copy keeps as much of the head and tail of the text as fits beside the marker. When
        even the marker alone does not fit (a tiny target, large non-text parts or a long
        ``tool_call_id``), the copy holds the marker only and its count exceeds ``target``; when
        no cut lands between :data:`MIN_SHORTENED_TOKENS` and ``target`` (retokenising adds a
        token or two at the cut), the copy is the smallest above ``target``. A
        shortened copy is never larger than the message: a message already within ``target``,
        or one whose text costs no more than the marker, is returned as is. Nor is it smaller than
        :data:`MIN_SHORTENED_TOKENS` (or ``target`` if less) while it keeps some text: where
        every shorter copy would be, the message is returned as is. List content becomes one
        text part followed by the non-text parts.

        Args:
            message: The message to shorten; never modified.
            target: The most tokens the copy may count, framing included.
        """
        key = (id(message), target)
        found: tuple[BaseMessage | None, int] | None = self._cache.get(message, key)
        if found is None:
            copy, count = self._by_value.copy_of(
                message, target, lambda m: self._shorten_uncached(m, target)
            )
            found = self._remember(message, key, copy, count)
        shortened = found[0]
        return (message if shortened is None else shortened), found[1]

    def _anew(self, message: BaseMessage, target: int) -> tuple[BaseMessage, int]:
        """Shortens ``message`` and remembers the copy by identity: a message met for the first
        time is usually met again as the same object (one read back is found by value)."""
        copy, count = self._shorten_uncached(message, target)
        self._remember(message, (id(message), target), copy, count)
        return copy, count

    def _remember(
        self, message: BaseMessage, key: tuple[int, int], copy: BaseMessage, count: int
    ) -> tuple[BaseMessage | None, int]:
        """Remembers ``copy`` of ``count`` tokens for ``message`` at ``key``; returns the entry."""
        # The message itself is remembered as None: the entry must not keep it alive.
        kept = None if copy is message else copy
        found = (kept, count)
        self._cache.put(message, key, found, _text_bytes(kept))
        return found

    def _shorten_uncached(self, message: BaseMessage, target: int) -> tuple[BaseMessage, int]:
        count = self._counter.count_message(message)
        if count <= target:
            return message, count
        texts, others = split_content(message.content)
        text = "\n".join(texts)
        framing = self._counter.count_message(message.model_copy(update={"content": others or ""}))
        text_tokens = count - framing
        marker_tokens = self._counter.count_text(MARKER.format(removed=text_tokens))
        keep = max(target - framing - marker_tokens, 0)
        floor = min(MIN_SHORTENED_TOKENS, target)
        # Text cut at token boundaries can retokenise a little longer, and a cut inside a
        # character loses it: the tokens of text kept are searched between a keep known to give
        # a copy below the floor and one known to exceed the target.
        below = above = None
        nearest: tuple[BaseMessage, int] | None = None  # the smallest copy above the target
        for _ in range(_MAX_ATTEMPTS):
            shortened, shortened_count = self._copy(message, text, others, keep, text_tokens)
            if shortened_count >= count:
                return message, count  # the marker would cost more than the text it replaces
            if keep == 0 or floor <= shortened_count <= target:
                return shortened, shortened_count
            if shortened_count > target:
                if nearest is None or shortened_count < nearest[1]:
                    nearest = (shortened, shortened_count)
                above, keep = keep, max(keep - (shortened_count - target), 0)
            else:
                below, keep = keep, keep + floor - shortened_count
            if below is not None and above is not None:
                if above - below <= 1:
                    break
                keep = (below + above) // 2
        # No copy between the floor and the target: the one nearest above it, else (every
        # shorter copy fell below the floor) the message as it is.
        return nearest or (message, count)

    def _copy(
        self, message: BaseMessage, text: str, others: list[Any], keep: int, text_tokens: int
    ) -> tuple[BaseMessage, int]:
        """A copy keeping about ``keep`` tokens of ``text`` around the marker, and its count."""
        shortened = _with_text(
            message,
            self._head(text, (keep + 1) // 2)
            + MARKER.format(removed=max(text_tokens - keep, 0))
            + self._tail(text, keep // 2),
            others,
        )
        return shortened, self._counter.count_message(shortened)

    def _head(self, text: str, tokens: int) -> str:
        """Returns about the first ``tokens`` tokens of ``text``, tokenising only a window."""
        if tokens == 0:
            return ""
        window = tokens * _CHARS_PER_TOKEN_WINDOW
        while True:
            encoded = self._counter.encode(text[:window])
            if len(encoded) > tokens or window >= len(text):
                break
            window *= 2
        # A cut inside a multi-byte character decodes to U+FFFD: leave the partial character out.
        return self._counter.decode(encoded[:tokens]).rstrip("\ufffd")

    def _tail(self, text: str, tokens: int) -> str:
        """Returns about the last ``tokens`` tokens of ``text``, tokenising only a window."""
        if tokens == 0:
            return ""
        window = tokens * _CHARS_PER_TOKEN_WINDOW
        while True:
            encoded = self._counter.encode(text[-window:])
            if len(encoded) > tokens or window >= len(text):
                break
            window *= 2
        return self._counter.decode(encoded[-tokens:]).lstrip("\ufffd")


def _with_text(message: BaseMessage, text: str, others: list[Any]) -> BaseMessage:
    """Returns a copy of ``message`` whose text is ``text``, non-text parts after it."""
    content: str | list[Any] = text
    if not isinstance(message.content, str):
        content = [{"type": "text", "text": text}, *others]
    return message.model_copy(update={"content": content})


def split_content(content: object) -> tuple[list[str], list[Any]]:
    """Returns the texts of a message's content and its other parts (images), in order: what
    is counted and sent as text (joined by line breaks, it is the text shortened, scored and
    read back).

    An Anthropic-style ``tool_result`` block's nested content counts as the text it is (as
    the counter counts it): the copy sends its text as a text part.
    """
    if isinstance(content, str) or content is None:  # null content is accepted as no text
        return [content or ""], []
    texts: list[str] = []
    others: list[Any] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, str):
            texts.append(part)
        elif part.get("type") == "tool_result" and isinstance(part.get("content"), str | list):
            nested_texts, nested_others = split_content(part["content"])
            texts += nested_texts
            others += nested_others
        elif part.get("type") not in IMAGE_PART_TYPES and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            others.append(part)
    return texts, others


def _text_bytes(message: BaseMessage | None) -> int:
    """About what a cached copy holds: the length of its content (at least 1)."""
    if message is None:
        return 1
    content = message.content
    return max(1, len(content) if isinstance(content, str) else len(str(content)))
