"""Load: the short form of ``scripts/soak.py`` (1,000 concurrent agent runs), and bounded caches.

The long form (10,000 sequential calls, RSS before and after, added latency) is the benchmark;
its figures are in ``docs/reliability.md``. Here the same code runs briefly against an
in-process simulator, and only what cannot be noisy is asserted: every call ends in an answer,
the injected server error or our cancellation; no span is left open; no run state survives.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
from support.scripts import benchmark_script

from agent_latency.sim import SimulatorConfig, running_simulator


@pytest.fixture(scope="module")
def soak() -> Iterator[ModuleType]:
    with benchmark_script("soak") as module:
        yield module


@pytest.mark.slow
def test_short_soak_loses_no_call_and_leaves_nothing_open(soak: ModuleType) -> None:
    config = SimulatorConfig(**soak.SERVER_OPTIONS)
    with running_simulator(config) as sim:
        # A short conversation (three rounds, over a 200-token budget) keeps the client's
        # request encoding, which dominates here, short.
        result = soak.soak(
            sim.base_url,
            calls=200,
            concurrent=1_000,
            baseline_every=10,
            warm_up=10,
            rounds=3,
            budget=200,
        )
        served_errors = sim.stats.errors

    sequential, concurrent = result.sequential, result.concurrent
    assert (sequential.calls, concurrent.calls) == (200, 1_000)
    assert result.lost == 0, sequential.lost + concurrent.lost
    assert sequential.answered + sequential.server_errors == 200
    assert concurrent.cancelled >= 1 and concurrent.answered >= 500
    assert 0 < sequential.server_errors + concurrent.server_errors <= served_errors
    assert result.open_spans == 0 and result.spans.started > 0
    assert result.open_runs == 0
    assert result.live_run_states == 0
    # One record per model call that started, whatever its end; none for runs cancelled earlier.
    assert sum(result.records.values()) == result.spans.chat_spans
    assert set(result.records) <= {"ok", "error", "cancelled"}
    # Runs are cancelled at their first token: mid-call, so their model calls end cancelled.
    assert 0 < result.records["cancelled"] <= concurrent.cancelled
    assert result.records["error"] >= sequential.server_errors
    assert len(result.inside_ms) == len(result.with_ms) == sequential.answered
    assert result.without_ms
