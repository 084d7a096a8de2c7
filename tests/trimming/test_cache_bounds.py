"""The trimmer's caches stay bounded, by entries and by bytes, whatever the conversations it sees.

Memory is measured with tracemalloc (the bytes Python allocated and still holds), never with
wall time or the process's RSS, which the allocator and other tests move.
"""

from __future__ import annotations

import gc
import random
import string
import tracemalloc
import weakref
from collections.abc import Iterator

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer
from agent_latency.trimming._relevance import TermCache
from agent_latency.trimming._shortening import MessageShortener

MIB = 1024 * 1024
# The documented bounds of what a default trimmer and its counter hold (docs/reliability.md):
# the counter's content cache 64 MiB; the term cache 16 MiB and its scores 4 MiB; tool-choice and
# request caches 4 + 8 MiB. Plus room for what
# is bounded by entries or held little here (the shortened copies, 16 MiB at most, ~1.5 MiB in
# this test, and their texts by value, ~6 MiB; 4,096 stubs; 16 conversation memos, and 16 by
# value).
BOUND = (64 + 16 + 4 + 4 + 8 + 8) * MIB

_RNG = random.Random(23)
_WORDS = [
    "".join(_RNG.choice(string.ascii_lowercase) for _ in range(_RNG.randint(3, 9)))
    for _ in range(5000)
]
_TEXT = " ".join(_RNG.choice(_WORDS) for _ in range(60_000))


def tool_result(i: int, size: int = 20_000) -> str:
    """A distinct ~20 KB tool result of words (a slice of one long text, numbered)."""
    start = (i * 7919) % (len(_TEXT) - size)
    return f"record {i}: " + _TEXT[start : start + size]


def conversation(i: int) -> list[BaseMessage]:
    return [
        SystemMessage("You answer from the tool results."),
        HumanMessage(f"What does record {i} say about the shipment?"),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {"id": i}, "id": f"c{i}"}]),
        ToolMessage(tool_result(i), tool_call_id=f"c{i}"),
    ]


def held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


@pytest.fixture
def tracing() -> Iterator[None]:
    yield
    tracemalloc.stop()


@pytest.mark.slow
@pytest.mark.usefixtures("tracing")
def test_ten_thousand_conversations_with_a_20_kb_tool_result_hold_a_bounded_amount() -> None:
    # A default trimmer, over budget on every call: the tool result is shortened and the retention
    # proxy reads every text. The first 9,000 conversations fill every cache past its bound
    # untraced (tracing costs ~25 ms a trim); the last 1,000 are traced, so what they leave held
    # is what the caches keep of them in place of the earlier ones: at most the bounds.
    trimmer = PriorityTrimmer(1000)
    probe: weakref.ref[BaseMessage] | None = None
    for i in range(10_000):
        if i == 9_000:
            gc.collect()
            tracemalloc.start()
        messages = conversation(i)
        result = trimmer.trim(messages)
        assert result.shortened_messages == 1 and result.question_retention is not None
        if i > 9_000 and i % 250 == 0:
            assert held() < BOUND, i  # fails early: before, each conversation left ~200 KB held
        probe = weakref.ref(messages[-1])
        del messages, result
    trimmer.trim([HumanMessage("one more")])  # lets go of what the dead messages left

    assert probe is not None and probe() is None  # no cache keeps a message alive
    assert held() < BOUND


@pytest.mark.usefixtures("tracing")
def test_the_term_cache_is_bounded_by_bytes_not_by_entries() -> None:
    cache = TermCache(max_bytes=2 * MIB)
    tracemalloc.start()
    before = held()
    for i in range(120):  # ~200 KB of term counts per 20 KB text: 24 MB unbounded
        text = tool_result(i)
        assert cache.counts(text)[f"{i}"] == 1
        del text

    assert held() - before < 2.5 * MIB


def test_token_and_shortening_caches_stay_bounded_over_many_distinct_messages() -> None:
    counter = TokenCounter(cache_size=64)
    trimmer = PriorityTrimmer(200, token_counter=counter)
    shortener = MessageShortener(counter, cache_size=16)
    for index in range(500):
        trimmer.trim([HumanMessage(f"question {index} " + "detail " * 20)])
        shortener.shorten(ToolMessage(f"result {index} " + "row " * 400, tool_call_id="c"), 100)

    assert counter.tokenized_messages >= 1_000  # every message was new: nothing served twice
    assert len(counter._by_content) <= 64 and len(counter._by_identity) <= 64
    assert len(shortener._cache) <= 16


def test_a_message_short_enough_already_is_not_kept_alive_by_the_shortener() -> None:
    shortener = MessageShortener(TokenCounter())
    message = ToolMessage("a short result", tool_call_id="c")
    copy, _ = shortener.shorten(message, 500)
    assert copy is message  # nothing to cut: the message itself comes back
    assert shortener.shorten(message, 500)[0] is message  # and again, from the cache
    gone = weakref.ref(message)
    del message, copy
    gc.collect()
    assert gone() is None
    shortener.shorten(ToolMessage("x", tool_call_id="d"), 500)  # a look-up lets go of the dead
    assert len(shortener._cache) == 1


def test_the_shortened_copies_are_bounded_by_bytes(tracing: None) -> None:
    shortener = MessageShortener(TokenCounter(), cache_size=10_000, cache_bytes=MIB // 2)
    alive = [ToolMessage(tool_result(i, 60_000), tool_call_id=f"c{i}") for i in range(200)]
    before = held()
    for message in alive:  # each copy keeps 6,000 tokens (~12 KB) of its 60 KB text: 2.4 MB
        shortener.shorten(message, 6_000)
    assert len(shortener._cache) < 50
    assert held() - before < MIB
