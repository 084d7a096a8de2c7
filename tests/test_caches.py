"""The one bounded cache (LRUCache) and the one rule for telling a message was edited in place."""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from agent_latency._caches import LRUCache, MessageCache, stamp, unchanged


def test_cache_lookup_survives_an_eviction_by_another_thread() -> None:
    """A look-up and a concurrent insertion that evicts the looked-up key must not collide.

    The race is forced: right after the look-up finds its key, another thread inserts a key that
    evicts it, and the look-up waits briefly for that thread to finish.
    """
    cache = LRUCache(1)
    cache.put("a", 1)

    class RacingDict(OrderedDict[Hashable, Any]):
        def get(self, key: Hashable, default: Any = None) -> Any:
            value = super().get(key, default)
            if key == "a":
                evictor = threading.Thread(target=cache.put, args=("b", 2))
                evictor.start()
                evictor.join(timeout=0.2)  # blocks while the cache is locked, as it must be
                threads.append(evictor)
            return value

    threads: list[threading.Thread] = []
    cache._data = RacingDict(cache._data)

    assert cache.get("a") == 1
    threads[0].join()
    assert cache.get("b") == 2


def test_entries_and_weight_are_both_bounds() -> None:
    by_entries, by_weight = LRUCache(2), LRUCache(100, max_weight=10)
    for key in "abc":
        by_entries.put(key, key)
        by_weight.put(key, key, weight=4)
    assert len(by_entries) == 2 and by_entries.get("a") is None and by_entries.get("c") == "c"
    assert len(by_weight) == 2 and by_weight.get("a") is None  # 12 > 10: the oldest goes


def test_an_entry_heavier_than_the_whole_bound_is_not_kept() -> None:
    cache = LRUCache(10, max_weight=5)
    cache.put("big", "x", weight=6)
    assert len(cache) == 0 and cache.get("big") is None


def test_a_message_edited_in_place_is_not_unchanged() -> None:
    message = AIMessage("", tool_calls=[{"name": "f", "args": {"a": 1}, "id": "c"}])
    seen = stamp(message)
    assert unchanged(message, seen)
    message.tool_calls[0]["args"]["a"] = 2
    assert not unchanged(message, seen)
    text = HumanMessage("question")
    seen = stamp(text)
    text.content = "another question"
    assert not unchanged(text, seen)


@pytest.mark.parametrize(
    "edit",
    [
        lambda parts: parts[0]["args"]["rows"][1].append(3),
        lambda parts: parts[0]["args"]["rows"].append((4,)),
        lambda parts: parts[0]["args"].update(flag=None),
    ],
    ids=["list in a list", "tuple appended", "key added"],
)
def test_an_edit_deep_in_json_like_fields_is_told_from_the_copy_taken(edit: Any) -> None:
    args = {"rows": [[1, 2.5], [True]], "note": "n", "flag": False}
    message = AIMessage("", tool_calls=[{"name": "f", "args": args, "id": "c"}])
    seen = stamp(message)
    edit(message.tool_calls)
    assert not unchanged(message, seen)


def test_fields_that_refer_to_themselves_are_still_copied() -> None:
    cycle: list[Any] = ["part"]
    cycle.append(cycle)
    message = AIMessage("", tool_calls=[{"name": "f", "args": {"cycle": cycle}, "id": "c"}])
    seen = stamp(message)
    assert seen[4][0][0]["args"]["cycle"] is not cycle
    cycle[0] = "edited"
    assert seen[4][0][0]["args"]["cycle"][0] == "part"


def test_a_message_cache_serves_only_the_live_unchanged_message() -> None:
    cache = MessageCache(8)
    message = HumanMessage("q")
    cache.put(message, ("k", id(message)), "value")
    assert cache.get(message, ("k", id(message))) == "value"
    assert cache.get(HumanMessage("q"), ("k", id(message))) is None  # another object
    message.content = "edited"
    assert cache.get(message, ("k", id(message))) is None
    cache.put(message, ("k", id(message)), "value")
    del message
    gc.collect()
    cache.get(HumanMessage("x"), "any")  # a look-up lets go of what died
    assert len(cache) == 0
