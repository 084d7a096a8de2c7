"""What a bench report means: the saving explained, and the regression gate against a baseline."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent_latency._user_input import read_json_file
from agent_latency.bench._measurements import BASELINE_MODE, GATED_MODE, BenchReport, Mode


@dataclass(frozen=True)
class SavingBreakdown:
    """How much sooner trimmed + streaming shows its first token than untrimmed + blocking, and why.

    All figures are p50s. Streaming alone saves the decoding a blocking call waits for; trimming
    alone saves prefill, seen between the two streaming modes, whose only difference is the
    prompt. What the two do not explain (``rest_ms``) is what blocking costs on top of streaming's
    total, measurement noise included.

    Attributes:
        saving_ms: Untrimmed + blocking TTFT minus trimmed + streaming TTFT.
        prefill_saved_ms: Untrimmed + streaming TTFT minus trimmed + streaming TTFT.
        decode_ms: Untrimmed + streaming total minus its TTFT.
        model_prefill_saved_ms: On a simulator: the prefill its latency model saves for the
            tokens trimming removed.
        model_decode_ms: On a simulator: the time its latency model takes to decode the answer
            after the first token.
    """

    saving_ms: float
    prefill_saved_ms: float
    decode_ms: float
    model_prefill_saved_ms: float | None = None
    model_decode_ms: float | None = None

    @property
    def rest_ms(self) -> float:
        """The part of the saving that neither prefill nor decoding explains."""
        return self.saving_ms - self.prefill_saved_ms - self.decode_ms

    def describe(self) -> str:
        """A sentence or two for the terminal."""
        text = (
            f"{GATED_MODE.label} shows the first token {self.saving_ms:,.0f} ms sooner than "
            f"{BASELINE_MODE.label}: {self.prefill_saved_ms:,.0f} ms less prefill + "
            f"{self.decode_ms:,.0f} ms of decoding a blocking call waits for (other: "
            f"{self.rest_ms:+,.0f} ms; p50s)."
        )
        if self.model_prefill_saved_ms is None or self.model_decode_ms is None:
            return text
        predicted = self.model_prefill_saved_ms + self.model_decode_ms
        return (
            f"{text} The simulator's latency model predicts {predicted:,.0f} ms "
            f"({self.model_prefill_saved_ms:,.0f} ms prefill + {self.model_decode_ms:,.0f} ms "
            "decode)."
        )


def saving_breakdown(report: BenchReport) -> SavingBreakdown | None:
    """Splits the TTFT saving of trimmed + streaming into prefill saved and decode time.

    Returns:
        The breakdown; ``None`` when one of the three modes it compares failed or did not run.
    """
    baseline = report.mode(BASELINE_MODE)
    untrimmed_streaming = report.mode(Mode(trimmed=False, streaming=True))
    gated = report.mode(GATED_MODE)
    if not (
        baseline is not None
        and untrimmed_streaming is not None
        and gated is not None
        and baseline.ok
        and untrimmed_streaming.ok
        and gated.ok
    ):
        return None
    model_prefill = model_decode = None
    simulator = report.simulator
    answer = [s.output_tokens for s in baseline.samples if s.output_tokens is not None]
    if simulator is not None and answer:
        untrimmed, trimmed = baseline.input_tokens, gated.input_tokens
        model_prefill = simulator.ttft_ms(untrimmed, untrimmed) - simulator.ttft_ms(
            trimmed, trimmed
        )
        # The first token comes with the prefill; the rest at the decode rate.
        model_decode = (statistics.median_low(answer) - 1) / simulator.decode_tokens_per_s * 1000
    return SavingBreakdown(
        saving_ms=baseline.ttft_ms(0.5) - gated.ttft_ms(0.5),
        prefill_saved_ms=untrimmed_streaming.ttft_ms(0.5) - gated.ttft_ms(0.5),
        decode_ms=untrimmed_streaming.total_ms(0.5) - untrimmed_streaming.ttft_ms(0.5),
        model_prefill_saved_ms=model_prefill,
        model_decode_ms=model_decode,
    )


# -- the regression gate --------------------------------------------------------------------------


@dataclass(frozen=True)
class GateVerdict:
    """The trimmed + streaming TTFT p50 compared with a baseline's.

    Attributes:
        current_ms: This run's p50; ``None`` when the gated mode failed (the gate then fails).
        baseline_ms: The baseline's p50.
        max_regression_pct: The largest slowdown allowed, in percent.
    """

    current_ms: float | None
    baseline_ms: float
    max_regression_pct: float

    @property
    def change_pct(self) -> float:
        """How much slower (positive) or faster (negative) this run is, in percent (inf when
        the gated mode failed)."""
        if self.current_ms is None:
            return math.inf
        return (self.current_ms / self.baseline_ms - 1) * 100

    @property
    def passed(self) -> bool:
        """Whether the slowdown is within the limit."""
        return self.change_pct <= self.max_regression_pct

    def describe(self) -> str:
        """One line for the terminal."""
        if self.current_ms is None:
            return (
                f"Regression gate ({GATED_MODE.label} TTFT p50): the mode failed, so there is "
                f"nothing to compare with baseline {self.baseline_ms:,.0f} ms: REGRESSION"
            )
        verdict = "ok" if self.passed else "REGRESSION"
        return (
            f"Regression gate ({GATED_MODE.label} TTFT p50): {self.current_ms:,.0f} ms vs "
            f"baseline {self.baseline_ms:,.0f} ms: {self.change_pct:+.1f}% "
            f"(limit +{self.max_regression_pct:g}%): {verdict}"
        )


def load_baseline(path: str | Path) -> float:
    """Reads the trimmed + streaming TTFT p50 from an earlier ``--json`` document.

    Raises:
        ValueError: Naming the file, when it is unreadable, not JSON, a partial run (Ctrl-C
            interrupted it), or lacks that number.
    """
    path = Path(path)
    document = read_json_file(path, "a --json file of an earlier run")
    if isinstance(document, Mapping) and document.get("interrupted") is True:
        raise ValueError(
            f'{path}: baseline is a partial run ("interrupted": true: Ctrl-C stopped it), whose '
            "figures are of fewer runs than asked. Fix: give the --json file of a run that "
            "finished."
        )
    modes = document.get("modes") if isinstance(document, Mapping) else None
    for entry in modes if isinstance(modes, list) else ():
        if (
            isinstance(entry, Mapping)
            and entry.get("trimmed") is True
            and entry.get("streaming") is True
        ):
            ttft = entry.get("ttft_ms")
            p50 = ttft.get("p50") if isinstance(ttft, Mapping) else None
            # json reads Infinity and 1e999 as inf, against which every run is 100% faster.
            if isinstance(p50, int | float) and not isinstance(p50, bool) and 0 < p50 < math.inf:
                return float(p50)
            raise ValueError(
                f"{path}: baseline's trimmed + streaming mode has no positive finite ttft_ms.p50; "
                "give a --json file written by `agent-latency bench`."
            )
    raise ValueError(
        f'{path}: baseline has no mode with "trimmed": true and "streaming": true under '
        '"modes"; give a --json file written by `agent-latency bench`.'
    )


def check_regression(
    report: BenchReport, baseline_ms: float, max_regression_pct: float
) -> GateVerdict:
    """Compares this run's trimmed + streaming TTFT p50 with the baseline's."""
    gated = report.mode(GATED_MODE)
    return GateVerdict(
        current_ms=gated.ttft_ms(0.5) if gated is not None and gated.ok else None,
        baseline_ms=baseline_ms,
        max_regression_pct=max_regression_pct,
    )


# -- when a low budget is what makes warm calls slow ----------------------------------------------


def warm_cut_advice(report: BenchReport, *, context_window: int | None, reserve: int) -> str | None:
    """Says so when sending everything was sooner than the default trimmer on a warm replay.

    On a server that caches prompt prefixes a warm call prefills only what is new since the
    previous one; a cut prefills again what it keeps. With a budget far below the context
    window the conversation outgrows it early and is cut again and again, which is what can
    make trimming slower than sending everything.

    Args:
        report: The bench's report (its multi-turn replay).
        context_window: The model's context window (``llm.context_window``), if known.
        reserve: The answer's room (``prompt.reserve_for_output``).

    Returns:
        One paragraph with what to set instead; ``None`` when trimming was as soon or sooner,
        or the replay did not run, failed or the server reported no cached tokens.
    """
    results = {result.strategy.key: result for result in report.turns}
    untrimmed, trimmed = results.get("untrimmed"), results.get("prefix_stable")
    if untrimmed is None or trimmed is None or not (untrimmed.ok and trimmed.ok):
        return None
    cached = untrimmed.cached_tokens
    if cached is None or untrimmed.mean_ttft_ms >= trimmed.mean_ttft_ms:
        return None
    window = "the context window"
    target = "the context window less reserve_for_output"
    if context_window is not None:
        window = f"the context window ({context_window:,})"
        target = f"{context_window - reserve:,} (context_window - reserve_for_output)"
    return (
        f"Sending everything was sooner than trimming to {report.budget:,} tokens on this "
        f"conversation (mean TTFT {untrimmed.mean_ttft_ms:,.0f} ms against "
        f"{trimmed.mean_ttft_ms:,.0f} ms): the server's prefix cache served "
        f"{cached / untrimmed.prompt_tokens:.0%} of the untrimmed prompts, so a warm call "
        "prefilled only what was new, while each cut prefills again what it keeps. A budget far "
        f"below {window} is outgrown early and cut often: set token_budget closer to {target} "
        "so that cuts are rare, and keep a low budget only for calls that start cold."
    )
