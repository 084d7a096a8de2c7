"""Compacting old tool results to a stub before whole history rounds are dropped.

An agent's history is mostly tool results, and an old one is rarely read again once the model
has answered from it. Replacing it with a one-line stub keeps the call, the fact that it was
answered and the start of the answer, for a few tokens, so more rounds of the conversation fit
the same budget (LangChain's ``ClearToolUsesEdit`` and Anthropic's context editing do the same).
The stub depends only on the result's own text, so it is identical on every call and the
server's prefix cache keeps matching across it.
"""

from __future__ import annotations

from typing import Final, cast

from langchain_core.messages import BaseMessage, ToolMessage

from agent_latency._caches import CopiesByValue, MessageCache
from agent_latency.tokens import TokenCounting

STUB: Final = "[earlier tool result compacted; it began: {head}]"
"""The text that replaces a compacted tool result."""
HEAD_CHARS: Final = 120
"""How much of the result's first non-empty line the stub keeps."""


def stub_text(message: ToolMessage) -> str:
    """Returns the stub that stands for ``message``'s result: its first line, cut short."""
    content = message.content
    if isinstance(content, str) or content is None:  # null content is accepted as empty
        text = content or ""
    else:
        text = "\n".join(
            part if isinstance(part, str) else str(part.get("text", ""))
            for part in content
            if isinstance(part, str) or isinstance(part.get("text"), str)
        )
    head = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if len(head) > HEAD_CHARS:
        head = head[:HEAD_CHARS].rsplit(" ", 1)[0] + " …"
    return STUB.format(head=head)


def compacted(message: ToolMessage) -> ToolMessage:
    """Returns a copy of ``message`` whose content is its stub; ids and name are kept."""
    return message.model_copy(update={"content": stub_text(message)})


class Compactor:
    """Makes and counts stubs, remembering them while the original message is alive and unchanged.

    Unchanged as :func:`~agent_latency._caches.stamp` tells it: an edit in place of the content,
    name or tool-call id makes a new stub. A checkpointed agent's history comes back at each new
    turn as new objects: a result equal to one compacted before (its text, name and tool-call id)
    gets its stub's text again (:class:`~agent_latency._caches.CopiesByValue`). A trim plans with
    :meth:`size` and asks for the stubs (:meth:`stub`) of the results it sends only: one read
    back is remembered by identity only once its stub is asked for.

    Args:
        counter: Counts the stubs' tokens.
        cache_size: How many stubs are remembered.
    """

    def __init__(self, counter: TokenCounting, *, cache_size: int = 4096) -> None:
        self._counter = counter
        self._cache = MessageCache(cache_size)
        self._by_value = CopiesByValue(cache_size, _BY_VALUE_BYTES)

    def size(self, message: ToolMessage) -> int:
        """The tokens of the stub of ``message``, framing included."""
        found: tuple[ToolMessage, int] | None = self._cache.get(message, id(message))
        if found is not None:
            return found[1]
        return self._by_value.count_of(message, "stub", self._anew)

    def stub(self, message: ToolMessage) -> ToolMessage:
        """The stub of ``message``: the same object while ``message`` is alive and unchanged
        (and remembered)."""
        found: tuple[ToolMessage, int] | None = self._cache.get(message, id(message))
        if found is None:
            stub, count = self._by_value.copy_of(message, "stub", self._stub)
            found = (cast(ToolMessage, stub), count)
            self._cache.put(message, id(message), found)
        return found[0]

    def _anew(self, message: BaseMessage) -> tuple[BaseMessage, int]:
        """Makes the stub of ``message`` and remembers it by identity: a result met for the first
        time is usually met again as the same object (one read back is found by value)."""
        stub, count = self._stub(message)
        self._cache.put(message, id(message), (stub, count))
        return stub, count

    def _stub(self, message: BaseMessage) -> tuple[BaseMessage, int]:
        stub = compacted(cast(ToolMessage, message))
        return stub, self._counter.count_message(stub)


_BY_VALUE_BYTES: Final = 16 * 1024 * 1024
"""The most characters of results and their stubs' texts remembered by value."""
