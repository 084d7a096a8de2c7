"""The trimmer's caches stay bounded, whatever the conversations it sees."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, ToolMessage

from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer
from agent_latency.trimming._shortening import MessageShortener


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
