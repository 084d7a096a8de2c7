"""The benchmark: what trimming and streaming do to the first token, measured on a real endpoint.

Single turn: the four modes {untrimmed, trimmed} × {blocking, streaming} send the same scenario
through the real stack (``build_chat_model``, :class:`PriorityTrimmer`,
:class:`LatencyCallbackHandler`) after one warm-up call, ``runs`` times each, interleaved (each
round starts with a different mode), so drift on the endpoint hits every mode alike. A server with
a prefix cache would answer a repeated prompt from its cache, so every call's prompt starts with a
fresh request id: every single-turn call pays its full prefill, as the first call of a new agent
conversation does.

Multi-turn: the scenario is replayed call by call as it grew (one model call before each
assistant message, and one at the end), once per strategy: no trimming, trimming whose cut moves
on every call, and prefix-stable trimming. Each replay is one session (its own request id, kept
for all its calls), so the server's prefix cache works as it would for one agent conversation.

TTFT is the handler's time to the first content chunk; for a blocking call it equals the total
(the first text arrives with the whole answer). For trimmed calls the trim's own time is added
to both, as the agent waits for it too.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import openai
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_openai import ChatOpenAI

from agent_latency._chat_model import build_chat_model
from agent_latency._config import Settings
from agent_latency._messages import load_messages_file, read_json_file
from agent_latency._prefill import PrefillFit, fit_prefill
from agent_latency._redaction import display_url, redact
from agent_latency._tokens import TokenCounter
from agent_latency.telemetry._handler import LatencyCallbackHandler, LatencyRecord
from agent_latency.trimming._trimmer import PriorityTrimmer

if TYPE_CHECKING:
    from agent_latency.sim import SimulatorConfig

DEFAULT_SCENARIO: Final = "agent_8k.json"
"""The scenario shipped in ``agent_latency/scenarios``: an ~8,200-token agent request."""

SWEEP_FRACTIONS: Final = (0.2, 0.35, 0.5, 0.65, 0.8)
"""Budgets of the prefill sweep, as fractions of the untrimmed prompt (which is swept too)."""

# The bench reports every call itself; the handler's per-call threshold logs would only
# interleave with the progress bar, so its thresholds are set out of reach.
_NO_THRESHOLD_MS: Final = 1e12
_REQUEST_ID_DIGITS: Final = 9  # cl100k splits digits in threes: always 3 tokens
_MAX_SERVER_MESSAGE: Final = 200


# -- modes, samples and their statistics ----------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    """One way of calling the model: with or without trimming, blocking or streaming."""

    trimmed: bool
    streaming: bool

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
        input_tokens: Prompt tokens by the local TokenCounter: one unit for every mode and
            every server, whether or not it reports usage (llama.cpp does not when streaming).
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


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 0.5), 1), "p95": round(percentile(values, 0.95), 1)}


@dataclass(frozen=True)
class ModeResult:
    """The samples of one mode."""

    mode: Mode
    samples: tuple[Sample, ...]

    @property
    def input_tokens(self) -> int:
        """The median prompt size (every run sends the same size)."""
        return int(statistics.median_low(s.input_tokens for s in self.samples))

    def ttft_ms(self, fraction: float) -> float:
        """The ``fraction`` quantile of the time to first token."""
        return percentile([s.ttft_ms for s in self.samples], fraction)

    def total_ms(self, fraction: float) -> float:
        """The ``fraction`` quantile of the total time."""
        return percentile([s.total_ms for s in self.samples], fraction)

    def to_json(self) -> dict[str, Any]:
        """The mode's entry in the ``--json`` document."""
        return {
            "mode": self.mode.label,
            "trimmed": self.mode.trimmed,
            "streaming": self.mode.streaming,
            "input_tokens": self.input_tokens,
            "ttft_ms": _quantiles([s.ttft_ms for s in self.samples]),
            "total_ms": _quantiles([s.total_ms for s in self.samples]),
        }


# -- multi-turn strategies ------------------------------------------------------------------------


@dataclass(frozen=True)
class Strategy:
    """How a multi-turn replay prepares each call's prompt.

    Attributes:
        key: The name in the JSON document.
        label: The name in the table.
        prefix_stable: The trimmer's ``prefix_stable``; ``None`` sends the whole conversation.
    """

    key: str
    label: str
    prefix_stable: bool | None


STRATEGIES: Final = (
    Strategy("untrimmed", "no trimming", None),
    Strategy("moving_cut", "trimming, moving cut", False),
    Strategy("prefix_stable", "prefix-stable trimming", True),
)


@dataclass(frozen=True)
class StrategyResult:
    """The calls of one multi-turn replay, in order."""

    strategy: Strategy
    samples: tuple[Sample, ...]

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
        """The strategy's entry in the ``--json`` document."""
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
        }


def call_points(messages: Sequence[BaseMessage]) -> list[int]:
    """Returns the prompt lengths at which an agent called the model while this conversation grew.

    A model call produced each assistant message (consecutive assistant messages count once), so
    one call point is just before it; a conversation that does not end with an assistant message
    ends in one more call point: the request being benchmarked.
    """
    points = [
        index
        for index in range(1, len(messages))
        if isinstance(messages[index], AIMessage) and not isinstance(messages[index - 1], AIMessage)
    ]
    if messages and not isinstance(messages[-1], AIMessage):
        points.append(len(messages))
    return points


# -- the prefill sweep ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepPoint:
    """One call of the prefill sweep: the budget, the prompt size sent and its TTFT."""

    budget: int | None
    input_tokens: int
    ttft_ms: float


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
    """

    endpoint: str
    model: str
    simulator: SimulatorConfig | None
    runs: int
    budget: int
    modes: tuple[ModeResult, ...]
    turns: tuple[StrategyResult, ...] = ()
    sweep: tuple[SweepPoint, ...] = ()

    @property
    def simulated(self) -> bool:
        """Whether the endpoint was a simulator with a known latency model."""
        return self.simulator is not None

    def mode(self, mode: Mode) -> ModeResult:
        """Returns the result of ``mode``."""
        return next(result for result in self.modes if result.mode == mode)

    def prefill_fit(self) -> PrefillFit | None:
        """The prefill line fitted over the sweep; ``None`` without two prompt sizes."""
        return fit_prefill((point.input_tokens, point.ttft_ms) for point in self.sweep)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: endpoint, model, runs, modes (and turns, sweep if run)."""
        document: dict[str, Any] = {
            "endpoint": self.endpoint,
            "model": self.model,
            "runs": self.runs,
            "simulator": None if self.simulator is None else _latency_model(self.simulator),
            "budget": self.budget,
            "modes": [result.to_json() for result in self.modes],
        }
        if self.turns:
            document["turns"] = {
                "calls": len(self.turns[0].samples),
                "strategies": [result.to_json() for result in self.turns],
            }
        if self.sweep:
            fit = self.prefill_fit()
            document["sweep"] = {
                "points": [
                    {
                        "budget": p.budget,
                        "input_tokens": p.input_tokens,
                        "ttft_ms": round(p.ttft_ms, 1),
                    }
                    for p in self.sweep
                ],
                "ms_per_1k_tokens": round(fit.ms_per_1k_tokens, 1) if fit else None,
                "intercept_ms": round(fit.intercept_ms, 1) if fit else None,
            }
        return document


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


def saving_breakdown(report: BenchReport) -> SavingBreakdown:
    """Splits the TTFT saving of trimmed + streaming into prefill saved and decode time."""
    baseline = report.mode(BASELINE_MODE)
    untrimmed_streaming = report.mode(Mode(trimmed=False, streaming=True))
    gated = report.mode(GATED_MODE)
    model_prefill = model_decode = None
    simulator = report.simulator
    answer = [s.output_tokens for s in baseline.samples if s.output_tokens is not None]
    if simulator is not None and answer:
        removed = baseline.input_tokens - gated.input_tokens
        model_prefill = simulator.prefill_ms_per_token * removed
        # The first token comes with the prefill; the rest at the decode rate.
        model_decode = (statistics.median_low(answer) - 1) / simulator.decode_tokens_per_s * 1000
    return SavingBreakdown(
        saving_ms=baseline.ttft_ms(0.5) - gated.ttft_ms(0.5),
        prefill_saved_ms=untrimmed_streaming.ttft_ms(0.5) - gated.ttft_ms(0.5),
        decode_ms=untrimmed_streaming.total_ms(0.5) - untrimmed_streaming.ttft_ms(0.5),
        model_prefill_saved_ms=model_prefill,
        model_decode_ms=model_decode,
    )


def _latency_model(simulator: SimulatorConfig) -> dict[str, Any]:
    return {
        "overhead_ms": simulator.overhead_ms,
        "prefill_ms_per_token": simulator.prefill_ms_per_token,
        "decode_tokens_per_s": simulator.decode_tokens_per_s,
        "answer_tokens": simulator.answer_tokens,
        "prefix_cache": simulator.prefix_cache,
    }


# -- the regression gate --------------------------------------------------------------------------


@dataclass(frozen=True)
class GateVerdict:
    """The trimmed + streaming TTFT p50 compared with a baseline's.

    Attributes:
        current_ms: This run's p50.
        baseline_ms: The baseline's p50.
        max_regression_pct: The largest slowdown allowed, in percent.
    """

    current_ms: float
    baseline_ms: float
    max_regression_pct: float

    @property
    def change_pct(self) -> float:
        """How much slower (positive) or faster (negative) this run is, in percent."""
        return (self.current_ms / self.baseline_ms - 1) * 100

    @property
    def passed(self) -> bool:
        """Whether the slowdown is within the limit."""
        return self.change_pct <= self.max_regression_pct

    def describe(self) -> str:
        """One line for the terminal."""
        verdict = "ok" if self.passed else "REGRESSION"
        return (
            f"Regression gate ({GATED_MODE.label} TTFT p50): {self.current_ms:,.0f} ms vs "
            f"baseline {self.baseline_ms:,.0f} ms: {self.change_pct:+.1f}% "
            f"(limit +{self.max_regression_pct:g}%): {verdict}"
        )


def load_baseline(path: str | Path) -> float:
    """Reads the trimmed + streaming TTFT p50 from an earlier ``--json`` document.

    Raises:
        ValueError: Naming the file, when it is unreadable, not JSON, or lacks that number.
    """
    path = Path(path)
    document = read_json_file(path, "a --json file of an earlier run")
    modes = document.get("modes") if isinstance(document, Mapping) else None
    for entry in modes if isinstance(modes, list) else ():
        if (
            isinstance(entry, Mapping)
            and entry.get("trimmed") is True
            and entry.get("streaming") is True
        ):
            ttft = entry.get("ttft_ms")
            p50 = ttft.get("p50") if isinstance(ttft, Mapping) else None
            if isinstance(p50, int | float) and not isinstance(p50, bool) and p50 > 0:
                return float(p50)
            raise ValueError(
                f"{path}: baseline's trimmed + streaming mode has no positive ttft_ms.p50; "
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
    return GateVerdict(
        current_ms=report.mode(GATED_MODE).ttft_ms(0.5),
        baseline_ms=baseline_ms,
        max_regression_pct=max_regression_pct,
    )


# -- inputs ---------------------------------------------------------------------------------------


def load_scenario(path: str | Path | None = None) -> list[BaseMessage]:
    """Reads the conversation to benchmark: ``path``, or the shipped default scenario.

    Raises:
        ValueError: Naming the file, when it cannot be read or holds no valid messages.
    """
    if path is not None:
        messages = load_messages_file(path)
        if not messages:
            raise ValueError(f"{path}: the conversation is empty; give at least one message.")
        return messages
    with resources.as_file(
        resources.files("agent_latency") / "scenarios" / DEFAULT_SCENARIO
    ) as file:
        return load_messages_file(file)


def with_request_id(messages: Sequence[BaseMessage], request_id: str) -> list[BaseMessage]:
    """Returns ``messages`` with a request id at the very start of the prompt (a new copy).

    A prompt that differs from every earlier one in its first tokens shares no prefix with them,
    so no server prefix cache can shorten its prefill. The input is not modified.
    """
    first, rest = messages[0], list(messages[1:])
    marker = f"Request {request_id}.\n\n"
    content = first.content
    if isinstance(content, str):
        new_content: str | list[str | dict[str, Any]] = marker + content
    else:
        new_content = [{"type": "text", "text": marker}, *content]
    return [first.model_copy(update={"content": new_content}), *rest]


def _new_request_id() -> str:
    return f"{secrets.randbelow(10**_REQUEST_ID_DIGITS):0{_REQUEST_ID_DIGITS}d}"


# -- running --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BenchPlan:
    """What to measure.

    Attributes:
        runs: Timed calls per single-turn mode.
        turns: Calls per multi-turn replay; ``None`` skips the replay.
        budget: The trimmer's budget; ``None`` takes ``prompt.token_budget`` from the settings.
        sweep: Also sweep budgets to fit the prefill cost per token.
    """

    runs: int = 5
    turns: int | None = None
    budget: int | None = None
    sweep: bool = False

    def __post_init__(self) -> None:
        for option, value in (("runs", self.runs), ("turns", self.turns), ("budget", self.budget)):
            if value is None and option != "runs":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{option} must be a positive integer, got {value!r}.")

    def calls(self) -> int:
        """How many model calls the plan makes (the warm-up included)."""
        calls = 1 + self.runs * len(MODES)
        calls += (self.turns or 0) * len(STRATEGIES)
        return calls + (len(SWEEP_FRACTIONS) + 1 if self.sweep else 0)


ProgressCallback = Callable[[str], None]
"""Called after each model call with a short description of that call."""


class EndpointError(ValueError):
    """The endpoint failed a request; the message names it and the likely fix, never the key."""


@dataclass(frozen=True)
class _Prepared:
    messages: list[BaseMessage]
    trim_ms: float


class Bench:
    """Measures model calls on one endpoint through the real stack.

    Args:
        settings: The channel (``llm.base_url`` must be set), generation options and trimmer
            options.
        messages: The conversation to benchmark.
        budget: The trimmer's budget; ``None`` takes ``settings.prompt.token_budget``.
        on_call: Called after each model call.
    """

    def __init__(
        self,
        settings: Settings,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        on_call: ProgressCallback | None = None,
    ) -> None:
        if settings.llm.base_url is None:
            raise ValueError("Bench: settings.llm.base_url must be set; use open_endpoint().")
        if budget is not None:
            settings = replace(settings, prompt=replace(settings.prompt, token_budget=budget))
        self.settings = settings
        self.messages = list(messages)
        self.budget = settings.prompt.token_budget
        self._on_call = on_call
        self._counter = TokenCounter()
        self._records: list[LatencyRecord] = []
        handler = LatencyCallbackHandler(
            ttft_warn_ms=_NO_THRESHOLD_MS,
            ttft_error_ms=_NO_THRESHOLD_MS,
            chunk_timeout_ms=settings.streaming.chunk_timeout_ms,
            on_record=self._records.append,
        )
        self._models = {
            # No retries: a retried call would be timed as one slow call; a failure must show.
            streaming: build_chat_model(
                settings, streaming=streaming, callbacks=[handler], max_retries=0
            )
            for streaming in (False, True)
        }
        self._trimmers = {
            stable: PriorityTrimmer.from_settings(
                settings, prefix_stable=stable, token_counter=self._counter
            )
            for stable in (False, True)
        }

    @property
    def endpoint(self) -> str:
        """The endpoint as shown: no credentials."""
        return display_url(self.settings.llm.base_url or "")

    def warm_up(self) -> None:
        """Makes one untimed trimmed, streamed call (connections, caches, lazy imports)."""
        self._single_turn(GATED_MODE, "warm-up")

    def run_modes(self, runs: int) -> tuple[ModeResult, ...]:
        """Runs every mode ``runs`` times, interleaved, and returns the results in MODES order."""
        samples: dict[Mode, list[Sample]] = {mode: [] for mode in MODES}
        for run in range(runs):
            shift = run % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                samples[mode].append(self._single_turn(mode, f"run {run + 1}/{runs}: {mode.label}"))
        return tuple(ModeResult(mode, tuple(samples[mode])) for mode in MODES)

    def run_turns(self, turns: int) -> tuple[StrategyResult, ...]:
        """Replays the last ``turns`` model calls of the conversation once per strategy.

        Raises:
            ValueError: When the conversation holds fewer model calls than ``turns``.
        """
        prefixes = self.replay_prefixes(turns)
        results = []
        for strategy in STRATEGIES:
            request_id = _new_request_id()  # one session: the id stays for all its calls
            samples = []
            for turn, end in enumerate(prefixes, start=1):
                conversation = with_request_id(self.messages[:end], request_id)
                prepared = self._prepare(conversation, strategy.prefix_stable)
                samples.append(
                    self._measure(
                        prepared, streaming=True, step=f"{strategy.label}: call {turn}/{turns}"
                    )
                )
            results.append(StrategyResult(strategy, tuple(samples)))
        return tuple(results)

    def replay_prefixes(self, turns: int) -> list[int]:
        """Returns the prompt lengths of the last ``turns`` model calls.

        Raises:
            ValueError: When the conversation holds fewer model calls than ``turns``.
        """
        points = call_points(self.messages)
        if turns > len(points):
            raise ValueError(
                f"--turns {turns}: the conversation holds only {len(points)} model calls to "
                "replay (one before each assistant message, one at the end); use "
                f"--turns {len(points)} or fewer, or a longer --messages file."
            )
        return points[len(points) - turns :]

    def sweep(self) -> tuple[SweepPoint, ...]:
        """Measures the streamed TTFT for budgets from a fifth of the prompt up to all of it."""
        untrimmed = self._counter.count_messages(self.messages)
        budgets: list[int | None] = [*sweep_budgets(untrimmed), None]
        points = []
        for budget in budgets:
            prompt = with_request_id(self.messages, _new_request_id())
            if budget is None:
                prepared = _Prepared(prompt, 0.0)
            else:
                # The exact cut (not prefix-stable): each point lands as close to its budget.
                trimmer = PriorityTrimmer.from_settings(
                    replace(
                        self.settings, prompt=replace(self.settings.prompt, token_budget=budget)
                    ),
                    prefix_stable=False,
                    token_counter=self._counter,
                )
                result = trimmer.trim(prompt)
                prepared = _Prepared(result.messages, result.elapsed_ms)
            shown = "untrimmed" if budget is None else f"budget {budget}"
            sample = self._measure(prepared, streaming=True, step=f"prefill sweep: {shown}")
            points.append(SweepPoint(budget, sample.input_tokens, sample.ttft_ms))
        return tuple(points)

    def _single_turn(self, mode: Mode, step: str) -> Sample:
        prompt = with_request_id(self.messages, _new_request_id())
        prepared = self._prepare(prompt, True if mode.trimmed else None)
        return self._measure(prepared, streaming=mode.streaming, step=step)

    def _prepare(self, messages: list[BaseMessage], prefix_stable: bool | None) -> _Prepared:
        if prefix_stable is None:
            return _Prepared(messages, 0.0)
        result = self._trimmers[prefix_stable].trim(messages)
        return _Prepared(result.messages, result.elapsed_ms)

    def _measure(self, prepared: _Prepared, *, streaming: bool, step: str) -> Sample:
        model = self._models[streaming]
        self._records.clear()
        try:
            usage = (
                _stream(model, prepared.messages)
                if streaming
                else _invoke(model, prepared.messages)
            )
        except openai.APIError as exc:
            raise self._endpoint_error(exc) from None
        if len(self._records) != 1:
            raise RuntimeError(
                f"Bench: the latency handler recorded {len(self._records)} calls for one request; "
                "see the agent_latency log."
            )
        record = self._records[0]
        if record.ttft_ms is None:
            raise RuntimeError(f"Bench: the call ended without an answer ({record.outcome}).")
        tokens = record.estimated_input_tokens or self._counter.count_messages(prepared.messages)
        if self._on_call is not None:
            self._on_call(step)
        return Sample(
            ttft_ms=record.ttft_ms + prepared.trim_ms,
            total_ms=record.total_ms + prepared.trim_ms,
            input_tokens=tokens,
            cached_tokens=_cached_tokens(usage),
            output_tokens=record.output_tokens,
            server_input_tokens=record.input_tokens,
        )

    def _endpoint_error(self, error: openai.APIError) -> EndpointError:
        key = self.settings.llm.api_key
        message = " ".join(str(getattr(error, "message", "") or "").split())
        secret = key.get_secret_value() if key is not None else None
        message = redact(message, secret)[:_MAX_SERVER_MESSAGE]
        where = f"{self.endpoint} (model {self.settings.llm.model!r})"
        if isinstance(error, openai.APIStatusError):
            hint = _STATUS_HINTS.get(error.status_code, "check the endpoint's logs")
            return EndpointError(
                f"{where} answered HTTP {error.status_code}: {message} Fix: {hint}."
            )
        return EndpointError(
            f"{where} could not be reached ({type(error).__name__}). Fix: check that the server "
            "is running and that base_url is its API root, e.g. http://127.0.0.1:8000/v1."
        )


_STATUS_HINTS: Final = {
    400: "the server rejected the request; check the model's context window and the budget",
    401: "check the API key (--api-key, llm.api_key or AGENT_LATENCY_API_KEY)",
    403: "check that the API key may use this model",
    404: "base_url must be the API root (e.g. https://host/v1) and the model must exist there",
    429: "the endpoint is rate limiting; run fewer --runs or wait",
}


def _stream(model: ChatOpenAI, messages: list[BaseMessage]) -> UsageMetadata | None:
    usage = None
    for chunk in model.stream(messages):
        usage = chunk.usage_metadata or usage
    return usage


def _invoke(model: ChatOpenAI, messages: list[BaseMessage]) -> UsageMetadata | None:
    answer = model.invoke(messages)
    return answer.usage_metadata if isinstance(answer, AIMessage) else None


def _cached_tokens(usage: UsageMetadata | None) -> int | None:
    details = usage.get("input_token_details") if usage is not None else None
    cached = details.get("cache_read") if details is not None else None
    return cached if isinstance(cached, int) and not isinstance(cached, bool) else None


@contextlib.contextmanager
def open_endpoint(settings: Settings) -> Iterator[tuple[Settings, SimulatorConfig | None]]:
    """Yields settings pointing at an endpoint, and the simulator's configuration if it is one.

    With ``llm.base_url`` set the settings come back as they are. Without, the simulator (with
    its default latency model, serving ``llm.model``) runs in-process on a free loopback port
    for the length of the block, and no API key is sent to it.
    """
    if settings.llm.base_url is not None:
        yield settings, None
        return
    from agent_latency.sim import SimulatorConfig, running_simulator

    with running_simulator(SimulatorConfig(model=settings.llm.model)) as simulator:
        llm = replace(settings.llm, base_url=simulator.base_url, api_key=None)
        yield replace(settings, llm=llm), simulator.config


def run_bench(
    settings: Settings,
    messages: Sequence[BaseMessage],
    plan: BenchPlan,
    *,
    simulator: SimulatorConfig | None = None,
    on_call: ProgressCallback | None = None,
) -> BenchReport:
    """Runs ``plan`` against the endpoint of ``settings`` and returns what it measured.

    Args:
        settings: Settings with ``llm.base_url`` set (see :func:`open_endpoint`).
        messages: The conversation to benchmark.
        plan: What to measure.
        simulator: The endpoint's latency model, when it is a simulator (see
            :func:`open_endpoint`); recorded in the report.
        on_call: Called after each model call.

    Raises:
        ValueError: For a plan the conversation cannot serve (checked before any call), or an
            :class:`EndpointError` when the endpoint fails.
    """
    bench = Bench(settings, messages, budget=plan.budget, on_call=on_call)
    if plan.turns is not None:
        bench.replay_prefixes(plan.turns)  # fail before spending any time
    bench.warm_up()
    modes = bench.run_modes(plan.runs)
    turns = bench.run_turns(plan.turns) if plan.turns is not None else ()
    sweep = bench.sweep() if plan.sweep else ()
    return BenchReport(
        endpoint=bench.endpoint,
        model=bench.settings.llm.model,
        simulator=simulator,
        runs=plan.runs,
        budget=bench.budget,
        modes=modes,
        turns=turns,
        sweep=sweep,
    )
