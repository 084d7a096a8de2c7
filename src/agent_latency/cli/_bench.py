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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from agent_latency.bench import (
    BenchOptions,
    MixedWorkload,
    WorkloadProgress,
    WorkloadReport,
    check_regression,
    combined_frontier,
    load_baseline,
    load_scenario_request,
    open_endpoint,
    require_matplotlib,
    run_bench,
    run_mixed_workload,
    run_quality,
    saving_breakdown,
    warm_cut_advice,
    workload_strategies,
    write_plot,
)
from agent_latency.cli._tables import (
    frontier_table,
    modes_table,
    modes_title,
    quality_table,
    retention_by_kind_table,
    turns_table,
    workload_table,
)
from agent_latency.config import Settings, load_settings, with_channel_overrides

DEFAULT_MAX_REGRESSION_PCT: Final = 10.0
ALL_PROFILES: Final = "all"
_PROGRESS_LINES: Final = 10
"""Without a terminal, each phase prints at most this many progress lines (one per tenth)."""


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
            help='OpenAI-format conversation: a message list, or a request body {"messages": '
            '[...], "tools": [...]} whose tools are sent with every call and counted. Default: '
            "a ~8,200-token agent request.",
        ),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(min=1, help="Trimmer budget in prompt tokens; default: prompt.token_budget."),
    ] = None,
    runs: Annotated[
        int,
        typer.Option(
            min=0,
            help="Timed calls per mode; 0 skips the four-mode table and the plot's prefill "
            "sweep (about 20 s each on the simulator), e.g. for --quality, --workload or --turns "
            "alone.",
        ),
    ] = 5,
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
            "conversations with idle gaps that state facts and ask about them later, every "
            "strategy and peer; about 5 minutes).",
        ),
    ] = None,
    workload_profile: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Run the workload's simulator as a server profile: openai-hosted, deepseek, "
            "vllm-h100-7b, llama-cpu, or all (one after another). Default: the simulator's "
            "default latency at half speed.",
        ),
    ] = None,
    frontier: Annotated[
        bool,
        typer.Option(
            "--frontier",
            help="Run each workload strategy at every point of its own knob (budget, "
            'max_tokens, trigger and keep) and write the points as "frontier" (about 20 '
            "minutes per profile).",
        ),
    ] = False,
    workload_answers: Annotated[
        bool,
        typer.Option(
            "--workload-answers",
            help="With --workload-endpoint on a real model: answer each fact question greedily "
            "(temperature 0, 32 tokens) on the prompt the strategy sent, less the bench's "
            "cache salt, and score the answers.",
        ),
    ] = False,
    workload_endpoint: Annotated[
        bool,
        typer.Option(
            "--workload-endpoint",
            help="Run the workload against the bench's endpoint (--base-url or llm.base_url) "
            "instead of the simulator; its budget is --budget (default 6,000, the library's "
            "default budget), its context window llm.context_window (default 8,192).",
        ),
    ] = False,
    workload_strategies_option: Annotated[
        str | None,
        typer.Option(
            "--workload-strategies",
            metavar="NAMES",
            help="Comma-separated strategies of the workload to run (default: all), e.g. "
            "none,prefix_stable,trim_messages_exact.",
        ),
    ] = None,
    workload_calls: Annotated[
        int | None,
        typer.Option(min=1, help="Calls per conversation of the workload (default 17)."),
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
    if runs == 0 and not (quality or workload or turns):
        raise ValueError(
            "--runs 0 skips the four modes, so give something else to run: --quality, "
            "--workload mixed or --turns N."
        )
    if runs == 0 and baseline is not None:
        raise ValueError("--baseline compares the trimmed + streaming mode: give --runs 1 or more.")
    shape = workload_shape(
        workload,
        endpoint=workload_endpoint,
        budget=budget,
        calls=workload_calls,
        conversations=workload_conversations,
        strategies=workload_strategies_option,
        profile=workload_profile,
        frontier=frontier,
        answers=workload_answers,
    )
    settings = with_channel_overrides(
        load_settings(config, settings_file), base_url=base_url, model=model, api_key=api_key
    )
    request = load_scenario_request(messages)
    conversation = request.messages
    # The prefill sweep belongs to the single-turn bench: --runs 0 skips it too.
    options = BenchOptions(
        runs=runs, turns=turns, budget=budget, sweep=plot is not None and runs > 0
    )
    baseline_ms = load_baseline(baseline) if baseline is not None else None
    for option, path in (("--json", json_file), ("--plot", plot)):
        if path is not None:
            check_output_file(option, path)
    if plot is not None:
        require_matplotlib()

    with open_endpoint(settings) as (endpoint_settings, simulator), _progress("bench") as advance:
        report = run_bench(
            endpoint_settings,
            conversation,
            options,
            simulator=simulator,
            tools=request.tools,
            on_call=_counted(advance, options.calls()),
        )

    retention = run_quality() if quality else None
    mixed = (
        _run_workloads(
            shape,
            settings,
            messages=conversation if messages is not None else None,
            endpoint=workload_endpoint,
        )
        if shape is not None
        else []
    )

    console = Console()
    if report.modes:
        console.print(Text(modes_title(report)), soft_wrap=True)
        console.print(modes_table(report))
    breakdown = saving_breakdown(report)
    if breakdown is not None:
        console.print(breakdown.describe())
    if report.turns:
        console.print(turns_table(report))
        advice = warm_cut_advice(
            report,
            context_window=settings.llm.context_window,
            reserve=settings.prompt.reserve_for_output,
        )
        if advice is not None:
            console.print(Text(advice), soft_wrap=True)
    if report.sweep:
        fit = report.prefill_fit()
        if fit is not None:
            console.print(
                f"Prefill: {fit.describe()}, fitted over {len(report.sweep)} budgets.",
                soft_wrap=True,
            )
    if retention is not None:
        console.print(quality_table(retention))
    for run in mixed:
        console.print(Text(workload_table(run)), soft_wrap=True)
        console.print(Text(retention_by_kind_table(run)), soft_wrap=True)
        if run.frontier:
            console.print(Text(frontier_table(run)), soft_wrap=True)
    for failure in report.failures():
        console.print(Text(f"Failed: {failure}"), style="bold red", soft_wrap=True)
    if json_file is not None:
        document = report.to_json()
        if retention is not None:
            document["quality"] = [row.to_json() for row in retention]
        if len(mixed) == 1:
            document["workload"] = mixed[0].to_json()
        elif mixed:
            document["workloads"] = [run.to_json() for run in mixed]
        if any(run.frontier for run in mixed):
            document["frontier"] = combined_frontier(mixed)
        json_file.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        console.print(f"Wrote {json_file}")
    if plot is not None:
        write_plot(report, plot, quality=retention, frontier=[r for r in mixed if r.frontier])
        console.print(f"Wrote {plot}")
    if baseline_ms is not None:
        limit = DEFAULT_MAX_REGRESSION_PCT if max_regression is None else max_regression
        verdict = check_regression(report, baseline_ms, limit)
        console.print(verdict.describe())
        if not verdict.passed:
            raise typer.Exit(code=1)


@dataclass(frozen=True)
class WorkloadOptions:
    """What the ``--workload*`` options ask for.

    Attributes:
        shape: The workload's shape.
        only: The strategies to run; ``None``: all.
        profiles: The simulator's server profiles, one run each; ``(None,)``: the default
            simulator (or the endpoint).
        frontier: Sweep every strategy's knob.
        answers: Answer and score the fact questions.
    """

    shape: MixedWorkload
    only: list[str] | None
    profiles: tuple[str | None, ...]
    frontier: bool
    answers: bool


def workload_shape(
    workload: str | None,
    *,
    endpoint: bool,
    budget: int | None,
    calls: int | None,
    conversations: int | None,
    strategies: str | None,
    profile: str | None = None,
    frontier: bool = False,
    answers: bool = False,
) -> WorkloadOptions | None:
    """The workload the ``--workload*`` options ask for, checked before any call.

    Returns:
        The options, or ``None`` without ``--workload``.

    Raises:
        ValueError: When a ``--workload-*`` option (or ``--frontier``) comes without
            ``--workload``, names an unknown strategy or profile, or options conflict.
    """
    given = {
        "--workload-endpoint": endpoint or None,
        "--workload-calls": calls,
        "--workload-conversations": conversations,
        "--workload-strategies": strategies,
        "--workload-profile": profile,
        "--frontier": frontier or None,
        "--workload-answers": answers or None,
    }
    if workload is None:
        stray = [option for option, value in given.items() if value is not None]
        if stray:
            raise ValueError(f"{stray[0]} needs --workload mixed.")
        return None
    only = None
    if strategies is not None:
        only = [name.strip() for name in strategies.split(",") if name.strip()]
        unknown = sorted(set(only) - set(workload_strategies()))
        if unknown or not only:
            raise ValueError(
                f"--workload-strategies {strategies!r}: unknown {unknown or 'none given'}; "
                f"choose from {', '.join(workload_strategies())}."
            )
    if profile is not None and endpoint:
        raise ValueError(
            "--workload-profile sets up the simulator; with --workload-endpoint the workload "
            "runs on the endpoint: give one of them."
        )
    if answers and not endpoint:
        raise ValueError(
            "--workload-answers scores a real model's answers (the simulator answers filler): "
            "add --workload-endpoint and a --base-url serving a model."
        )
    profiles: tuple[str | None, ...] = (profile,)
    if profile is not None:
        from agent_latency.sim import server_profile, server_profiles

        if profile == ALL_PROFILES:
            profiles = tuple(p.name for p in server_profiles())
        else:
            profiles = (server_profile(profile).name,)  # an unknown name fails here
    shape = MixedWorkload()
    changes: dict[str, int] = {}
    if calls is not None:
        changes["calls"] = calls
    if conversations is not None:
        changes["conversations"] = conversations
    if budget is not None and endpoint:
        changes["budget"] = budget
    return WorkloadOptions(replace(shape, **changes), only, profiles, frontier, answers)


def _run_workloads(
    options: WorkloadOptions,
    settings: Settings,
    *,
    messages: list[Any] | None,
    endpoint: bool,
) -> list[WorkloadReport]:
    """Runs the workload once per profile asked for, one after another."""
    shape = options.shape
    if endpoint and settings.llm.context_window:
        shape = replace(shape, context_window=settings.llm.context_window)
    reports = []
    for profile in options.profiles:
        with _progress(f"workload {profile or ''}".strip()) as advance:
            reports.append(
                run_mixed_workload(
                    shape,
                    settings=settings,
                    messages=messages,
                    profile=profile,
                    base_url=settings.llm.base_url if endpoint else None,
                    only=options.only,
                    frontier=options.frontier,
                    answers=options.answers,
                    on_call=partial(_forward, advance),
                )
            )
    return reports


def _forward(advance: Advance, call: WorkloadProgress) -> None:
    advance(call.done, call.total, call.step)


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


Advance = Callable[[int, int, str], None]
"""(calls done, calls in all, what the last call was)."""


def _counted(advance: Advance, total: int) -> Callable[[str], None]:
    """The bench's per-call callback (a step name) as one that counts the calls."""
    done = 0

    def on_call(step: str) -> None:
        nonlocal done
        done += 1
        advance(done, total, step)

    return on_call


@contextlib.contextmanager
def _progress(phase: str) -> Iterator[Advance]:
    """Yields the progress callback of one phase, on stderr (stdout holds only the results).

    On a terminal: one updating line (a bar, the count and the last call), gone at the end.
    Otherwise (a log file, CI): a line at each tenth of the calls, so a long run shows that it
    is alive without a line per call.
    """
    stderr = Console(stderr=True)
    if not stderr.is_terminal:
        started = time.monotonic()
        shown = [0]

        def line(done: int, total: int, step: str) -> None:
            tenth = done * _PROGRESS_LINES // total if total else _PROGRESS_LINES
            if tenth > shown[0] or done == total:
                shown[0] = _PROGRESS_LINES if done == total else tenth
                elapsed = time.monotonic() - started
                print(
                    f"{phase}: {done}/{total} calls, {step} ({elapsed:,.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )

        yield line
        return
    with Progress(
        TextColumn(f"{phase}: " + "[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    ) as progress:
        task = progress.add_task("starting", total=None)

        def advance(done: int, total: int, step: str) -> None:
            progress.update(task, completed=done, total=total, description=step)

        yield advance
