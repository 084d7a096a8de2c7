"""A bench where some requests cannot be served: each failure stays with its mode, replay or sweep
point, the rest is measured, and every message is whole. Against the real simulator."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from langchain_core.messages import convert_to_messages
from support.conversations import INSTANT, agent_conversation
from support.scripts import benchmark_script

from agent_latency.bench import BenchOptions, BenchReport, check_regression, run_bench
from agent_latency.bench._measurements import MODES, ModeResult, Sample
from agent_latency.bench._report import saving_breakdown
from agent_latency.config import Settings
from agent_latency.sim import running_simulator
from agent_latency.tokens import TokenCounter

ROOT = Path(__file__).resolve().parents[2]


def settings_for(base_url: str, *, context_window: int | None = None) -> Settings:
    settings = Settings()
    llm = replace(settings.llm, base_url=base_url, context_window=context_window)
    return replace(settings, llm=llm, streaming=replace(settings.streaming, max_tokens=64))


def test_a_mode_too_long_for_the_context_window_fails_alone() -> None:
    messages = convert_to_messages(agent_conversation(8))
    untrimmed = TokenCounter().count_messages(messages)
    window = untrimmed - 200  # the whole conversation cannot fit; a 600-token trim can
    with running_simulator(INSTANT) as sim:
        report = run_bench(
            settings_for(sim.base_url, context_window=window),
            messages,
            BenchOptions(runs=2, turns=8, budget=600, sweep=True),
        )

    by_mode = {result.mode: result for result in report.modes}
    for mode in MODES:
        assert by_mode[mode].ok is mode.trimmed, mode.label
    error = by_mode[MODES[0]].error or ""
    assert re.match(r"the prompt is [\d,]+ tokens by our count, which with max_tokens 64 ", error)
    assert error.endswith(
        f"exceeds llm.context_window {window:,}, so it was not sent. Fix: trim it (a lower "
        "--budget) or use a model with a larger context window."
    )
    # The replay went on: no trimming fails on its first call that overflows, the others finish.
    turns = {result.strategy.key: result for result in report.turns}
    assert not turns["untrimmed"].ok and "call " in (turns["untrimmed"].error or "")
    assert turns["moving_cut"].ok and turns["prefix_stable"].ok
    assert len(turns["prefix_stable"].samples) == 8
    # The untrimmed sweep point failed, the trimmed ones were measured and fitted.
    assert [p.error is None for p in report.sweep][-1] is False
    assert report.prefill_fit() is not None
    assert saving_breakdown(report) is None  # it compares with untrimmed modes
    failures = report.failures()
    assert [line.split(":")[0] for line in failures[:3]] == [
        "untrimmed + blocking",
        "untrimmed + streaming",
        "no trimming",
    ]
    assert failures[-1].startswith("prefill sweep, untrimmed: the prompt is")
    document = json.loads(json.dumps(report.to_json()))
    assert document["modes"][0]["ttft_ms"] is None and document["modes"][0]["error"] == error
    assert document["modes"][3]["error"] is None and document["modes"][3]["ttft_ms"]["p50"] > 0
    assert document["turns"]["calls"] == 8


def test_a_request_the_server_refuses_fails_its_mode_with_the_whole_message() -> None:
    messages = convert_to_messages(agent_conversation(8))
    # The untrimmed request body is larger than the server accepts (413); trimmed ones pass.
    with running_simulator(replace(INSTANT, max_body_bytes=6_000)) as sim:
        report = run_bench(settings_for(sim.base_url), messages, BenchOptions(runs=1, budget=400))

    untrimmed = [result for result in report.modes if not result.mode.trimmed]
    assert all("answered HTTP 413" in (result.error or "") for result in untrimmed)
    assert all((result.error or "").endswith(".") for result in untrimmed)
    assert all(result.ok for result in report.modes if result.mode.trimmed)
    gate = check_regression(report, 100.0, 10)
    assert gate.passed  # the gated mode ran


def test_a_failed_gated_mode_fails_the_gate() -> None:
    failed = ModeResult(MODES[3], (), "refused")
    modes = (*(ModeResult(m, (Sample(1, 1, 1, None),)) for m in MODES[:3]), failed)
    report = BenchReport("http://h/v1", "m", None, 1, 100, modes)

    verdict = check_regression(report, 100.0, 10)

    assert not verdict.passed
    assert "the mode failed" in verdict.describe() and "REGRESSION" in verdict.describe()


# -- scripts/make_scenario.py honours the size asked for ---------------------------------------


@pytest.mark.parametrize("target", [5000, 2500])
def test_make_scenario_writes_the_size_asked_for(target: int) -> None:
    with benchmark_script("make_scenario") as module:
        tokens = module.count_tokens(module.make_scenario(target), TokenCounter())

    assert target * 0.95 <= tokens <= target
