"""``bench --plot``: the bench results as a PNG, drawn with matplotlib (an optional dependency).

Left: TTFT and total p50 per mode, with whiskers up to the p95. Then TTFT against prompt tokens
over a sweep of budgets, with the fitted prefill line; and with ``--quality``, retention against
predicted TTFT per strategy and budget: the latency/quality trade-off. matplotlib is imported
only here, and only through its object-oriented API (no pyplot, no global backend switch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from agent_latency.bench._quality import QualityRow
from agent_latency.bench._results import BenchReport

_INSTALL_HINT: Final = "pip install 'agent-latency[plot]'"
_BAR_WIDTH: Final = 0.38


def require_matplotlib() -> None:
    """Checks that matplotlib can be imported.

    Raises:
        ValueError: Naming the install command, when it cannot.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError(f"--plot needs matplotlib; install it with {_INSTALL_HINT}.") from None


def write_plot(
    report: BenchReport, path: str | Path, *, quality: Sequence[QualityRow] | None = None
) -> None:
    """Draws ``report`` (and the ``quality`` rows, when given) into a PNG file at ``path``.

    Raises:
        ValueError: When matplotlib is missing.
        OSError: When the file cannot be written.
    """
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = 1 + bool(report.sweep) + bool(quality)
    figure = Figure(figsize=(6.5 * panels, 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, panels, squeeze=False)[0]
    where = "embedded simulator" if report.simulated else report.endpoint
    figure.suptitle(f"agent-latency bench · {where} · {report.model}")

    modes_axes = axes[0]
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

    if report.sweep:
        sweep_axes = axes[1]
        points = [p for p in report.sweep if p.ttft_ms is not None]
        tokens = [p.input_tokens for p in points]
        sweep_axes.scatter(tokens, [p.ttft_ms for p in points], label="measured TTFT")
        fit = report.prefill_fit()
        if fit is not None:
            ends = [0, max(tokens)]
            sweep_axes.plot(
                ends,
                [fit.ttft_ms(t) for t in ends],
                color="tab:red",
                label=f"fit: {fit.ms_per_1k_tokens:,.0f} ms per 1k tokens "
                f"+ {fit.intercept_ms:,.0f} ms",
            )
        sweep_axes.set_xlabel("prompt tokens")
        sweep_axes.set_ylabel("TTFT ms (streaming)")
        sweep_axes.set_title("Budget sweep: prefill cost")
        sweep_axes.set_xlim(left=0)
        sweep_axes.set_ylim(bottom=0)
        sweep_axes.legend()

    if quality:
        _quality_panel(axes[-1], quality)

    figure.savefig(Path(path), dpi=110)


def _quality_panel(axes: Any, rows: Sequence[QualityRow]) -> None:
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
