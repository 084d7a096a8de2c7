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
        decode_tokens_per_s=5,
        answer_tokens=3,
        prefix_cache=False,
    )
    with running_simulator(config) as sim:
        arrivals, prompt_tokens, cached = timed_stream(sim, conversation(500))

    assert prompt_tokens > 1000 and cached == 0
    ttft = 100 + 0.1 * prompt_tokens
    assert len(arrivals) == 3
    for index, arrival in enumerate(arrivals):
        assert_near(arrival, ttft + index * 200)
    assert arrivals[2] - arrivals[0] > 200  # paced, not sent together (400 ms apart)


def test_a_blocking_answer_arrives_when_its_last_token_is_due() -> None:
    config = SimulatorConfig(
        overhead_ms=150, prefill_ms_per_token=0, decode_tokens_per_s=50, answer_tokens=6
    )
    with running_simulator(config) as sim:
        client = openai.OpenAI(base_url=sim.base_url, api_key="unused", max_retries=0)
        start = time.perf_counter()
        client.chat.completions.create(model=DEFAULT_MODEL, messages=conversation(5))
        total = (time.perf_counter() - start) * 1000

    assert_near(total, 150 + 5 * 20)


def test_a_repeated_prompt_reuses_all_but_one_token_and_starts_sooner() -> None:
    config = SimulatorConfig(overhead_ms=50, prefill_ms_per_token=0.2, answer_tokens=1)
    messages = conversation(400)
    with running_simulator(config) as sim:
        cold, prompt_tokens, cold_cached = timed_stream(sim, messages)
        warm, _, warm_cached = timed_stream(sim, messages)
        stats = sim.stats

    assert cold_cached == 0 and warm_cached == prompt_tokens - 1
    assert_near(cold[0], 50 + 0.2 * prompt_tokens)
    assert_near(warm[0], 50 + 0.2)
    assert warm[0] < cold[0] - 100  # the prefill saved is about 240 ms
    assert stats.requests == 2
    assert stats.prompt_tokens == 2 * prompt_tokens
    assert stats.cached_tokens == prompt_tokens - 1


def test_a_growing_conversation_reuses_its_whole_previous_prompt() -> None:
    config = SimulatorConfig(overhead_ms=0, prefill_ms_per_token=0, answer_tokens=2)
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
    assert cached_when_on == prompt_tokens - 1


def test_the_prefix_cache_forgets_the_oldest_prompts() -> None:
    config = SimulatorConfig(
        overhead_ms=0, prefill_ms_per_token=0, answer_tokens=1, cache_entries=1
    )
    first = [{"role": "user", "content": "alpha " * 50}]
    second = [{"role": "user", "content": "beta " * 50}]
    with running_simulator(config) as sim:
        timed_stream(sim, first)
        timed_stream(sim, second)
        _, _, cached = timed_stream(sim, first)

    assert cached == 3  # only the frame head <start> user <sep> is shared with the one remembered


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
