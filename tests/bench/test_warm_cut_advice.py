"""The bench says when a budget far below the context window makes warm calls slower."""

from __future__ import annotations

from agent_latency.bench import warm_cut_advice
from agent_latency.bench._measurements import STRATEGIES, BenchReport, Sample, StrategyResult

_BY_KEY = {strategy.key: strategy for strategy in STRATEGIES}


def _replay(key: str, ttft_ms: float, prompt: int, cached: int | None) -> StrategyResult:
    sample = Sample(ttft_ms, ttft_ms + 100, prompt, cached, 4, prompt)
    return StrategyResult(_BY_KEY[key], (sample, sample))


def _report(untrimmed_ms: float, trimmed_ms: float, cached: int | None) -> BenchReport:
    turns = (
        _replay("untrimmed", untrimmed_ms, 2_774, cached),
        _replay("prefix_stable", trimmed_ms, 976, 777 if cached is not None else None),
    )
    return BenchReport("http://127.0.0.1:1/v1", "m", None, 1, 1_500, (), turns)


def test_a_warm_untrimmed_replay_that_was_sooner_gets_advice_naming_the_budget_to_set() -> None:
    advice = warm_cut_advice(_report(834, 1_057, 2_682), context_window=32_768, reserve=2_000)
    assert advice is not None
    assert "1,500" in advice and "97%" in advice and "30,768" in advice
    assert "834 ms against 1,057 ms" in advice


def test_no_advice_when_trimming_was_sooner_or_the_server_reported_no_cache() -> None:
    assert warm_cut_advice(_report(1_200, 1_057, 2_682), context_window=32_768, reserve=0) is None
    assert warm_cut_advice(_report(834, 1_057, None), context_window=32_768, reserve=0) is None


def test_without_a_known_window_the_advice_names_the_settings() -> None:
    advice = warm_cut_advice(_report(834, 1_057, 2_682), context_window=None, reserve=2_000)
    assert advice is not None and "context window less reserve_for_output" in advice
