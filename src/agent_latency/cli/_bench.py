"""``agent-latency bench``: the before/after latency table on any endpoint, or on the simulator.

The command function is registered by the CLI app (``app.command()(bench)``). Bad input (files,
flags, configuration, an endpoint that refuses requests) raises ``ValueError``; a failed
regression gate exits with status 1. Ctrl-C (or SIGTERM: see ``_stops``) keeps what was
measured: the tables of what finished, marked partial with what is missing, the ``--json`` file
marked ``"interrupted": true`` (no ``--plot``: a figure would not say it is partial), the gate
not passed, exit 130 (143 after SIGTERM). An endpoint that fails a call once some have finished
stops the run alike, the failure said where the signal would be, and exits 2.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
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

from agent_latency._server_usage import MAX_REPORTED_TOKENS
from agent_latency._user_input import RequestFile
from agent_latency.bench import (
    BenchFailed,
    BenchInterrupted,
    BenchOptions,
    BenchReport,
    MixedWorkload,
    QualityRow,
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
from agent_latency.cli._command import options_command
from agent_latency.cli._stops import Stop, stopping_signals
from agent_latency.cli._tables import (
    frontier_table,
    modes_table,
    modes_title,
    print_whole,
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
_FAILED: Final = 2
"""The exit status of a run a failed call stopped: that of bad input, as the endpoint's failure
before any call."""


@dataclass(frozen=True)
class BenchFlags:
    """The options of ``agent-latency bench``, as the command line gave them."""

    config: Annotated[
        Path | None, typer.Option("--config", metavar="FILE", help="config.toml to read.")
    ] = None
    settings_file: Annotated[
        Path | None, typer.Option("--settings", metavar="FILE", help="settings.json to read.")
    ] = None
    base_url: Annotated[
        str | None,
        typer.Option(
            help="API root, e.g. https://host/v1. Default: llm.base_url, else the simulator."
        ),
    ] = None
    model: Annotated[str | None, typer.Option(help="Model name to request.")] = None
    api_key: Annotated[
        str | None, typer.Option(help="API key (or AGENT_LATENCY_API_KEY).", show_default=False)
    ] = None
    messages: Annotated[
        Path | None,
        typer.Option(
            "--messages",
            metavar="FILE.json",
            help='OpenAI-format conversation: a message list, or a request body {"messages": '
            '[...], "tools": [...]} whose tools are sent with every call and counted. Default: '
            "a ~8,200-token agent request.",
        ),
    ] = None
    budget: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_REPORTED_TOKENS,
            help="Trimmer budget in prompt tokens; default: prompt.token_budget.",
        ),
    ] = None
    runs: Annotated[
        int,
        typer.Option(
            min=0,
            help="Timed calls per mode; 0 skips the four-mode table and the plot's prefill "
            "sweep (about 20 s each on the simulator), e.g. for --quality, --workload or --turns "
            "alone.",
        ),
    ] = 5
    turns: Annotated[
        int | None,
        typer.Option(min=1, help="Also replay the last N calls of the conversation, per strategy."),
    ] = None
    json_file: Annotated[
        Path | None, typer.Option("--json", metavar="FILE", help="Write the results as JSON.")
    ] = None
    plot: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE.png",
            help="Draw the modes and a budget sweep's prefill line (matplotlib).",
        ),
    ] = None
    baseline: Annotated[
        Path | None,
        typer.Option(metavar="FILE.json", help="A --json file of an earlier run to compare with."),
    ] = None
    quality: Annotated[
        bool,
        typer.Option(
            "--quality",
            help="Also measure what trimming keeps of the facts a question needs (retention) at "
            "budgets 6,000 and 3,000, per strategy, next to the TTFT the simulator predicts.",
        ),
    ] = False
    workload: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Also run a workload on the embedded simulator: mixed (interleaved "
            "conversations with idle gaps that state facts and ask about them later, every "
            "strategy and peer; about 5 minutes).",
        ),
    ] = None
    workload_profile: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Run the workload's simulator as a server profile: openai-hosted, deepseek, "
            "vllm-h100-7b, llama-cpu, or all (one after another). Default: the simulator's "
            "default latency at half speed.",
        ),
    ] = None
    frontier: Annotated[
        bool,
        typer.Option(
            "--frontier",
            help="Run each workload strategy at every point of its own knob (budget, "
            'max_tokens, trigger and keep) and write the points as "frontier" (about 20 '
            "minutes per profile).",
        ),
    ] = False
    workload_answers: Annotated[
        bool,
        typer.Option(
            "--workload-answers",
            help="With --workload-endpoint on a real model: answer each fact question greedily "
            "(temperature 0, 32 tokens) on the prompt the strategy sent, less the bench's "
            "cache salt, and score the answers.",
        ),
    ] = False
    workload_endpoint: Annotated[
        bool,
        typer.Option(
            "--workload-endpoint",
            help="Run the workload against the bench's endpoint (--base-url or llm.base_url) "
            "instead of the simulator; its budget is --budget (default 6,000, the library's "
            "default budget), its context window llm.context_window (default 8,192).",
        ),
    ] = False
    workload_strategies_option: Annotated[
        str | None,
        typer.Option(
            "--workload-strategies",
            metavar="NAMES",
            help="Comma-separated strategies of the workload to run (default: all), e.g. "
            "none,prefix_stable,trim_messages_exact.",
        ),
    ] = None
    workload_calls: Annotated[
        int | None,
        typer.Option(min=1, help="Calls per conversation of the workload (default 17)."),
    ] = None
    workload_conversations: Annotated[
        int | None,
        typer.Option(min=1, help="Interleaved conversations of the workload (default 3)."),
    ] = None
    max_regression: Annotated[
        float | None,
        typer.Option(
            min=0,
            metavar="PCT",
            help=f"With --baseline: fail (exit 1) when trimmed + streaming TTFT p50 is more than "
            f"PCT% slower. Default {DEFAULT_MAX_REGRESSION_PCT:g}.",
        ),
    ] = None


@dataclass(frozen=True)
class BenchResults:
    """What one ``bench`` run measured.

    Attributes:
        report: The four modes, the turns and the prefill sweep.
        retention: The ``--quality`` rows, if asked for (and measured).
        workloads: One report per workload profile run (none without ``--workload``).
        interrupted: A signal, or a call the endpoint failed, stopped the run before all was
            measured: what is here is what finished.
        missing: With ``interrupted``: what was asked for and not measured.
        failed: With ``interrupted``: the failed call that stopped it, as a stop (``None``: a
            signal did).
    """

    report: BenchReport
    retention: list[QualityRow] | None
    workloads: list[WorkloadReport]
    interrupted: bool = False
    missing: tuple[str, ...] = ()
    failed: Stop | None = None

    @property
    def measured(self) -> bool:
        """Whether any call finished with a figure (a run interrupted early may hold none)."""
        report = self.report
        return bool(
            any(result.samples for result in report.modes)
            or report.turns
            or report.sweep
            or self.retention is not None
            or self.workloads
        )


@options_command(BenchFlags)
def bench(options: BenchFlags) -> None:
    """Measure TTFT and total time, untrimmed/trimmed × blocking/streaming, on an endpoint.

    With no --base-url and no llm.base_url configured, an embedded simulator serves the calls.
    """
    _check_flags(options)
    workloads = workload_shape(options)
    settings = with_channel_overrides(
        load_settings(options.config, options.settings_file),
        base_url=options.base_url,
        model=options.model,
        api_key=options.api_key,
    )
    if options.workload_endpoint and settings.llm.base_url is None:
        raise ValueError(
            "--workload-endpoint runs the workload on the bench's endpoint, but none is set, so "
            "it would run on the simulator. Fix: give --base-url, or set llm.base_url or "
            "AGENT_LATENCY_BASE_URL."
        )
    request = load_scenario_request(options.messages)
    # The prefill sweep belongs to the single-turn bench: --runs 0 skips it too.
    measured = BenchOptions(
        runs=options.runs,
        turns=options.turns,
        budget=options.budget,
        sweep=options.plot is not None and options.runs > 0,
    )
    baseline_ms = load_baseline(options.baseline) if options.baseline is not None else None
    _check_outputs(options)
    with stopping_signals() as stops:
        files = ", no --json or --plot file" if options.json_file or options.plot else ""
        try:
            results = _measure(options, settings, request, measured, workloads, stops.taken)
        except (ValueError, OSError) as error:
            if stops.first is None:
                raise
            # The signal's KeyboardInterrupt can land anywhere in a call, an import half done
            # among them (then a message class is loaded twice and the call fails): what fails
            # after it is the signal's doing, not the endpoint's.
            failed = " ".join(str(error).split())
            _say(f"{stops.first.said}; the call under way then failed ({failed}): no table{files}.")
            raise typer.Exit(code=stops.first.exit_code) from None
        stops.hold()
        if results is None or (results.interrupted and not results.measured):
            _say(f"{stops.cause.said} before any call was measured: no table{files}.")
            raise typer.Exit(code=stops.cause.exit_code)
        cause = results.failed or stops.cause
        console = Console()
        try:
            written = _write_outputs(results, options)  # first: a closed stdout loses none of them
        finally:
            _print_results(console, results, settings, cause)  # and a failed file, none
        for path in written:
            console.print(f"Wrote {path}")
        if results.interrupted:
            _stop_interrupted(console, options, cause)
        if stops.first is not None:  # the results are whole: the gate is checked as usual
            _say(f"{stops.first.said} after the last measurement: the results above are complete.")
        if baseline_ms is not None:
            _gate(console, results.report, baseline_ms, options.max_regression)


def _say(line: str) -> None:
    """Prints ``line`` on stderr after the command's name, as its other notes are."""
    print(f"agent-latency bench: {line}", file=sys.stderr)


def _stop_interrupted(console: Console, options: BenchFlags, stop: Stop) -> None:
    """After the partial results: says what was not done, and exits as ``stop`` asks."""
    if options.baseline is not None:
        console.print(
            Text(
                "Regression gate: not checked: the run was interrupted, and a partial run never "
                "passes the gate."
            ),
            soft_wrap=True,
        )
    plot = f"; no --plot {options.plot} (a partial run draws none)" if options.plot else ""
    _say(f"{stop.said}: the results above are partial{plot}.")
    raise typer.Exit(code=stop.exit_code)


def _check_flags(options: BenchFlags) -> None:
    """Refuses flags that contradict each other, before anything is read or called."""
    if options.max_regression is not None and options.baseline is None:
        raise ValueError("--max-regression needs --baseline FILE.json to compare with.")
    if options.max_regression is not None and not math.isfinite(options.max_regression):
        raise ValueError(
            f"--max-regression {options.max_regression:g}: a gate without a finite limit never "
            "fails. Fix: give a percentage, e.g. 10."
        )
    if options.workload not in (None, "mixed"):
        raise ValueError(f"--workload {options.workload!r}: the only workload is 'mixed'.")
    if options.runs == 0 and not (options.quality or options.workload or options.turns):
        raise ValueError(
            "--runs 0 skips the four modes, so give something else to run: --quality, "
            "--workload mixed or --turns N."
        )
    if options.runs == 0 and options.baseline is not None:
        raise ValueError("--baseline compares the trimmed + streaming mode: give --runs 1 or more.")


def _check_outputs(options: BenchFlags) -> None:
    """Checks the output files can be written and the plot drawn, before any call, and that
    none is a file the bench reads or the other output."""
    read = {
        "--config": options.config,
        "--settings": options.settings_file,
        "--messages": options.messages,
        "--baseline": options.baseline,
    }
    for option, path in (("--json", options.json_file), ("--plot", options.plot)):
        if path is None:
            continue
        check_output_file(option, path)
        for other, used in read.items():
            if used is not None and used.resolve() == path.resolve():
                raise ValueError(
                    f"{option} {path}: is also the {other} file, which the results would "
                    "overwrite. Fix: give another file name."
                )
        read[option] = path
    if options.plot is not None:
        require_matplotlib(options.plot)


def _measure(
    options: BenchFlags,
    settings: Settings,
    request: RequestFile,
    measured: BenchOptions,
    workloads: WorkloadOptions | None,
    stopped: Callable[[], bool],
) -> BenchResults | None:
    """Runs the bench, then ``--quality``, then the workloads, each with its progress line
    (``stopped``: whether a stopping signal was taken, see :func:`run_bench`).

    Returns:
        The results; after Ctrl-C or SIGTERM, those of what finished (``interrupted``), or
        ``None`` when the bench had not started its calls.
    """
    report: BenchReport | None = None
    retention: list[QualityRow] | None = None
    mixed: list[WorkloadReport] = []
    try:
        with (
            open_endpoint(settings) as (endpoint_settings, simulator),
            _progress("bench") as advance,
        ):
            report = run_bench(
                endpoint_settings,
                request.messages,
                measured,
                simulator=simulator,
                tools=request.tools,
                on_call=_counted(advance, measured.calls()),
                stopped=stopped,
            )
        if options.quality:
            retention = run_quality()
        for run in _run_workloads(
            workloads,
            settings,
            messages=request.messages if options.messages is not None else None,
            endpoint=options.workload_endpoint,
        ):
            mixed.append(run)
    except BenchInterrupted as stop:
        report = stop.report
    except BenchFailed as failure:
        said = f"a call failed ({' '.join(str(failure).split()).rstrip('.')})"
        results = _interrupted(
            failure.report, retention, mixed, options, workloads, failed=Stop(said, _FAILED)
        )
        if not results.measured:
            raise  # the endpoint failed from the start: its one line, as for bad input
        return results
    except KeyboardInterrupt:  # before the bench's calls, or after them (the simulator stopping)
        if report is None:
            return None
    else:
        return BenchResults(report, retention, mixed)
    return _interrupted(report, retention, mixed, options, workloads)


def _interrupted(
    report: BenchReport,
    retention: list[QualityRow] | None,
    mixed: list[WorkloadReport],
    options: BenchFlags,
    workloads: WorkloadOptions | None,
    *,
    failed: Stop | None = None,
) -> BenchResults:
    """The results of a run a signal (or the ``failed`` call) stopped: what finished, and what
    was not measured.

    A signal after the last measurement (the simulator stopping, the last progress line)
    missed nothing: those results are complete, and not marked interrupted.
    """
    missing = list(report.missing)
    if options.quality and retention is None:
        missing.append("the retention (--quality)")
    profiles = workloads.profiles[len(mixed) :] if workloads is not None else ()
    missing += [f"the workload{f' on {p}' if p else ''}" for p in profiles]
    if not missing:
        return BenchResults(replace(report, interrupted=False), retention, mixed)
    return BenchResults(
        report, retention, mixed, interrupted=True, missing=tuple(missing), failed=failed
    )


def _print_results(console: Console, results: BenchResults, settings: Settings, stop: Stop) -> None:
    """Prints the tables and findings on stdout, the failures last; a partial run says first
    that ``stop`` cut it."""
    report = results.report
    if results.interrupted:
        missing = f" Not measured: {'; '.join(results.missing)}." if results.missing else ""
        console.print(
            Text(f"Partial results: {stop.said}.{missing}"),
            style="bold",
            soft_wrap=True,
        )
    if report.modes:
        console.print(Text(modes_title(report)), soft_wrap=True)
        print_whole(console, modes_table(report))
    breakdown = saving_breakdown(report)
    if breakdown is not None:
        console.print(breakdown.describe())
    if report.turns:
        _print_turns(console, report, settings)
    fit = report.prefill_fit() if report.sweep else None
    if fit is not None:
        console.print(
            f"Prefill: {fit.describe()}, fitted over {len(report.sweep)} budgets.", soft_wrap=True
        )
    if results.retention is not None:
        print_whole(console, quality_table(results.retention))
    for run in results.workloads:
        console.print(Text(workload_table(run)), soft_wrap=True)
        console.print(Text(retention_by_kind_table(run)), soft_wrap=True)
        if run.frontier:
            console.print(Text(frontier_table(run)), soft_wrap=True)
    for failure in report.failures():
        console.print(Text(f"Failed: {failure}"), style="bold red", soft_wrap=True)


def _print_turns(console: Console, report: BenchReport, settings: Settings) -> None:
    """Prints the replayed turns and, when sending everything was sooner, the advice."""
    print_whole(console, turns_table(report))
    advice = warm_cut_advice(
        report,
        context_window=settings.llm.context_window,
        reserve=settings.prompt.reserve_for_output,
    )
    if advice is not None:
        console.print(Text(advice), soft_wrap=True)


def _write_outputs(results: BenchResults, options: BenchFlags) -> list[Path]:
    """Writes ``--json`` and ``--plot``; returns the files written."""
    mixed = results.workloads
    written = []
    with _naming_the_output("--json", options.json_file):
        if options.json_file is not None:
            _write_whole(options.json_file, json.dumps(_document(results), indent=2) + "\n")
            written.append(options.json_file)
    with _naming_the_output("--plot", options.plot):
        if options.plot is not None and not results.interrupted:
            frontier = [run for run in mixed if run.frontier]
            write_plot(results.report, options.plot, quality=results.retention, frontier=frontier)
            written.append(options.plot)
    return written


def _write_whole(path: Path, text: str) -> None:
    """Writes ``text`` to a temporary file beside ``path``, then renames it over ``path``: a
    reader, or a write cut short (a full disk, a signal), finds the old file or the whole new
    one, never a cut one.

    The file a symbolic link names is replaced, not the link, and keeps its permissions. What
    is not a regular file (``/dev/stdout``, a pipe, a device) is written as it is: a rename
    would put a file in its place.
    """
    target = path.resolve()
    if target.exists() and not target.is_file():
        path.write_text(text, encoding="utf-8")
        return
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        if target.exists():
            shutil.copymode(target, temporary)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):  # the write's own error is the one to tell
            temporary.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _naming_the_output(option: str, path: Path | None) -> Iterator[None]:
    """Turns a failed write (a full disk, a device) into one line naming the option."""
    try:
        yield
    except OSError as exc:
        raise ValueError(
            f"{option} {path}: cannot be written ({exc.strerror or type(exc).__name__}). Fix: "
            "give a file path on a disk with room, that you may write to."
        ) from None


def _document(results: BenchResults) -> dict[str, Any]:
    """The ``--json`` document: the report's, with the quality rows, the workloads, and what
    Ctrl-C left unmeasured."""
    document = results.report.to_json()
    document["interrupted"] = results.interrupted
    document["missing"] = list(results.missing)
    mixed = results.workloads
    if results.retention is not None:
        document["quality"] = [row.to_json() for row in results.retention]
    if len(mixed) == 1:
        document["workload"] = mixed[0].to_json()
    elif mixed:
        document["workloads"] = [run.to_json() for run in mixed]
    if any(run.frontier for run in mixed):
        document["frontier"] = combined_frontier(mixed)
    return document


def _gate(
    console: Console, report: BenchReport, baseline_ms: float, max_regression: float | None
) -> None:
    """The ``--baseline`` gate: prints the verdict, exits 1 when it failed."""
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


def workload_shape(options: BenchFlags) -> WorkloadOptions | None:
    """The workload the ``--workload*`` options ask for, checked before any call.

    Returns:
        The workload's options, or ``None`` without ``--workload``.

    Raises:
        ValueError: When a ``--workload-*`` option (or ``--frontier``) comes without
            ``--workload``, names an unknown strategy or profile, or options conflict.
    """
    if options.workload is None:
        _refuse_stray_workload_options(options)
        return None
    only = _chosen_strategies(options.workload_strategies_option)
    if options.workload_profile is not None and options.workload_endpoint:
        raise ValueError(
            "--workload-profile sets up the simulator; with --workload-endpoint the workload "
            "runs on the endpoint: give one of them."
        )
    if options.workload_answers and not options.workload_endpoint:
        raise ValueError(
            "--workload-answers scores a real model's answers (the simulator answers filler): "
            "add --workload-endpoint and a --base-url serving a model."
        )
    return WorkloadOptions(
        _workload_size(options),
        only,
        _profiles(options.workload_profile),
        options.frontier,
        options.workload_answers,
    )


def _refuse_stray_workload_options(options: BenchFlags) -> None:
    """Refuses a ``--workload-*`` option (or ``--frontier``) given without ``--workload``."""
    given = {
        "--workload-endpoint": options.workload_endpoint or None,
        "--workload-calls": options.workload_calls,
        "--workload-conversations": options.workload_conversations,
        "--workload-strategies": options.workload_strategies_option,
        "--workload-profile": options.workload_profile,
        "--frontier": options.frontier or None,
        "--workload-answers": options.workload_answers or None,
    }
    stray = [option for option, value in given.items() if value is not None]
    if stray:
        raise ValueError(f"{stray[0]} needs --workload mixed.")


def _chosen_strategies(strategies: str | None) -> list[str] | None:
    """The strategies ``--workload-strategies`` names; ``None`` (all) without it."""
    if strategies is None:
        return None
    only = [name.strip() for name in strategies.split(",") if name.strip()]
    unknown = sorted(set(only) - set(workload_strategies()))
    if unknown or not only:
        raise ValueError(
            f"--workload-strategies {strategies!r}: unknown {unknown or 'none given'}; "
            f"choose from {', '.join(workload_strategies())}."
        )
    return only


def _profiles(profile: str | None) -> tuple[str | None, ...]:
    """The server profiles ``--workload-profile`` names, one run each; ``(None,)`` without it."""
    if profile is None:
        return (None,)
    from agent_latency.sim import server_profile, server_profiles

    if profile == ALL_PROFILES:
        return tuple(p.name for p in server_profiles())
    return (server_profile(profile).name,)  # an unknown name fails here


def _workload_size(options: BenchFlags) -> MixedWorkload:
    """The workload's shape: its calls, conversations and (on the endpoint) budget."""
    changes: dict[str, int] = {}
    if options.workload_calls is not None:
        changes["calls"] = options.workload_calls
    if options.workload_conversations is not None:
        changes["conversations"] = options.workload_conversations
    if options.budget is not None and options.workload_endpoint:
        changes["budget"] = options.budget
    return replace(MixedWorkload(), **changes)


def _run_workloads(
    workload: WorkloadOptions | None,
    settings: Settings,
    *,
    messages: list[Any] | None,
    endpoint: bool,
) -> Iterator[WorkloadReport]:
    """Runs the workload once per profile asked for, one after another (none without one)."""
    if workload is None:
        return
    shape = workload.shape
    if endpoint and settings.llm.context_window:
        shape = replace(shape, context_window=settings.llm.context_window)
    for profile in workload.profiles:
        with _progress(f"workload {profile or ''}".strip()) as advance:
            report = run_mixed_workload(
                shape,
                settings=settings,
                messages=messages,
                profile=profile,
                base_url=settings.llm.base_url if endpoint else None,
                only=workload.only,
                frontier=workload.frontier,
                answers=workload.answers,
                on_call=partial(_forward, advance),
            )
        yield report


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


class _ProgressLines:
    """Progress without a terminal: a line on stderr at each tenth of the calls, and the last."""

    def __init__(self, phase: str) -> None:
        self._phase = phase
        self._started = time.monotonic()
        self._shown = 0  # tenths shown so far

    def __call__(self, done: int, total: int, step: str) -> None:
        tenth = done * _PROGRESS_LINES // total if total else _PROGRESS_LINES
        if tenth > self._shown or done == total:
            self._shown = _PROGRESS_LINES if done == total else tenth
            elapsed = time.monotonic() - self._started
            print(
                f"{self._phase}: {done}/{total} calls, {step} ({elapsed:,.0f} s)",
                file=sys.stderr,
                flush=True,
            )


@contextlib.contextmanager
def _progress(phase: str) -> Iterator[Advance]:
    """Yields the progress callback of one phase, on stderr (stdout holds only the results).

    On a terminal: one updating line (a bar, the count and the last call), gone at the end.
    Otherwise (a log file, CI): a line at each tenth of the calls, so a long run shows that it
    is alive without a line per call.
    """
    stderr = Console(stderr=True)
    if not stderr.is_terminal:
        yield _ProgressLines(phase)
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
