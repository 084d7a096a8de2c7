"""``bench --plot`` and ``doctor`` print and draw one latency fit.

``bench`` drew a straight line ("414 ms per 1k tokens + 0 ms") through curved data while
``doctor`` printed the latency model (≈ 203 ms + 160 ms per 1k, + 30.8 per 1k of context) on the
same simulator. Both now fit the latency model the same way and print it in the same words;
on a simulator whose prefill bends upwards with the context, both recover it.
"""

from __future__ import annotations

import io
import re
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from agent_latency.bench import BenchOptions, run_bench
from agent_latency.cli import main
from agent_latency.config import Settings
from agent_latency.sim import SimulatorConfig, running_simulator

# Strongly curved: at 4,000 tokens the context term is ten times the linear one.
CURVED = SimulatorConfig(
    overhead_ms=50.0,
    prefill_ms_per_token=0.02,
    attention_ms_per_1k_context=0.05,
    decode_tokens_per_s=2000.0,
    answer_tokens=4,
    tokenizer="qwen-7b-chat",
)
FIT = re.compile(
    r"TTFT ≈ (?P<fixed>[\d,]+) ms \+ (?P<per_1k>[\d,]+) ms per 1k prefilled tokens "
    r"\(\+ (?P<context>[\d.,]+) per 1k tokens of context\)"
)

pytestmark = pytest.mark.usefixtures("clean_environment")


def _ttft(fit: re.Match[str], tokens: float) -> float:
    fixed, per_1k, context = (float(fit[name].replace(",", "")) for name in FIT.groupindex)
    return fixed + per_1k * tokens / 1000 + context * tokens / 1000 * tokens / 1000


def _true_ttft(tokens: float) -> float:
    return (
        CURVED.overhead_ms
        + CURVED.prefill_ms_per_token * tokens
        + CURVED.attention_ms_per_1k_context * tokens * tokens / 1000
    )


def _conversation() -> list[SystemMessage | HumanMessage | AIMessage]:
    turns: list[SystemMessage | HumanMessage | AIMessage] = [SystemMessage("You are terse.")]
    for n in range(10):
        turns += [HumanMessage(f"question {n} " + "words " * 380), AIMessage(f"answer {n}")]
    return [*turns, HumanMessage("The question that matters now.")]


def test_doctor_prints_and_bench_fits_one_model_that_follows_the_curve() -> None:
    with running_simulator(CURVED) as sim:
        Path("config.toml").write_text("[llm]\ncontext_window = 32768\n", encoding="utf-8")
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            main(["doctor", "--config", "config.toml", "--base-url", sim.base_url])
        settings = Settings()
        settings = replace(settings, llm=replace(settings.llm, base_url=sim.base_url))
        report = run_bench(settings, _conversation(), BenchOptions(runs=1, sweep=True))

    [prefill] = [line for line in out.getvalue().splitlines() if "  prefill:" in line]
    [latency] = [line for line in out.getvalue().splitlines() if "  latency model:" in line]
    doctor_fit, model_fit = FIT.search(prefill), FIT.search(latency)
    assert doctor_fit is not None and model_fit is not None, out.getvalue()
    fit = report.prefill_fit()
    assert fit is not None
    bench_fit = FIT.fullmatch(fit.describe())
    assert bench_fit is not None, fit.describe()

    # The fit bench prints and draws follows the curved points it was fitted to (all but a
    # fifth: each point is one call, and on a shared machine one can stall, 290 ms for a 158 ms
    # point in a CI run; the straight line this guards against misses most of them)...
    points = [p for p in report.sweep if p.ttft_ms is not None]
    assert max(p.input_tokens for p in points) > 3500
    followed = [
        fit.ttft_ms(point.input_tokens) == pytest.approx(point.ttft_ms, rel=0.15, abs=25)
        for point in points
    ]
    assert sum(followed) >= 0.8 * len(points), [(p.input_tokens, p.ttft_ms) for p in points]
    # ...and is the model doctor prints, fitted to its own probes (200 to 2,000 tokens): each
    # finds the simulator's curve within the client's and the machine's noise. On a loaded
    # machine the client's own time adds to every call (a fit 46 ms above the curve at 1,000
    # tokens, beside a full suite and another engineer's tests); the straight line this guards
    # against is 290 ms above it there.
    for tokens in (1000, 2000):
        for printed in (doctor_fit, model_fit, bench_fit):
            assert _ttft(printed, tokens) == pytest.approx(_true_ttft(tokens), rel=0.3, abs=60)
