"""The simulator's latency model, prefix cache and streaming faults, measured from a client.

Delays are a few hundred milliseconds so the file stays fast. Lower bounds are tight (a server
that answered before its schedule fails); upper bounds are generous or relative, because the
machines are noisy and a late chunk says more about the machine than about the simulator.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest

from agent_latency.sim import DEFAULT_MODEL, RunningSimulator, SimulatorConfig, running_simulator

EARLY_MS = 10  # asyncio may wake a timer up to a clock tick early
LATE_MS = 500  # scheduling and HTTP overhead on a busy 2-core machine


def conversation(words: int) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are an agent. " + "Context word. " * words},
        {"role": "user", "content": "Go on."},
    ]


def timed_stream(
    sim: RunningSimulator, messages: list[dict[str, Any]], **request: Any
) -> tuple[list[float], int, int]:
    """Streams one answer; returns chunk arrival times (ms), prompt tokens and cached tokens.

    Times count from the moment the request is handed to the transport, so the client's own
    preparation (slow on its first call) is not counted.
    """
    sent_at: list[float] = []
    hooks = {"request": [lambda _: sent_at.append(time.perf_counter())]}
    arrivals, usage = [], None
    with httpx.Client(event_hooks=hooks) as http:
        client = openai.OpenAI(
            base_url=sim.base_url, api_key="unused", max_retries=0, http_client=http
        )
        stream = client.chat.completions.create(
            model=DEFAULT_MODEL,
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            **request,
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append((time.perf_counter() - sent_at[0]) * 1000)
            usage = chunk.usage or usage
    assert usage is not None and usage.prompt_tokens_details is not None
    return arrivals, usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens or 0


def assert_near(measured_ms: float, expected_ms: float) -> None:
    assert expected_ms - EARLY_MS <= measured_ms <= expected_ms + LATE_MS, (
        measured_ms,
        expected_ms,
    )


def test_first_token_follows_overhead_plus_prefill_then_the_decode_rate() -> None:
    config = SimulatorConfig(
        overhead_ms=100,
        prefill_ms_per_token=0.1,
        attention_ms_per_1k_context=0.05,
        decode_tokens_per_s=5,
        answer_tokens=3,
        prefix_cache=False,
    )
    with running_simulator(config) as sim:
        arrivals, prompt_tokens, cached = timed_stream(sim, conversation(500))

    assert prompt_tokens > 1000 and cached == 0
    # Each of the prompt tokens attends over the whole prompt: 0.05 ms more per 1,000 tokens.
    ttft = 100 + prompt_tokens * (0.1 + 0.05 * prompt_tokens / 1000)
    assert config.ttft_ms(prompt_tokens, prompt_tokens) == pytest.approx(ttft)
    assert len(arrivals) == 3
    for index, arrival in enumerate(arrivals):
        assert_near(arrival, ttft + index * 200)
    assert arrivals[2] - arrivals[0] > 200  # paced, not sent together (400 ms apart)


def test_the_same_new_tokens_prefill_slower_over_a_longer_context() -> None:
    # What llama.cpp showed (docs/real-model.md): appending to a long conversation costs more
    # per token.
    config = SimulatorConfig(
        overhead_ms=0,
        prefill_ms_per_token=0,
        attention_ms_per_1k_context=0.2,
        cache_block_tokens=1,
        answer_tokens=1,
    )
    new_turn = [
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Next point. " * 100},
    ]
    with running_simulator(config) as sim:
        waits = {}
        for words in (100, 2000):
            first = conversation(words)
            timed_stream(sim, first)
            arrivals, prompt_tokens, cached = timed_stream(sim, [*first, *new_turn])
            waits[words] = (arrivals[0], prompt_tokens, prompt_tokens - cached)

    short, long = waits[100], waits[2000]
    assert short[2] == long[2]  # the same new tokens to prefill
    assert long[1] > 5 * short[1]
    for first_token_ms, prompt_tokens, uncached in (short, long):
        assert_near(first_token_ms, uncached * 0.2 * prompt_tokens / 1000)


def test_a_blocking_answer_arrives_when_its_last_token_is_due() -> None:
    config = SimulatorConfig(
        overhead_ms=150,
        prefill_ms_per_token=0,
        attention_ms_per_1k_context=0,
        decode_tokens_per_s=50,
        answer_tokens=6,
    )
    with running_simulator(config) as sim:
        client = openai.OpenAI(base_url=sim.base_url, api_key="unused", max_retries=0)
        start = time.perf_counter()
        client.chat.completions.create(model=DEFAULT_MODEL, messages=conversation(5))
        total = (time.perf_counter() - start) * 1000

    assert_near(total, 150 + 5 * 20)


def whole_blocks(tokens: int, block: int = 16) -> int:
    return tokens // block * block


def test_a_repeated_prompt_reuses_its_whole_blocks_and_starts_sooner() -> None:
    config = SimulatorConfig(
        overhead_ms=50, prefill_ms_per_token=0.2, attention_ms_per_1k_context=0, answer_tokens=1
    )
    messages = conversation(400)
    with running_simulator(config) as sim:
        cold, prompt_tokens, cold_cached = timed_stream(sim, messages)
        warm, _, warm_cached = timed_stream(sim, messages)
        stats = sim.stats

    # vLLM's rule: whole 16-token blocks, and at least the last token is prefilled.
    assert cold_cached == 0 and warm_cached == whole_blocks(prompt_tokens - 1)
    assert_near(cold[0], 50 + 0.2 * prompt_tokens)
    assert_near(warm[0], 50 + 0.2 * (prompt_tokens - warm_cached))
    assert warm[0] < cold[0] - 100  # the prefill saved is about 240 ms
    assert stats.requests == 2
    assert stats.prompt_tokens == 2 * prompt_tokens
    assert stats.cached_tokens == warm_cached


def test_a_growing_conversation_reuses_its_whole_previous_prompt() -> None:
    config = SimulatorConfig(
        overhead_ms=0, prefill_ms_per_token=0, answer_tokens=2, cache_block_tokens=1
    )
    first = conversation(50)
    grown = [*first, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "More"}]
    with running_simulator(config) as sim:
        _, first_tokens, _ = timed_stream(sim, first)
        _, grown_tokens, cached = timed_stream(sim, grown)

    # The reply priming of the first prompt is the head of the assistant message that follows.
    assert cached == first_tokens < grown_tokens


def test_the_prefix_cache_can_be_switched_off_globally_or_per_request() -> None:
    messages = conversation(20)
    off = SimulatorConfig(
        overhead_ms=0, prefill_ms_per_token=0, answer_tokens=1, prefix_cache=False
    )
    with running_simulator(off) as sim:
        timed_stream(sim, messages)
        _, _, cached_when_off = timed_stream(sim, messages)
    on = SimulatorConfig(overhead_ms=0, prefill_ms_per_token=0, answer_tokens=1)
    with running_simulator(on) as sim:
        timed_stream(sim, messages)
        _, _, cached_when_opted_out = timed_stream(
            sim, messages, extra_body={"cache_prompt": False}
        )
        _, prompt_tokens, cached_when_on = timed_stream(sim, messages)

    assert cached_when_off == 0 and cached_when_opted_out == 0
    assert cached_when_on == whole_blocks(prompt_tokens - 1) > 0


def test_a_full_cache_evicts_the_least_recently_used_conversation_tail_first() -> None:
    config = SimulatorConfig(
        overhead_ms=0, prefill_ms_per_token=0, answer_tokens=1, cache_tokens=320
    )
    first = [{"role": "user", "content": "alpha " * 200}]  # about 200 tokens each
    second = [{"role": "user", "content": "beta " * 200}]
    with running_simulator(config) as sim:
        _, first_tokens, _ = timed_stream(sim, first)
        _, second_tokens, _ = timed_stream(sim, second)
        _, _, second_cached = timed_stream(sim, second)
        _, _, first_cached = timed_stream(sim, first)

    assert first_tokens + second_tokens > 320
    assert second_cached == whole_blocks(second_tokens - 1)
    # What is left of the first conversation is its head: 320 tokens minus the second's blocks.
    assert first_cached == 320 - whole_blocks(second_tokens)


def test_cached_prompts_expire_after_the_idle_lifetime() -> None:
    config = SimulatorConfig(
        overhead_ms=0, prefill_ms_per_token=0, answer_tokens=1, cache_lifetime_s=2
    )
    messages = conversation(50)
    with running_simulator(config) as sim:
        timed_stream(sim, messages)
        _, _, cached_at_once = timed_stream(sim, messages)
        time.sleep(3)  # idle for longer than the lifetime
        _, _, cached_after_idle = timed_stream(sim, messages)

    assert cached_at_once > 0
    assert cached_after_idle == 0


def test_buffered_streaming_holds_every_chunk_until_the_end() -> None:
    config = SimulatorConfig(
        overhead_ms=50,
        prefill_ms_per_token=0,
        decode_tokens_per_s=50,
        answer_tokens=10,
        buffered=True,
    )
    with running_simulator(config) as sim:
        arrivals, _, _ = timed_stream(sim, conversation(5))

    assert len(arrivals) == 10
    assert_near(arrivals[0], 50 + 9 * 20)  # the first token arrives with the last
    assert arrivals[-1] - arrivals[0] < 50  # where unbuffered chunks would spread over 180 ms


def test_a_stall_pauses_the_stream_once_after_the_given_chunk() -> None:
    config = SimulatorConfig(
        overhead_ms=0,
        prefill_ms_per_token=0,
        decode_tokens_per_s=1000,
        answer_tokens=6,
        stall_after_chunks=3,
        stall_ms=500,
    )
    with running_simulator(config) as sim:
        arrivals, _, _ = timed_stream(sim, conversation(5))

    assert all(arrival >= 500 - EARLY_MS for arrival in arrivals[3:])
    assert arrivals[3] - arrivals[2] > 250  # the first chunks were not held back by the stall
