"""``bench --plot``: the bench results as a PNG, drawn with matplotlib (an optional dependency).

Left: TTFT and total p50 per mode, with whiskers up to the p95. Then TTFT against prompt tokens
over a sweep of budgets, with the fitted prefill line; with ``--quality``, retention against
predicted TTFT per strategy and budget; with ``--frontier``, the mixed workload's mean wait
against retention, one line per strategy through its knob: the latency/quality trade-off.
matplotlib is imported only here, and only through its object-oriented API (no pyplot, no
global backend switch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

from agent_latency.bench._measurements import BenchReport
from agent_latency.bench._quality import QualityRow
from agent_latency.bench._workload_report import WorkloadReport

_INSTALL_HINT: Final = "pip install 'agent-latency[plot]'"
_BAR_WIDTH: Final = 0.38


def require_matplotlib(path: str | Path | None = None) -> None:
    """Checks that matplotlib can be imported, and can write the image format ``path`` names.

    Args:
        path: The ``--plot`` file; ``None``: only the import is checked.

    Raises:
        ValueError: Naming the install command, when it cannot be imported; naming ``path`` and
            the formats, when its extension names none matplotlib writes (it would fail after
            the run, or add ``.png`` to a name without one).
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError(f"--plot needs matplotlib; install it with {_INSTALL_HINT}.") from None
    if path is None:
        return
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = FigureCanvasAgg.get_supported_filetypes()
    suffix = Path(path).suffix.lower().removeprefix(".")
    if suffix not in formats:
        raise ValueError(
            f"--plot {path}: {f'.{suffix} is not' if suffix else 'no extension names'} an image "
            f"format. Fix: end the name in .png (or .{', .'.join(sorted(set(formats) - {'png'}))})."
        )


def write_plot(
    report: BenchReport,
    path: str | Path,
    *,
    quality: Sequence[QualityRow] | None = None,
    frontier: Sequence[WorkloadReport] = (),
) -> None:
    """Draws ``report`` (and the ``quality`` rows, and each ``frontier`` run, when given) into a
    PNG file at ``path``.

    The first row holds the single-turn modes (when they ran), the prefill sweep and the
    retention panel; a second row one frontier panel per workload run: mean wait against
    retention, one line per strategy through its knob's points, the default point of each
    marked with a star.

    Raises:
        ValueError: When matplotlib is missing.
        OSError: When the file cannot be written.
    """
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    top: list[Callable[[Any], None]] = [
        panel
        for panel, wanted in (
            (partial(_modes_panel, report=report), bool(report.modes)),
            (partial(_sweep_panel, report=report), bool(report.sweep)),
            (partial(_quality_panel, rows=quality or ()), bool(quality)),
        )
        if wanted
    ]
    rows = [top] if top else []
    if frontier:
        rows.append(
            [
                partial(_frontier_panel, entries=run.frontier_json(), title=_where(run))
                for run in frontier
            ]
        )
    columns = max((len(row) for row in rows), default=1)
    height = 4.8 if not frontier else 4.8 * (len(rows) - 1) + 7.0
    figure = Figure(
        figsize=(6.5 * columns + (3.5 if frontier else 0), height), layout="constrained"
    )
    FigureCanvasAgg(figure)
    grid = figure.subplots(max(len(rows), 1), columns, squeeze=False)
    for row, panels in zip(grid, rows, strict=False):
        for axes, panel in zip(row, panels, strict=False):
            panel(axes)
        for axes in row[len(panels) :]:
            axes.set_visible(False)
    where = "embedded simulator" if report.simulated else report.endpoint
    figure.suptitle(f"agent-latency bench · {where} · {report.model}")
    figure.savefig(Path(path), dpi=110)


def _modes_panel(modes_axes: Any, *, report: BenchReport) -> None:
    """TTFT and total p50 per mode, whiskers up to the p95."""
    measured = [result for result in report.modes if result.ok]  # a failed mode has no bars
    positions = range(len(measured))
    for offset, name, color in ((-0.5, "TTFT", "tab:blue"), (0.5, "total", "tab:gray")):
        p50 = [r.ttft_ms(0.5) if name == "TTFT" else r.total_ms(0.5) for r in measured]
        p95 = [r.ttft_ms(0.95) if name == "TTFT" else r.total_ms(0.95) for r in measured]
        xs = [x + offset * _BAR_WIDTH for x in positions]
        modes_axes.bar(xs, p50, _BAR_WIDTH, label=f"{name} p50", color=color)
        modes_axes.errorbar(
            xs,
            p50,
            yerr=[[0.0] * len(p50), [high - mid for high, mid in zip(p95, p50, strict=True)]],
            fmt="none",
            ecolor="black",
            capsize=3,
        )
    modes_axes.set_xticks(list(positions), [r.mode.label.replace(" + ", "\n") for r in measured])
    modes_axes.set_ylabel("ms (whisker: p95)")
    runs = f"{report.runs} run{'' if report.runs == 1 else 's'}"
    modes_axes.set_title(f"{runs} per mode, budget {report.budget} tokens")
    modes_axes.legend()


_CURVE_STEPS: Final = 50
"""Segments of the fitted curve drawn over the sweep."""


def _sweep_panel(sweep_axes: Any, *, report: BenchReport) -> None:
    """TTFT against prompt tokens over the budget sweep, with the latency model fitted to it."""
    points = [p for p in report.sweep if p.ttft_ms is not None]
    tokens = [p.input_tokens for p in points]
    sweep_axes.scatter(tokens, [p.ttft_ms for p in points], label="measured TTFT")
    fit = report.prefill_fit()
    if fit is not None:
        # The latency model doctor prints, fitted to these points: a curve where the context
        # makes each token dearer.
        xs = [max(tokens) * step / _CURVE_STEPS for step in range(_CURVE_STEPS + 1)]
        sweep_axes.plot(
            xs,
            [fit.ttft_ms(x) for x in xs],
            color="tab:red",
            label=f"fit: {fit.describe()}",
        )
    sweep_axes.set_xlabel("prompt tokens")
    sweep_axes.set_ylabel("TTFT ms (streaming)")
    sweep_axes.set_title("Budget sweep: prefill cost")
    sweep_axes.set_xlim(left=0)
    sweep_axes.set_ylim(bottom=0)
    sweep_axes.legend(loc="upper left", fontsize=8)  # the points rise to the right, off it


_PEERS: Final = ("none", "hard_limit", "trim_messages", "context_editing", "summarization")


def _frontier_panel(axes: Any, *, entries: Sequence[Mapping[str, Any]], title: str) -> None:
    """Mean wait against retention: one line per strategy through its knob's points, in the
    order of the context they send; the default point a star."""
    from matplotlib import colormaps

    tab20 = colormaps["tab20"]  # 20 distinct colours: one per strategy line
    palette = [tab20(i) for i in range(20)]
    strategies = list(dict.fromkeys(str(entry["strategy"]) for entry in entries))
    for index, strategy in enumerate(strategies):
        points = sorted(
            (
                e
                for e in entries
                if e["strategy"] == strategy
                and e.get("retention") is not None
                and e.get("mean_wait_ms") is not None
            ),
            key=lambda e: e.get("context_tokens") or 0.0,
        )
        if not points:
            continue
        peer = strategy.startswith(_PEERS)
        color = palette[index % len(palette)]
        axes.plot(
            [100 * e["retention"] for e in points],
            [e["mean_wait_ms"] for e in points],
            marker="s" if peer else "o",
            markersize=4,
            linestyle="--" if peer else "-",
            color=color,
            label=strategy,
        )
        for e in points:
            if e.get("default"):
                axes.plot(
                    [100 * e["retention"]],
                    [e["mean_wait_ms"]],
                    marker="*",
                    markersize=13,
                    color=color,
                    markeredgecolor="black",
                )
    axes.set_title(f"Frontier · {title}: wait against retention (★ default)")
    axes.set_xlabel("needed facts still sent, % (retention)")
    axes.set_ylabel("mean wait, ms (TTFT + trim)")
    axes.set_ylim(bottom=0)
    axes.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))


def _where(run: WorkloadReport) -> str:
    return run.where.profile or ("simulator" if run.where.simulated else run.where.model)


def write_frontier_plot(entries: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    """Draws ``"frontier"`` entries (of one ``--json`` document or several) into a PNG file at
    ``path``: one panel per profile (or endpoint), one line per strategy.

    Raises:
        ValueError: When matplotlib is missing, or there are no entries.
        OSError: When the file cannot be written.
    """
    require_matplotlib()
    if not entries:
        raise ValueError("write_frontier_plot: no frontier entries to draw.")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    profiles = list(dict.fromkeys(str(e.get("profile") or "endpoint") for e in entries))
    columns = min(2, len(profiles))
    rows = -(-len(profiles) // columns)
    figure = Figure(figsize=(10 * columns, 6.5 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(rows, columns, squeeze=False)
    for index, axes in enumerate(grid.flat):
        if index >= len(profiles):
            axes.set_visible(False)
            continue
        profile = profiles[index]
        chosen = [e for e in entries if str(e.get("profile") or "endpoint") == profile]
        _frontier_panel(axes, entries=chosen, title=profile)
    figure.savefig(Path(path), dpi=100)


def _quality_panel(axes: Any, *, rows: Sequence[QualityRow]) -> None:
    """Retention against predicted TTFT: one line per strategy through its budgets."""
    for strategy in dict.fromkeys(row.strategy for row in rows):
        points = sorted((r for r in rows if r.strategy == strategy), key=lambda r: r.budget)
        axes.plot(
            [r.model_ttft_ms for r in points],
            [100 * r.retention for r in points],
            marker="o",
            label=strategy,
        )
        for r in points:
            axes.annotate(f"{r.budget:,}", (r.model_ttft_ms, 100 * r.retention), fontsize=7)
    axes.set_xlabel("predicted TTFT ms (budget at each point)")
    axes.set_ylabel("needed facts kept, %")
    axes.set_title("Latency against answer quality")
    axes.set_ylim(0, 105)
    axes.legend(fontsize=8)
