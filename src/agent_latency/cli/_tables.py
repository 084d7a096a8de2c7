"""The tables ``agent-latency bench`` prints: built here only, from the bench's reports.

The rich tables (single-turn modes, the replay, retention) fit 80 columns with five-digit
milliseconds; their titles are separate lines (:func:`modes_title`), printed unwrapped, so a
title never breaks mid-phrase when stdout is a file. The workload and frontier tables are plain
text with a caption that says what each column means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from rich import box
from rich.console import Console
from rich.table import Table

from agent_latency.bench import BenchReport, ModeResult, QualityRow, StrategyRun, WorkloadReport

_FAILED: Final = "failed"
_NOT_RUN: Final = "not run"
_PLACE_HEADERS: Final = {
    "head": "head",
    "middle": "mid",
    "tail": "tail",
    "old_tool_result": "old",
    "current_tool_result": "now",
    "constraint": "rule",
}
"""Short column headers of the retention table, by the place of the fact."""
# No vertical rules, no padding at the edges, one shared space between columns: the tables fit
# 80 columns with five-digit milliseconds.
_NARROW: Final[dict[str, Any]] = {
    "box": box.SIMPLE_HEAD,
    "pad_edge": False,
    "collapse_padding": True,
}


TABLE_WIDTH: Final = 80
"""The width the tables are laid out for; none is printed narrower."""


def print_whole(console: Console, table: Table) -> None:
    """Prints ``table`` at least :data:`TABLE_WIDTH` columns wide: on a narrower terminal its
    lines wrap, where rich would cut the figures to '…' (at 40 columns the bench showed no
    millisecond, and the trim no reason)."""
    width = console.width
    if width >= TABLE_WIDTH:
        console.print(table)
        return
    console.width = TABLE_WIDTH
    try:
        console.print(table)
    finally:
        console.width = width


def _ms(value: float) -> str:
    return f"{value:,.0f}"


def _change(value: float, base: ModeResult | None, is_baseline: bool, *, ttft: bool) -> str:
    if is_baseline or base is None or not base.ok:
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


def modes_title(report: BenchReport) -> str:
    """The bench's title line: where it ran, the model and the budget."""
    where = "embedded simulator" if report.simulated else report.endpoint
    return f"agent-latency bench · {where} · model {report.model} · budget {report.budget}"


def _tokens_differ(result: ModeResult) -> bool:
    server = result.server_input_tokens
    return result.ok and server is not None and server != result.input_tokens


def modes_table(report: BenchReport) -> Table:
    """Returns the single-turn table: one row per mode, compared with untrimmed + blocking.

    The tokens column is the server's ``usage.prompt_tokens`` where it reported one, ours where
    not; a count the server made differently from ours is starred, and the caption gives ours.
    """
    baseline = next((result for result in report.modes if result.mode.baseline), None)
    differ = [result for result in report.modes if _tokens_differ(result)]
    ours = ", ".join(
        f"{label} {tokens:,}"
        for label, tokens in dict.fromkeys(
            ("trimmed" if r.mode.trimmed else "untrimmed", r.input_tokens) for r in differ
        )
    )
    caption = (
        f"Times in ms: p50/p95 of {_runs(report)}, interleaved, after one warm-up; Δ: p50 "
        "change vs untrimmed + blocking. "
        "Blocking: TTFT = total (the first text arrives with the whole answer). Every prompt "
        "starts with a unique cache salt, so no server prefix cache serves it. Tokens: the "
        "server's count of the prompt (ours where it reported none)"
        + (f"; * it counted differently from us (ours: {ours})." if differ else ".")
    )
    table = Table(**_NARROW, caption_justify="left", caption=caption)
    table.add_column("mode", no_wrap=True)
    rows = []
    for result in report.modes:
        if not result.ok:
            rows.append(("—", _FAILED if result.error else _NOT_RUN, "—", "—", "—", "—", "—"))
            continue
        server = result.server_input_tokens
        shown = f"{server if server is not None else result.input_tokens:,}"
        rows.append(
            (
                f"{shown}*" if _tokens_differ(result) else shown,
                _ms(result.ttft_ms(0.5)),
                _ms(result.ttft_ms(0.95)),
                _ms(result.total_ms(0.5)),
                _ms(result.total_ms(0.95)),
                _change(result.ttft_ms(0.5), baseline, result.mode.baseline, ttft=True),
                _change(result.total_ms(0.5), baseline, result.mode.baseline, ttft=False),
            )
        )
    headers = ("tokens", "TTFT p50", "TTFT p95", "total p50", "total p95", "Δ TTFT", "Δ total")
    labels = [
        f"[bold]{result.mode.label}[/bold]" if result.mode.gated else result.mode.label
        for result in report.modes
    ]
    _add_figures(table, headers, labels, rows)
    return table


def _runs(report: BenchReport) -> str:
    """How many runs each mode's figures are of: the same for all, unless a signal (Ctrl-C,
    SIGTERM) cut the run."""
    runs = report.runs
    if not report.interrupted:
        return f"{runs} run{'' if runs == 1 else 's'} per mode"
    finished = ", ".join(str(len(result.samples)) for result in report.modes)
    return (
        f"the runs each mode finished before the run was stopped ({finished} of {runs}, top to "
        "bottom)"
    )


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
    places = list(rows[0].by_place) if rows else []
    headers = ("budget", "all", *(_PLACE_HEADERS.get(p, p) for p in places), "TTFT")
    figures = [
        (
            f"{row.budget:,}",
            f"{row.retention:.0%}",
            *(f"{row.by_place[p]:.0%}" for p in places),
            _ms(row.model_ttft_ms),
        )
        for row in rows
    ]
    _add_figures(table, headers, [row.strategy for row in rows], figures)
    return table


# -- the mixed workload ---------------------------------------------------------------------------

_NAME_WIDTH: Final = 26
_KNOB_WIDTH: Final = 25


def _figure(value: float | None, form: str = ",.0f") -> str:
    return "—" if value is None else format(value, form)


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _knob(knob: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {value:,}" for name, value in knob.items()) or "—"


def _where(report: WorkloadReport) -> str:
    where = report.where
    if not where.simulated:
        return f"on {where.model} at {where.server}"
    scale = (where.latency or {}).get("clock_scale")
    if where.profile is not None:
        clock = "" if scale is None or scale == 1 else f" at {scale:.2g}× its latency"
        return f"on the simulator as {where.profile}{clock}"
    return "on the simulator" + ("" if scale is None else f" at {scale:g}× its default latency")


def workload_table(report: WorkloadReport) -> str:
    """The workload's result as plain text: one strategy (at its default point) a row."""
    answers = report.answers
    head = (
        f"{'':<{_NAME_WIDTH}}{'wait, ms':>17}{'':>6}{'context':>8}{'prefilled':>10}"
        f"{'over':>6}{'':>8}{'':>6}"
    )
    columns = (
        f"{'strategy':<{_NAME_WIDTH}}{'mean':>9}{'p95':>8}{'kept':>6}{'tokens':>8}"
        f"{'tokens':>10}{'limit':>6}{'invalid':>8}{'right' if answers else '':>6}"
    )
    rows = [head.rstrip(), columns.rstrip()]
    for run in report.strategies:
        rows.append(_workload_row(run, answers))
    rows.append(_caption(report))
    refusals = [
        f"Refused: {run.strategy}: {sum(c.refused is not None for c in run.calls)} requests, "
        f"the server said: {' | '.join(run.refusals)}"
        for run in report.strategies
        if run.refusals
    ]
    return "\n".join([*rows, *refusals])


def _workload_row(run: StrategyRun, answers: bool) -> str:
    return (
        f"{run.strategy:<{_NAME_WIDTH}}{_figure(run.mean_wait_ms):>9}{_figure(run.p95_wait_ms):>8}"
        f"{_share(run.retention):>6}{_figure(run.context_tokens):>8}"
        f"{run.prefilled_tokens:>10,}{run.violations:>6}{run.invalid_requests:>8}"
        f"{_share(run.answer_accuracy) if answers else '':>6}"
    ).rstrip()


def _caption(report: WorkloadReport) -> str:
    shape = report.workload
    counted = sum(
        sum(c.server_tokens is None and c.wait_ms is not None for c in run.calls)
        for run in report.strategies
    )
    text = (
        f"Mixed workload: {shape.conversations} conversations × "
        f"{report.calls_per_conversation} calls, budget {shape.budget:,}, hard limit "
        f"{shape.hard_limit:,}, every {shape.idle_every}th turn after an idle gap; "
        f"{_where(report)}. Wait: time to first token + the strategy's own time (a trim, a "
        "summary call). Kept: the share of the facts the calls' questions need that are still "
        "in what was sent. Context: mean prompt tokens sent. Prefilled: prompt tokens the "
        "server did not take from its prefix cache. Over limit: calls whose prompt exceeded "
        "the hard limit (the model's context window less the answer's reserve). Invalid: calls "
        "an OpenAI endpoint would reject (a tool result without its call, a call without its "
        "result) or that the server refused."
    )
    if report.answers:
        text += " Right: fact questions answered with the fact (greedy)."
    if counted:
        text += (
            f" The server reported no usage for {counted} calls: their prompt tokens are our "
            "count, and all of them count as prefilled."
        )
    return text


_BY_KIND: Final = (
    ("where", "user", "user"),
    ("where", "tool_result", "tool"),
    ("same_words", "true", "same"),
    ("same_words", "false", "other"),
    ("language", "en", "en"),
    ("language", "zh", "zh"),
)
"""The retention-by-kind columns: (kind, value, header)."""


def retention_by_kind_table(report: WorkloadReport) -> str:
    """The workload's retention by the kind of fact, one strategy (default point) a row."""
    rows = [
        f"{'strategy':<{_NAME_WIDTH}}{'all':>6}"
        + "".join(f"{header:>7}" for _, _, header in _BY_KIND)
    ]
    for run in report.strategies:
        by = run.retention_by()
        rows.append(
            f"{run.strategy:<{_NAME_WIDTH}}{_share(run.retention):>6}"
            + "".join(f"{_share(by[kind].get(value)):>7}" for kind, value, _ in _BY_KIND)
        )
    rows.append(
        "Kept, by the kind of fact the question needs: stated in a user message or inside a tool "
        "result; asked in the words it was stated in (same) or in other words; English or Chinese."
    )
    return "\n".join(rows)


def frontier_table(report: WorkloadReport) -> str:
    """Every point of the frontier as plain text, by strategy, with its knob."""
    rows = [
        f"{'strategy':<{_NAME_WIDTH}}{'knob':<{_KNOB_WIDTH}}{'mean':>8}{'p95':>8}{'kept':>6}"
        f"{'context':>8}",
    ]
    for run in report.frontier:
        rows.append(
            f"{run.strategy:<{_NAME_WIDTH}}"
            f"{_knob(run.knob) + (' *' if run.default else ''):<{_KNOB_WIDTH}}"
            f"{_figure(run.mean_wait_ms):>8}{_figure(run.p95_wait_ms):>8}"
            f"{_share(run.retention):>6}{_figure(run.context_tokens):>8}"
        )
    rows.append(
        f"Frontier {_where(report)}: every strategy at each point of its knob (ms: mean and p95 "
        "wait; kept: retention; context: mean prompt tokens); * the point a user of the "
        "strategy gets without setting the knob (the workload's budget where it has no default)."
    )
    return "\n".join(rows)
