"""What the bench measured: modes, multi-turn strategies, the prefill sweep, and the report.

Everything here is a frozen value with its statistics and its entry in the ``--json`` document;
a mode, a replay or a sweep call that failed keeps its error in place of its figures.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from agent_latency._latency_model import PrefillFit, fit_prefill

if TYPE_CHECKING:
    from agent_latency.sim import SimulatorConfig

SWEEP_FRACTIONS: Final = (0.2, 0.35, 0.5, 0.65, 0.8)
"""Budgets of the prefill sweep, as fractions of the untrimmed prompt (which is swept too)."""


# -- modes, samples and their statistics ----------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    """One way of calling the model: with or without trimming, blocking or streaming."""

    trimmed: bool
    streaming: bool

    @property
    def baseline(self) -> bool:
        """Whether it is the mode the others are compared with: untrimmed + blocking."""
        return not self.trimmed and not self.streaming

    @property
    def gated(self) -> bool:
        """Whether it is the mode the regression gate watches: trimmed + streaming, what the
        middleware is for."""
        return self.trimmed and self.streaming

    @property
    def label(self) -> str:
        """E.g. ``"trimmed + streaming"``."""
        return (
            f"{'trimmed' if self.trimmed else 'untrimmed'} + "
            f"{'streaming' if self.streaming else 'blocking'}"
        )


MODES: Final = (
    Mode(trimmed=False, streaming=False),
    Mode(trimmed=False, streaming=True),
    Mode(trimmed=True, streaming=False),
    Mode(trimmed=True, streaming=True),
)
"""The four single-turn modes; the first is the baseline the others are compared with."""

BASELINE_MODE: Final = MODES[0]
GATED_MODE: Final = MODES[3]
"""The mode the regression gate watches: what the middleware is for."""


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Returns the ``fraction`` quantile of ``samples``, interpolating between closest ranks.

    This is NumPy's default ("linear") method: the p50 of an even count is the mean of the two
    middle values, and the p95 of five samples lies between the fourth and the fifth.

    Raises:
        ValueError: When ``samples`` is empty or ``fraction`` is outside [0, 1].
    """
    if not samples:
        raise ValueError("percentile: no samples.")
    if not 0 <= fraction <= 1:
        raise ValueError(f"percentile: fraction must be within [0, 1], got {fraction!r}.")
    ordered = sorted(samples)
    rank = fraction * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Sample:
    """One measured model call.

    Attributes:
        ttft_ms: Time to the first content chunk (the total for a blocking call), trim included.
        total_ms: Time to the end of the answer, trim included.
        input_tokens: Prompt tokens by the trimmer's token counter: one unit for every mode
            and every server, whether or not it reports usage (llama.cpp does not when
            streaming).
        cached_tokens: Prompt tokens the server took from its prefix cache, if it said.
        output_tokens: Answer tokens the server reported, if it did.
        server_input_tokens: Prompt tokens the server reported, if it did.
    """

    ttft_ms: float
    total_ms: float
    input_tokens: int
    cached_tokens: int | None
    output_tokens: int | None = None
    server_input_tokens: int | None = None


@dataclass(frozen=True)
class CallCount:
    """One model call's prompt size, by our count and by the server's, in the order sent.

    Attributes:
        step: What the call was (``"warm-up"``, ``"run 1/3: trimmed + blocking"``...).
        budget: The trimmer's budget; ``None`` for an untrimmed prompt.
        over_budget: The trim said the prompt could not fit (its fixed part alone exceeds the
            budget).
        input_tokens: Our count of the prompt sent (the trimmer's token counter).
        server_input_tokens: The server's ``usage.prompt_tokens``, if it reported one.
        cached_tokens: The prompt tokens the server reported taking from its prefix cache, if
            it said.
    """

    step: str
    budget: int | None
    over_budget: bool
    input_tokens: int
    server_input_tokens: int | None
    cached_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The call's entry in the ``--json`` document."""
        return {
            "step": self.step,
            "budget": self.budget,
            "over_budget": self.over_budget,
            "input_tokens": self.input_tokens,
            "server_input_tokens": self.server_input_tokens,
            "cached_tokens": self.cached_tokens,
        }


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 0.5), 1), "p95": round(percentile(values, 0.95), 1)}


class _Outcome:
    """Samples, or an error that voids them: what a mode and a replay have in common."""

    samples: tuple[Sample, ...]
    error: str | None

    @property
    def ok(self) -> bool:
        """It ran every call without failing."""
        return self.error is None and bool(self.samples)


@dataclass(frozen=True)
class ModeResult(_Outcome):
    """The samples of one mode, or why it failed.

    Attributes:
        mode: The mode.
        samples: One per timed run.
        error: Why the mode failed (the endpoint refused its request, or the prompt does not fit
            the context window); its samples are then not used.
    """

    mode: Mode
    samples: tuple[Sample, ...]
    error: str | None = None

    @property
    def input_tokens(self) -> int:
        """The median prompt size (every run sends the same size).

        Raises:
            ValueError: For a mode without samples.
        """
        if not self.samples:
            raise ValueError(f"{self.mode.label}: no samples ({self.error}).")
        return int(statistics.median_low(s.input_tokens for s in self.samples))

    @property
    def server_input_tokens(self) -> int | None:
        """The median prompt size by the server's count; ``None`` unless it reported every one."""
        reported = [s.server_input_tokens for s in self.samples]
        if not reported or any(tokens is None for tokens in reported):
            return None
        return int(statistics.median_low(t for t in reported if t is not None))

    def ttft_ms(self, fraction: float) -> float:
        """The ``fraction`` quantile of the time to first token."""
        return percentile([s.ttft_ms for s in self.samples], fraction)

    def total_ms(self, fraction: float) -> float:
        """The ``fraction`` quantile of the total time."""
        return percentile([s.total_ms for s in self.samples], fraction)

    def to_json(self) -> dict[str, Any]:
        """The mode's entry in the ``--json`` document: the runs it finished and their figures
        (``null`` when it failed or none finished)."""
        return {
            "mode": self.mode.label,
            "trimmed": self.mode.trimmed,
            "streaming": self.mode.streaming,
            "runs": len(self.samples),
            "input_tokens": self.input_tokens if self.ok else None,
            "ttft_ms": _quantiles([s.ttft_ms for s in self.samples]) if self.ok else None,
            "total_ms": _quantiles([s.total_ms for s in self.samples]) if self.ok else None,
            "error": self.error,
        }


# -- multi-turn strategies ------------------------------------------------------------------------


@dataclass(frozen=True)
class Strategy:
    """How a multi-turn replay prepares each call's prompt.

    Attributes:
        key: The name in the JSON document; also says how the prompt is prepared:
            ``untrimmed`` sends the whole conversation, ``hard_limit`` trims only to the
            context window less the answer's room, ``moving_cut`` and ``prefix_stable`` trim
            to the budget with exact or prefix-stable cuts.
        label: The name in the table.
    """

    key: str
    label: str


STRATEGIES: Final = (
    Strategy("untrimmed", "no trimming"),
    Strategy("hard_limit", "hard limit only"),
    Strategy("moving_cut", "trimming, moving cut"),
    Strategy("prefix_stable", "prefix-stable trimming"),
)


@dataclass(frozen=True)
class StrategyResult(_Outcome):
    """The calls of one multi-turn replay, in order, or why the replay stopped.

    Attributes:
        strategy: The strategy.
        samples: One per call made.
        error: Which call failed and why; the replay stops there and its figures are not used.
    """

    strategy: Strategy
    samples: tuple[Sample, ...]
    error: str | None = None

    @property
    def mean_ttft_ms(self) -> float:
        """Mean time to first token over the replay."""
        return statistics.fmean(s.ttft_ms for s in self.samples)

    @property
    def p95_ttft_ms(self) -> float:
        """95th percentile of the time to first token."""
        return percentile([s.ttft_ms for s in self.samples], 0.95)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens sent over the replay, in the server's units when it reported them all.

        The cached tokens are the server's count, so the share cached must be taken of the
        server's count too.
        """
        reported = [s.server_input_tokens for s in self.samples]
        if all(tokens is not None for tokens in reported):
            return sum(tokens for tokens in reported if tokens is not None)
        return sum(s.input_tokens for s in self.samples)

    @property
    def cached_tokens(self) -> int | None:
        """Prompt tokens the server reused from its prefix cache; ``None`` if it never said."""
        reported = [s.cached_tokens for s in self.samples if s.cached_tokens is not None]
        return sum(reported) if reported else None

    def to_json(self) -> dict[str, Any]:
        """The strategy's entry in the ``--json`` document (figures ``null`` when it failed)."""
        if not self.ok:
            return {
                "strategy": self.strategy.key,
                "label": self.strategy.label,
                "calls": len(self.samples),
                "ttft_ms": None,
                "prompt_tokens": None,
                "cached_tokens": None,
                "error": self.error,
            }
        return {
            "strategy": self.strategy.key,
            "label": self.strategy.label,
            "calls": len(self.samples),
            "ttft_ms": {
                "mean": round(self.mean_ttft_ms, 1),
                **_quantiles([s.ttft_ms for s in self.samples]),
            },
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "error": None,
        }


# -- the prefill sweep ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepPoint:
    """One call of the prefill sweep: the budget, the prompt size sent and its TTFT.

    Attributes:
        budget: The budget; ``None`` for the untrimmed prompt.
        input_tokens: The prompt size, by the bench's counter.
        ttft_ms: The streamed TTFT; ``None`` when the call failed.
        error: Why the call failed.
    """

    budget: int | None
    input_tokens: int
    ttft_ms: float | None
    error: str | None = None


def sweep_budgets(untrimmed_tokens: int) -> list[int]:
    """Returns the budgets swept: fractions of the untrimmed prompt, smallest first."""
    return sorted({max(1, round(untrimmed_tokens * f)) for f in SWEEP_FRACTIONS})


# -- the report -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchReport:
    """Everything one bench run measured.

    Attributes:
        endpoint: The API root, without credentials or query.
        model: The model name sent.
        simulator: The latency model of the endpoint, when it is a simulator whose
            configuration is known (the embedded one); ``None`` for any other endpoint.
        runs: Timed runs per mode.
        budget: The trimmer's prompt token budget.
        modes: One result per mode, in :data:`MODES` order.
        turns: The multi-turn results, one per strategy, when asked for.
        sweep: The prefill sweep, when asked for.
        calls: Every model call made (the warm-up included), in order: our count of its prompt
            and the server's.
        interrupted: Ctrl-C stopped the run: a mode holds the runs it finished (the caption
            and ``--json`` give their number), and only the replays and sweep points that
            finished are here.
        missing: With ``interrupted``: what was asked for and not measured, one phrase each
            (``"3 of 5 runs of trimmed + streaming"``, ``"the replay of no trimming"``).
    """

    endpoint: str
    model: str
    simulator: SimulatorConfig | None
    runs: int
    budget: int
    modes: tuple[ModeResult, ...]
    turns: tuple[StrategyResult, ...] = ()
    sweep: tuple[SweepPoint, ...] = ()
    calls: tuple[CallCount, ...] = ()
    interrupted: bool = False
    missing: tuple[str, ...] = ()

    @property
    def simulated(self) -> bool:
        """Whether the endpoint was a simulator with a known latency model."""
        return self.simulator is not None

    def mode(self, mode: Mode) -> ModeResult | None:
        """Returns the result of ``mode``; ``None`` when the single-turn modes were not run."""
        return next((result for result in self.modes if result.mode == mode), None)

    def prefill_fit(self) -> PrefillFit | None:
        """The latency model fitted over the sweep (as doctor fits its probes); ``None``
        without two prompt sizes."""
        return fit_prefill(
            (point.input_tokens, point.ttft_ms) for point in self.sweep if point.ttft_ms is not None
        )

    def failures(self) -> list[str]:
        """One line per mode, replay or sweep call that failed: what it was, and why."""
        failed = [f"{r.mode.label}: {r.error}" for r in self.modes if r.error]
        failed += [f"{r.strategy.label}: {r.error}" for r in self.turns if r.error]
        failed += [
            f"prefill sweep, {'untrimmed' if p.budget is None else f'budget {p.budget}'}: {p.error}"
            for p in self.sweep
            if p.error
        ]
        return failed

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: endpoint, model, runs, modes, calls (turns, sweep if run),
        and whether Ctrl-C interrupted the run, with what it left unmeasured."""
        document: dict[str, Any] = {
            "interrupted": self.interrupted,
            "missing": list(self.missing),
            "endpoint": self.endpoint,
            "model": self.model,
            "runs": self.runs,
            "simulator": None if self.simulator is None else _latency_model(self.simulator),
            "budget": self.budget,
            "modes": [result.to_json() for result in self.modes],
        }
        if self.turns:
            document["turns"] = {
                "calls": max(len(result.samples) for result in self.turns),
                "strategies": [result.to_json() for result in self.turns],
            }
        if self.sweep:
            fit = self.prefill_fit()
            document["sweep"] = {
                "points": [
                    {
                        "budget": p.budget,
                        "input_tokens": p.input_tokens,
                        "ttft_ms": None if p.ttft_ms is None else round(p.ttft_ms, 1),
                        "error": p.error,
                    }
                    for p in self.sweep
                ],
                "fit": None if fit is None else _fit_json(fit),
            }
        if self.calls:
            document["calls"] = [call.to_json() for call in self.calls]
        return document


def _fit_json(fit: PrefillFit) -> dict[str, float]:
    c = fit.coefficients
    return {
        "fixed_ms": round(c.fixed_ms, 1),
        "ms_per_1k_tokens": round(c.ms_per_token * 1000, 1),
        "ms_per_1k_tokens_per_1k_context": round(c.ms_per_token_per_ktoken * 1000, 2),
        "ms_per_1k_context_tokens": round(c.ms_per_context_token * 1000, 2),
    }


def _latency_model(simulator: SimulatorConfig) -> dict[str, Any]:
    return {
        "overhead_ms": simulator.overhead_ms,
        "prefill_ms_per_token": simulator.prefill_ms_per_token,
        "attention_ms_per_1k_context": simulator.attention_ms_per_1k_context,
        "decode_tokens_per_s": simulator.decode_tokens_per_s,
        "answer_tokens": simulator.answer_tokens,
        "prefix_cache": simulator.prefix_cache,
    }
