"""The simulator's per-message token cache is bounded by bytes, served over real HTTP."""

from __future__ import annotations

import gc
import tracemalloc

import httpx
import pytest

from agent_latency.sim import DEFAULT_MODEL, SimulatorConfig, _prompt, running_simulator

# No prefix cache: its blocks would be counted too.
FAST = SimulatorConfig(
    overhead_ms=0,
    prefill_ms_per_token=0,
    attention_ms_per_1k_context=0,
    answer_tokens=1,
    prefix_cache=False,
)


def test_distinct_large_messages_are_kept_within_the_byte_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each 200 KB message is ~40,000 tokens: kept with its JSON as the key, 40 of them held
    # ~14 MB (the 120 messages of 1.1 MB took 133 -> 453 MB). The bound is lowered to
    # 2 MiB to see it.
    monkeypatch.setattr(_prompt, "_MESSAGE_CACHE_BYTES", 2 * 1024 * 1024, raising=False)
    with running_simulator(FAST) as sim, httpx.Client(timeout=30) as client:

        def ask(content: str) -> httpx.Response:
            return client.post(
                f"{sim.base_url}/chat/completions",
                json={"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": content}]},
            )

        assert ask("warm up").status_code == 200
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for n in range(40):
                assert ask(f"{n:03d} " + "word " * 40_000).status_code == 200
            gc.collect()  # what the last request left behind
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert grown < 8 * 1024 * 1024, f"{grown / 2**20:.1f} MiB"
