"""``agent-latency bench``: the before/after latency table on any endpoint, or on the simulator.

The command function is registered by the CLI app (``app.command()(bench)``). Bad input (files,
flags, configuration, an endpoint that refuses requests) raises ``ValueError``; a failed
regression gate exits with status 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from agent_latency.bench import (
    BenchPlan,
    BenchReport,
    check_regression,
    load_baseline,
    open_endpoint,
    run_bench,
)
from agent_latency.bench._contenders import STRATEGIES
from agent_latency.bench._plot import require_matplotlib, write_plot
from agent_latency.bench._quality import PLACES, QualityRow, run_quality
from agent_latency.bench._report import saving_breakdown
from agent_latency.bench._results import BASELINE_MODE, GATED_MODE, ModeResult
from agent_latency.bench._runner import ProgressCallback
from agent_latency.bench._scenario import load_scenario
from agent_latency.bench._workload import (
    MixedWorkload,
    run_mixed_workload,
    workload_table,
)
from agent_latency.config import load_settings, with_channel_overrides

DEFAULT_MAX_REGRESSION_PCT: Final = 10.0
_FAILED: Final = "failed"
_PLACE_HEADERS: Final = dict(
    zip(PLACES, ("head", "mid", "tail", "old", "now", "rule"), strict=True)
)
"""Short column headers of the retention table, by the place of the fact."""
# No vertical rules, no padding at the edges, one shared space between columns: the tables fit
# 80 columns with five-digit milliseconds.
_NARROW: Final[dict[str, Any]] = {
    "box": box.SIMPLE_HEAD,
    "pad_edge": False,
    "collapse_padding": True,
}


def bench(
    config: Annotated[
        Path | None, typer.Option("--config", metavar="FILE", help="config.toml to read.")
    ] = None,
    settings_file: Annotated[
        Path | None, typer.Option("--settings", metavar="FILE", help="settings.json to read.")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            help="API root, e.g. https://host/v1. Default: llm.base_url, else the simulator."
        ),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name to request.")] = None,
    api_key: Annotated[
        str | None, typer.Option(help="API key (or AGENT_LATENCY_API_KEY).", show_default=False)
    ] = None,
    messages: Annotated[
        Path | None,
        typer.Option(
            "--messages",
            metavar="FILE.json",
            help='OpenAI-format conversation: a message list or {"messages": [...]}; tool '
            "definitions count only inside messages. Default: a ~8,200-token agent request.",
        ),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(min=1, help="Trimmer budget in prompt tokens; default: prompt.token_budget."),
    ] = None,
    runs: Annotated[int, typer.Option(min=1, help="Timed calls per mode.")] = 5,
    turns: Annotated[
        int | None,
        typer.Option(min=1, help="Also replay the last N calls of the conversation, per strategy."),
    ] = None,
    json_file: Annotated[
        Path | None, typer.Option("--json", metavar="FILE", help="Write the results as JSON.")
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE.png",
            help="Draw the modes and a budget sweep's prefill line (matplotlib).",
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(metavar="FILE.json", help="A --json file of an earlier run to compare with."),
    ] = None,
    quality: Annotated[
        bool,
        typer.Option(
            "--quality",
            help="Also measure what trimming keeps of the facts a question needs (retention) at "
            "budgets 6,000 and 3,000, per strategy, next to the TTFT the simulator predicts.",
        ),
    ] = False,
    workload: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Also run a workload on the embedded simulator: mixed (interleaved "
            "conversations with idle gaps, every strategy and peer; about 3 minutes).",
        ),
    ] = None,
    workload_endpoint: Annotated[
        bool,
        typer.Option(
            "--workload-endpoint",
            help="Run the workload against the bench's endpoint (--base-url or llm.base_url) "
            "instead of the simulator; its budget is --budget (default 3,000), its context "
            "window llm.context_window (default 8,192).",
        ),
    ] = False,
    workload_strategies: Annotated[
        str | None,
        typer.Option(
            metavar="NAMES",
            help="Comma-separated strategies of the workload to run (default: all), e.g. "
            "none,prefix_stable,cost_aware.",
        ),
    ] = None,
    workload_calls: Annotated[
        int | None,
        typer.Option(min=1, help="Calls per conversation of the workload (default 16)."),
    ] = None,
    workload_conversations: Annotated[
        int | None,
        typer.Option(min=1, help="Interleaved conversations of the workload (default 3)."),
    ] = None,
    max_regression: Annotated[
        float | None,
        typer.Option(
            min=0,
            metavar="PCT",
            help=f"With --baseline: fail (exit 1) when trimmed + streaming TTFT p50 is more than "
            f"PCT% slower. Default {DEFAULT_MAX_REGRESSION_PCT:g}.",
        ),
    ] = None,
) -> None:
    """Measure TTFT and total time, untrimmed/trimmed × blocking/streaming, on an endpoint.

    With no --base-url and no llm.base_url configured, an embedded simulator serves the calls.
    """
    if max_regression is not None and baseline is None:
        raise ValueError("--max-regression needs --baseline FILE.json to compare with.")
    if workload not in (None, "mixed"):
        raise ValueError(f"--workload {workload!r}: the only workload is 'mixed'.")
    shape = workload_shape(
        workload,
        endpoint=workload_endpoint,
        budget=budget,
        calls=workload_calls,
        conversations=workload_conversations,
        strategies=workload_strategies,
    )
    settings = with_channel_overrides(
        load_settings(config, settings_file), base_url=base_url, model=model, api_key=api_key
    )
    conversation = load_scenario(messages)
    plan = BenchPlan(runs=runs, turns=turns, budget=budget, sweep=plot is not None)
    baseline_ms = load_baseline(baseline) if baseline is not None else None
    for option, path in (("--json", json_file), ("--plot", plot)):
        if path is not None:
            check_output_file(option, path)
    if plot is not None:
        require_matplotlib()

    with open_endpoint(settings) as (endpoint_settings, simulator), _progress(plan) as advance:
        report = run_bench(
            endpoint_settings, conversation, plan, simulator=simulator, on_call=advance
        )

    retention = run_quality() if quality else None
    mixed = None
    if shape is not None:
        mixed_workload, only = shape
        if workload_endpoint and settings.llm.context_window:
            mixed_workload = replace(mixed_workload, context_window=settings.llm.context_window)
        mixed = run_mixed_workload(
            mixed_workload,
            settings=settings,
            messages=conversation if messages is not None else None,
            base_url=settings.llm.base_url if workload_endpoint else None,
            only=only,
            on_call=lambda call: print(f"workload: {call}", file=sys.stderr, flush=True),
        )

    console = Console()
    console.print(modes_table(report))
    breakdown = saving_breakdown(report)
    if breakdown is not None:
        console.print(breakdown.describe())
    if report.turns:
        console.print(turns_table(report))
    if report.sweep:
        fit = report.prefill_fit()
        if fit is not None:
            console.print(
                f"Prefill: {fit.ms_per_1k_tokens:,.0f} ms per 1k prompt tokens "
                f"(+ {fit.intercept_ms:,.0f} ms fixed), fitted over {len(report.sweep)} budgets."
            )
    if retention is not None:
        console.print(quality_table(retention))
    if mixed is not None:
        console.print(Text(workload_table(mixed)), soft_wrap=True)
    for failure in report.failures():
        console.print(Text(f"Failed: {failure}"), style="bold red", soft_wrap=True)
    if json_file is not None:
        document = report.to_json()
        if retention is not None:
            document["quality"] = [row.to_json() for row in retention]
        if mixed is not None:
            document["workload"] = mixed
        json_file.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        console.print(f"Wrote {json_file}")
    if plot is not None:
        write_plot(report, plot, quality=retention)
        console.print(f"Wrote {plot}")
    if baseline_ms is not None:
        limit = DEFAULT_MAX_REGRESSION_PCT if max_regression is None else max_regression
        verdict = check_regression(report, baseline_ms, limit)
        console.print(verdict.describe())
        if not verdict.passed:
            raise typer.Exit(code=1)


def workload_shape(
    workload: str | None,
    *,
    endpoint: bool,
    budget: int | None,
    calls: int | None,
    conversations: int | None,
    strategies: str | None,
) -> tuple[MixedWorkload, list[str] | None] | None:
    """The workload the ``--workload*`` options ask for, checked before any call.

    Returns:
        The workload and the strategies to run (``None``: all), or ``None`` without
        ``--workload``.

    Raises:
        ValueError: When a ``--workload-*`` option comes without ``--workload``, or names an
            unknown strategy.
    """
    given = {
        "--workload-endpoint": endpoint or None,
        "--workload-calls": calls,
        "--workload-conversations": conversations,
        "--workload-strategies": strategies,
    }
    if workload is None:
        stray = [option for option, value in given.items() if value is not None]
        if stray:
            raise ValueError(f"{stray[0]} needs --workload mixed.")
        return None
    only = None
    if strategies is not None:
        only = [name.strip() for name in strategies.split(",") if name.strip()]
        unknown = sorted(set(only) - set(STRATEGIES))
        if unknown or not only:
            raise ValueError(
                f"--workload-strategies {strategies!r}: unknown {unknown or 'none given'}; "
                f"choose from {', '.join(STRATEGIES)}."
            )
    shape = MixedWorkload()
    changes: dict[str, int] = {}
    if calls is not None:
        changes["calls"] = calls
    if conversations is not None:
        changes["conversations"] = conversations
    if budget is not None and endpoint:
        changes["budget"] = budget
    return replace(shape, **changes), only


def check_output_file(option: str, path: Path) -> None:
    """Checks, before any call, that ``path`` can be written: results are never lost at the end.

    Raises:
        ValueError: Naming the option and the path, when it is a folder, its folder is missing
            or not writable.
    """
    if path.is_dir():
        example = path / ("bench.png" if option == "--plot" else "bench.json")
        raise ValueError(f"{option} {path}: that is a folder; give a file path, e.g. {example}.")
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"{option} {path}: the folder {folder} does not exist.")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{option} {path}: cannot write there (permission denied).")


@contextlib.contextmanager
def _progress(plan: BenchPlan) -> Iterator[ProgressCallback]:
    """Yields the per-call progress callback: a live bar on a terminal, plain lines otherwise.

    Progress goes to stderr, so stdout holds only the results; when stderr is not a terminal (a
    log file, CI), each call prints one line, so a long run shows that it is alive.
    """
    stderr = Console(stderr=True)
    total = plan.calls()
    if not stderr.is_terminal:
        done = 0
        started = time.monotonic()

        def line(step: str) -> None:
            nonlocal done
            done += 1
            elapsed = time.monotonic() - started
            print(f"bench: {done}/{total} {step} ({elapsed:,.0f} s)", file=sys.stderr, flush=True)

        yield line
        return
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    ) as progress:
        task = progress.add_task("warm-up", total=total)

        def advance(step: str) -> None:
            progress.update(task, advance=1, description=step)

        yield advance


def _ms(value: float) -> str:
    return f"{value:,.0f}"


def _change(value: float, base: ModeResult, is_baseline: bool, *, ttft: bool) -> str:
    if is_baseline or not base.ok:
        return "—"
    baseline = base.ttft_ms(0.5) if ttft else base.total_ms(0.5)
    return f"{(value / baseline - 1) * 100:+.0f}%"


def _add_figures(
    table: Table, headers: Sequence[str], labels: Sequence[str], rows: Sequence[Sequence[str]]
) -> None:
    """Adds right-aligned figure columns after the label column, and one row per label."""
    for column, header in enumerate(headers):
        # Exactly as wide as the widest figure or header word: headers wrap, figures are never
        # cut (rich shrinks columns with a mere minimum width below it on narrow terminals).
        widest = max([len(row[column]) for row in rows] + [max(map(len, header.split()))])
        table.add_column(header, justify="right", width=widest)
    for label, row in zip(labels, rows, strict=True):
        table.add_row(label, *row)


def modes_table(report: BenchReport) -> Table:
    """Returns the single-turn table: one row per mode, compared with untrimmed + blocking."""
    where = "embedded simulator" if report.simulated else report.endpoint
    table = Table(
        **_NARROW,
        caption_justify="left",
        title=f"agent-latency bench · {where} · model {report.model} · budget {report.budget}",
        caption=(
            f"Times in ms: p50/p95 of {report.runs} run{'' if report.runs == 1 else 's'} per "
            "mode, interleaved, after one "
            f"warm-up; Δ: p50 change vs {BASELINE_MODE.label}. Blocking: TTFT = total (the "
            "first text arrives with the whole answer). Every prompt starts with a unique "
            "request id, so no server prefix cache serves it."
        ),
    )
    table.add_column("mode", no_wrap=True)
    base = report.mode(BASELINE_MODE)
    rows = [
        (
            f"{result.input_tokens:,}",
            _ms(result.ttft_ms(0.5)),
            _ms(result.ttft_ms(0.95)),
            _ms(result.total_ms(0.5)),
            _ms(result.total_ms(0.95)),
            _change(result.ttft_ms(0.5), base, result.mode == BASELINE_MODE, ttft=True),
            _change(result.total_ms(0.5), base, result.mode == BASELINE_MODE, ttft=False),
        )
        if result.ok
        else ("—", _FAILED, "—", "—", "—", "—", "—")
        for result in report.modes
    ]
    headers = ("tokens", "TTFT p50", "TTFT p95", "total p50", "total p95", "Δ TTFT", "Δ total")
    labels = [
        f"[bold]{result.mode.label}[/bold]" if result.mode == GATED_MODE else result.mode.label
        for result in report.modes
    ]
    _add_figures(table, headers, labels, rows)
    return table


def turns_table(report: BenchReport) -> Table:
    """Returns the multi-turn table: one row per strategy."""
    calls = max(len(result.samples) for result in report.turns)
    table = Table(
        **_NARROW,
        caption_justify="left",
        title=f"Multi-turn replay · last {calls} model call{'' if calls == 1 else 's'} · "
        f"budget {report.budget}",
        caption=(
            "TTFT in ms. Each strategy replays the conversation call by call as one streamed "
            "session. Cached: prompt tokens the server reported taking from its prefix cache. "
            "Prefilled: the rest, which the first token waits for."
        ),
    )
    table.add_column("strategy", no_wrap=True)
    rows = []
    for result in report.turns:
        if not result.ok:
            rows.append((_FAILED, "—", "—", "—", "—", "—"))
            continue
        cached = result.cached_tokens
        rows.append(
            (
                _ms(result.mean_ttft_ms),
                _ms(result.p95_ttft_ms),
                f"{result.prompt_tokens:,}",
                "n/a" if cached is None else f"{cached:,}",
                "n/a" if cached is None else f"{cached / result.prompt_tokens:.0%}",
                "n/a" if cached is None else f"{result.prompt_tokens - cached:,}",
            )
        )
    headers = ("mean TTFT", "p95 TTFT", "prompt tokens", "cached", "hit", "prefilled")
    _add_figures(table, headers, [r.strategy.label for r in report.turns], rows)
    return table


def quality_table(rows: Sequence[QualityRow]) -> Table:
    """Returns the retention table: one row per strategy and budget."""
    table = Table(
        **_NARROW,
        caption_justify="left",
        title="Retention · facts the latest question needs that survive the trim",
        caption=(
            "Generated agent conversations (English and Chinese, 12-48 rounds) whose last "
            "question needs one fact stated at a known place. All: the share whose fact's "
            "answer is still in what is sent; then by place: the head, a middle and the tail "
            "round, an old and the current tool result, and a rule the user stated once. TTFT "
            "(ms): what the simulator's latency model predicts for the mean prompt sent."
        ),
    )
    table.add_column("strategy", no_wrap=True)
    headers = ("budget", "all", *_PLACE_HEADERS.values(), "TTFT")
    figures = [
        (
            f"{row.budget:,}",
            f"{row.retention:.0%}",
            *(f"{row.by_place[p]:.0%}" for p in _PLACE_HEADERS),
            _ms(row.model_ttft_ms),
        )
        for row in rows
    ]
    _add_figures(table, headers, [row.strategy for row in rows], figures)
    return table
