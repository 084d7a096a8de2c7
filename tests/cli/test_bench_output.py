"""What ``agent-latency bench`` prints: failures in full, tables that fit 80 columns, a title that
never breaks mid-phrase, the server's token count where it differs from ours, and a few progress
lines on stderr without a terminal. Against the real simulator."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import typer
from langchain_core.messages import convert_to_messages
from rich.console import Console
from support.conversations import INSTANT, agent_conversation
from typer.testing import CliRunner, Result

from agent_latency.bench import (
    BenchOptions,
    BenchReport,
    Mode,
    ModeResult,
    Sample,
    Strategy,
    StrategyResult,
)
from agent_latency.cli._bench import bench
from agent_latency.cli._tables import modes_table, modes_title, turns_table
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.tokens import TokenCounter

MODES = [Mode(trimmed, streaming) for trimmed in (False, True) for streaming in (False, True)]
REPLAYS = [Strategy(key, key.replace("_", " ")) for key in ("untrimmed", "prefix_stable")]


def run_cli(*args: str, config: SimulatorConfig = INSTANT) -> Result:
    """Runs ``agent-latency bench`` against a simulator."""
    app = typer.Typer()
    app.command()(bench)
    with running_simulator(config) as sim:
        return CliRunner().invoke(app, ["--base-url", sim.base_url, *args])


def test_the_cli_reports_failures_writes_the_json_and_exits_zero(tmp_path: Path) -> None:
    scenario = tmp_path / "conversation.json"
    scenario.write_text(json.dumps(agent_conversation(8)), encoding="utf-8")
    window = TokenCounter().count_messages(convert_to_messages(agent_conversation(8))) - 200
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


# -- the tables at 80 columns, the title, the token counts ----------------------------------------


def report_with(server_tokens: int | None) -> BenchReport:
    def mode(i: int, ttft: float, total: float, tokens: int) -> ModeResult:
        sample = Sample(ttft, total, tokens, None, 64, server_tokens and server_tokens + tokens)
        return ModeResult(MODES[i], (sample,))

    modes = (
        mode(0, 14_800, 14_800, 18_274),
        mode(1, 13_500, 14_790, 18_274),
        mode(2, 2_150, 2_150, 2_000),
        mode(3, 900, 2_150, 2_000),
    )
    turns = tuple(
        StrategyResult(s, (Sample(12_345, 20_000, 4_000, 3_000, 10, 5_000),)) for s in REPLAYS
    )
    endpoint = "http://127.0.0.1:40413/v1"
    return BenchReport(endpoint, "gemma-3-270m-it-qat", None, 1, 2500, modes, turns)


def printed(*renderables: object) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=80)
    for renderable in renderables:
        console.print(renderable)
    return buffer.getvalue()


def test_the_tables_fit_80_columns_with_five_digit_figures() -> None:
    report = report_with(server_tokens=None)
    text = printed(modes_table(report), turns_table(report))

    assert "…" not in text
    assert max(map(len, text.splitlines())) <= 80
    header = next(line for line in text.splitlines() if line.lstrip().startswith("mode"))
    assert header.rstrip().endswith("TTFT  total")
    assert "p50/p95 of 1 run per mode" in " ".join(text.split())
    assert "last 1 model call ·" in text
    assert "*" not in text  # the server reported no count to differ from ours


def test_the_tokens_column_is_the_servers_count_starred_where_ours_differs() -> None:
    report = report_with(server_tokens=7)  # the server counted 7 more on every call
    text = printed(modes_table(report))

    assert max(map(len, text.splitlines())) <= 80
    untrimmed = next(line for line in text.splitlines() if "untrimmed + blocking" in line)
    assert untrimmed.split()[3] == "18,281*"  # the server's count
    caption = " ".join(text.split())
    assert "* it counted differently from us (ours: untrimmed 18,274, trimmed 2,000)." in caption


def test_an_interrupted_table_gives_each_modes_runs_and_shows_a_mode_without_any_not_run() -> None:
    whole = report_with(server_tokens=None)
    # Ctrl-C in the second round of 3, before the trimmed modes had run in the first.
    cut = [*whole.modes[:2], *(replace(result, samples=()) for result in whole.modes[2:])]
    report = replace(whole, runs=3, modes=tuple(cut), interrupted=True)
    text = printed(modes_table(report))

    assert max(map(len, text.splitlines())) <= 80
    rows = {" ".join(line.split()[:3]): " ".join(line.split()[3:]) for line in text.splitlines()}
    assert rows["trimmed + blocking"] == "— not run — — — — —"  # not "failed": nothing failed
    assert rows["untrimmed + streaming"].startswith("18,274 13,500 ")
    caption = " ".join(text.split())
    assert "of the runs each mode finished before the run was stopped (1, 1, 0, 0 of 3," in caption


def test_the_title_is_one_line_however_narrow_the_output() -> None:
    report = report_with(server_tokens=None)
    title = modes_title(report)
    assert title == (
        "agent-latency bench · http://127.0.0.1:40413/v1 · model gemma-3-270m-it-qat · budget 2500"
    )
    result = run_cli("--runs", "1", "--budget", "400")  # stdout is not a terminal here
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("agent-latency bench · http://127.0.0.1:") and first.endswith(
        "budget 400"
    )


# -- progress --------------------------------------------------------------------------------------


def test_progress_goes_to_stderr_in_a_few_lines_without_a_terminal(tmp_path: Path) -> None:
    scenario = tmp_path / "conversation.json"
    scenario.write_text(json.dumps(agent_conversation(6)), encoding="utf-8")
    result = run_cli("--messages", str(scenario), "--runs", "3", "--budget", "300", "--turns", "8")

    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    total = BenchOptions(runs=3, turns=8).calls()
    assert total == 45
    assert 2 <= len(lines) <= 10  # a line at each tenth of the calls, not one per call
    assert all(line.startswith("bench: ") for line in lines)
    assert lines[-1].startswith(f"bench: {total}/{total} calls, prefix-stable trimming: call 8/8 (")
    assert "bench:" not in result.stdout


def test_runs_0_skips_the_four_modes_and_needs_something_else_to_run(tmp_path: Path) -> None:
    scenario = tmp_path / "conversation.json"
    scenario.write_text(json.dumps(agent_conversation(4)), encoding="utf-8")
    result = run_cli("--messages", str(scenario), "--runs", "0", "--turns", "2", "--budget", "300")
    assert result.exit_code == 0, result.output
    assert "untrimmed + blocking" not in result.stdout
    assert "Multi-turn replay" in result.stdout

    refused = run_cli("--runs", "0")
    assert refused.exit_code != 0
    assert "--runs 0 skips the four modes" in str(refused.exception)
