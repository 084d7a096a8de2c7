"""What is worked out from a message, remembered while the message is alive and unchanged.

The shortener's copies and the compactor's stubs are cached this way: an entry is served only
to the very message object it was made from, as long as :func:`~agent_latency._tokens.unchanged`
says it was not edited in place, and it ends with the message (a weak reference's callback lets
go of it at the next lookup).
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from typing import Any

from langchain_core.messages import BaseMessage

from agent_latency._tokens import LRUCache, stamp, unchanged


class MessageCache:
    """A bounded, thread-safe map from (a message, a key about it) to what it yields.

    Args:
        max_entries: How many entries it holds at most.
    """

    def __init__(self, max_entries: int) -> None:
        self._cache = LRUCache(max_entries)

    def __len__(self) -> int:
        return len(self._cache)

    def get(self, message: BaseMessage, key: Hashable) -> Any:
        """Returns what was put for ``message`` at ``key``, or ``None`` (gone, edited, never)."""
        entry = self._cache.get(key)
        if entry is not None and entry[0]() is message and unchanged(message, entry[1]):
            return entry[2]
        return None

    def put(self, message: BaseMessage, key: Hashable, value: Any) -> None:
        """Remembers ``value`` for ``message`` at ``key`` (include ``id(message)`` in the key).

        Content that cannot be copied is not remembered: its edits could not be told later.
        """
        try:
            seen = stamp(message)
        except Exception:
            return
        self._cache.put(key, (weakref.ref(message, self._cache.on_death(key)), seen, value))
