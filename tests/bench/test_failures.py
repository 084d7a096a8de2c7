"""A bench where some requests cannot be served: each failure stays with its mode, replay or sweep
point, the rest is measured, and every message is whole. Against the real simulator."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from rich.console import Console
from support.conversations import INSTANT, agent_conversation
from support.scripts import benchmark_script
from typer.testing import CliRunner, Result

from agent_latency._wire import coerce_messages
from agent_latency.bench import BenchPlan, BenchReport, check_regression, run_bench
from agent_latency.bench._report import saving_breakdown
from agent_latency.bench._results import MODES, STRATEGIES, ModeResult, Sample, StrategyResult
from agent_latency.cli._bench import bench, modes_table, turns_table
from agent_latency.config import Settings
from agent_latency.sim import running_simulator
from agent_latency.tokens import TokenCounter

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> Result:
    """Runs ``agent-latency bench`` against an instant simulator."""
    app = typer.Typer()
    app.command()(bench)
    with running_simulator(INSTANT) as sim:
        return CliRunner().invoke(app, ["--base-url", sim.base_url, *args])


def settings_for(base_url: str, *, context_window: int | None = None) -> Settings:
    settings = Settings()
    llm = replace(settings.llm, base_url=base_url, context_window=context_window)
    return replace(settings, llm=llm, streaming=replace(settings.streaming, max_tokens=64))


def test_a_mode_too_long_for_the_context_window_fails_alone() -> None:
    messages = coerce_messages(agent_conversation(8))
    untrimmed = TokenCounter().count_messages(messages)
    window = untrimmed - 200  # the whole conversation cannot fit; a 600-token trim can
    with running_simulator(INSTANT) as sim:
        report = run_bench(
            settings_for(sim.base_url, context_window=window),
            messages,
            BenchPlan(runs=2, turns=8, budget=600, sweep=True),
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
    messages = coerce_messages(agent_conversation(8))
    # The untrimmed request body is larger than the server accepts (413); trimmed ones pass.
    with running_simulator(replace(INSTANT, max_body_bytes=6_000)) as sim:
        report = run_bench(settings_for(sim.base_url), messages, BenchPlan(runs=1, budget=400))

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


def test_the_cli_reports_failures_writes_the_json_and_exits_zero(tmp_path: Path) -> None:
    scenario = tmp_path / "conversation.json"
    scenario.write_text(json.dumps(agent_conversation(8)), encoding="utf-8")
    window = TokenCounter().count_messages(coerce_messages(agent_conversation(8))) - 200
    config = f"[llm]\ncontext_window = {window}\n[llm.prompt]\ntoken_budget = 600\n"
    (tmp_path / "config.toml").write_text(config + "reserve_for_output = 100\n", "utf-8")
    (tmp_path / "settings.json").write_text('{"streaming": {"maxTokens": 64}}', "utf-8")
    result = run_cli(
        *("--config", str(tmp_path / "config.toml")),
        *("--settings", str(tmp_path / "settings.json")),
        *("--messages", str(scenario), "--budget", "600", "--runs", "1", "--turns", "4"),
        *("--json", str(tmp_path / "out.json")),
    )

    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "Failed: untrimmed + blocking: the prompt is" in text
    assert "Failed: no trimming: call 1 of 4: the prompt is" in text
    assert "use a model with a larger context window." in text
    document = json.loads((tmp_path / "out.json").read_text("utf-8"))
    assert [mode["error"] is None for mode in document["modes"]] == [False, False, True, True]


# -- the tables at 80 columns, and the progress without a terminal --------------------------------


def test_the_tables_fit_80_columns_with_five_digit_figures() -> None:
    def mode(i: int, ttft: float, total: float, tokens: int) -> ModeResult:
        return ModeResult(MODES[i], (Sample(ttft, total, tokens, None, 64),))

    modes = (
        mode(0, 14_800, 14_800, 18_274),
        mode(1, 13_500, 14_790, 18_274),
        mode(2, 2_150, 2_150, 2_000),
        mode(3, 900, 2_150, 2_000),
    )
    turns = tuple(
        StrategyResult(s, (Sample(12_345, 20_000, 4_000, 3_000, 10, 5_000),)) for s in STRATEGIES
    )
    report = BenchReport("http://127.0.0.1:40413/v1", "gemma-3-270m", None, 1, 2500, modes, turns)
    buffer = io.StringIO()
    console = Console(file=buffer, width=80)
    console.print(modes_table(report))
    console.print(turns_table(report))

    text = buffer.getvalue()
    assert "…" not in text
    assert max(map(len, text.splitlines())) <= 80
    header = next(line for line in text.splitlines() if line.lstrip().startswith("mode"))
    assert header.rstrip().endswith("TTFT  total")
    assert "p50/p95 of 1 run per mode" in " ".join(text.split())
    assert "last 1 model call ·" in text


def test_progress_goes_to_stderr_one_plain_line_per_call_without_a_terminal(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "conversation.json"
    scenario.write_text(json.dumps(agent_conversation(3)), encoding="utf-8")
    result = run_cli("--messages", str(scenario), "--runs", "1", "--budget", "300", "--turns", "2")

    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    total = BenchPlan(runs=1, turns=2).calls()
    assert len(lines) == total
    assert lines[0].startswith(f"bench: 1/{total} warm-up (")
    assert lines[-1].startswith(f"bench: {total}/{total} cost-aware trimming: call 2/2 (")
    assert "bench:" not in result.stdout


# -- scripts/make_scenario.py honours the size asked for ---------------------------------------


@pytest.mark.parametrize("target", [5000, 2500])
def test_make_scenario_writes_the_size_asked_for(target: int) -> None:
    with benchmark_script("make_scenario") as module:
        tokens = module.count_tokens(module.make_scenario(target), TokenCounter())

    assert target * 0.95 <= tokens <= target
