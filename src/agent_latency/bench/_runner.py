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

A request the endpoint refuses (HTTP 400, 413, 422), or one that cannot fit
``llm.context_window`` (checked before sending), fails its mode, replay or sweep point only: the
report records why, and the bench goes on with the others.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

import openai
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_openai import ChatOpenAI

from agent_latency._redaction import display_url, redact
from agent_latency.bench._results import (
    GATED_MODE,
    MODES,
    STRATEGIES,
    SWEEP_FRACTIONS,
    BenchReport,
    CallCount,
    Mode,
    ModeResult,
    Sample,
    Strategy,
    StrategyResult,
    SweepPoint,
    sweep_budgets,
)
from agent_latency.bench._scenario import call_points, new_request_id, with_request_id
from agent_latency.config import Settings, build_chat_model
from agent_latency.telemetry._handler import LatencyCallbackHandler, LatencyRecord
from agent_latency.trimming._cost_aware import CostAwareTrimmer
from agent_latency.trimming._trimmer import PriorityTrimmer

if TYPE_CHECKING:
    from agent_latency.sim import SimulatorConfig

# The bench reports every call itself; the handler's per-call threshold logs would only
# interleave with the progress bar, so its thresholds are set out of reach.
_NO_THRESHOLD_MS: Final = 1e12


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


class RequestRefused(EndpointError):
    """One request was refused (by the endpoint, or before sending as too long for the context
    window): the mode or replay that sent it fails, and the bench goes on with the others."""


@dataclass(frozen=True)
class _Prepared:
    messages: list[BaseMessage]
    trim_ms: float
    budget: int | None = None  # None: untrimmed
    over_budget: bool = False


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
        self._records: list[LatencyRecord] = []
        self.calls: list[CallCount] = []
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
        # The bench counts with the counter the trimmer chooses from the settings, shared.
        stable = PriorityTrimmer.from_settings(settings, prefix_stable=True)
        self._counter = stable.token_counter
        self._trimmers = {
            True: stable,
            False: PriorityTrimmer.from_settings(
                settings, prefix_stable=False, token_counter=self._counter
            ),
        }
        # The replay's hard-limit and cost-aware strategies need room for the budget in the
        # context window; without it they fail alone (their error names the numbers).
        self._cost_aware: CostAwareTrimmer | str
        self._at_hard_limit: PriorityTrimmer | str
        try:
            self._cost_aware = CostAwareTrimmer.from_settings(settings, token_counter=self._counter)
        except ValueError as exc:
            self._cost_aware = self._at_hard_limit = str(exc)
        else:
            at_hard_limit = replace(
                settings, prompt=replace(settings.prompt, token_budget=self._cost_aware.hard_limit)
            )
            self._at_hard_limit = PriorityTrimmer.from_settings(
                at_hard_limit, prefix_stable=False, token_counter=self._counter
            )

    @property
    def endpoint(self) -> str:
        """The endpoint as shown: no credentials."""
        return display_url(self.settings.llm.base_url or "")

    def warm_up(self) -> None:
        """Makes one untimed trimmed, streamed call (connections, caches, lazy imports).

        A refused request is left for the timed runs to record.
        """
        with contextlib.suppress(RequestRefused):
            self._single_turn(GATED_MODE, "warm-up")

    def run_modes(self, runs: int) -> tuple[ModeResult, ...]:
        """Runs every mode ``runs`` times, interleaved, and returns the results in MODES order.

        A mode whose request is refused (see :class:`RequestRefused`) keeps the error and is not
        sent again; the other modes go on.
        """
        samples: dict[Mode, list[Sample]] = {mode: [] for mode in MODES}
        errors: dict[Mode, str] = {}
        for run in range(runs):
            shift = run % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                step = f"run {run + 1}/{runs}: {mode.label}"
                if mode in errors:
                    self._skipped(step)
                    continue
                try:
                    samples[mode].append(self._single_turn(mode, step))
                except RequestRefused as refused:
                    errors[mode] = str(refused)
                    self._skipped(step)
        return tuple(ModeResult(mode, tuple(samples[mode]), errors.get(mode)) for mode in MODES)

    def run_turns(self, turns: int) -> tuple[StrategyResult, ...]:
        """Replays the last ``turns`` model calls of the conversation once per strategy.

        Raises:
            ValueError: When the conversation holds fewer model calls than ``turns``.
        """
        prefixes = self.replay_prefixes(turns)
        results = []
        for strategy in STRATEGIES:
            request_id = new_request_id()  # one session: the id stays for all its calls
            samples: list[Sample] = []
            error = self._unavailable(strategy)
            for turn, end in enumerate(prefixes, start=1):
                step = f"{strategy.label}: call {turn}/{turns}"
                if error is not None:
                    self._skipped(step)
                    continue
                conversation = with_request_id(self.messages[:end], request_id)
                prepared = self._replay_prompt(strategy, conversation, request_id)
                try:
                    samples.append(self._measure(prepared, streaming=True, step=step))
                except RequestRefused as refused:
                    error = f"call {turn} of {turns}: {refused}"
                    self._skipped(step)
            results.append(StrategyResult(strategy, tuple(samples), error))
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
            prompt = with_request_id(self.messages, new_request_id())
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
                prepared = _Prepared(result.messages, result.elapsed_ms, budget, result.over_budget)
            shown = "untrimmed" if budget is None else f"budget {budget}"
            step = f"prefill sweep: {shown}"
            try:
                sample = self._measure(prepared, streaming=True, step=step)
            except RequestRefused as refused:
                tokens = self._counter.count_messages(prepared.messages)
                points.append(SweepPoint(budget, tokens, None, str(refused)))
                self._skipped(step)
                continue
            points.append(SweepPoint(budget, sample.input_tokens, sample.ttft_ms))
        return tuple(points)

    def _single_turn(self, mode: Mode, step: str) -> Sample:
        prompt = with_request_id(self.messages, new_request_id())
        prepared = self._prepare(prompt, True if mode.trimmed else None)
        return self._measure(prepared, streaming=mode.streaming, step=step)

    def _prepare(self, messages: list[BaseMessage], prefix_stable: bool | None) -> _Prepared:
        if prefix_stable is None:
            return _Prepared(messages, 0.0)
        result = self._trimmers[prefix_stable].trim(messages)
        return _Prepared(result.messages, result.elapsed_ms, self.budget, result.over_budget)

    def _unavailable(self, strategy: Strategy) -> str | None:
        """Why ``strategy`` cannot replay with these settings, or ``None``."""
        trimmer = {"hard_limit": self._at_hard_limit, "cost_aware": self._cost_aware}.get(
            strategy.key
        )
        return trimmer if isinstance(trimmer, str) else None

    def _replay_prompt(
        self, strategy: Strategy, messages: list[BaseMessage], session: str
    ) -> _Prepared:
        """Prepares one replayed call's prompt as ``strategy`` does (``session``: its key)."""
        if strategy.key == "hard_limit" and isinstance(self._at_hard_limit, PriorityTrimmer):
            result = self._at_hard_limit.trim(messages)
            return _Prepared(
                result.messages, result.elapsed_ms, self._at_hard_limit.budget, result.over_budget
            )
        if strategy.key == "cost_aware" and isinstance(self._cost_aware, CostAwareTrimmer):
            started = time.perf_counter()
            choice = self._cost_aware.choose(messages, key=session)
            decided_ms = (time.perf_counter() - started) * 1000  # every candidate trim
            result = choice.result
            # Appending may pass the budget (a cut aims at it): the hard limit is its bound.
            limit = self._cost_aware.hard_limit if choice.option == "append" else result.budget
            return _Prepared(result.messages, decided_ms, limit, result.over_budget)
        stable = {"untrimmed": None, "moving_cut": False, "prefix_stable": True}[strategy.key]
        return self._prepare(messages, stable)

    def _skipped(self, step: str) -> None:
        if self._on_call is not None:
            self._on_call(f"{step} (failed)")

    def _check_fits(self, messages: list[BaseMessage]) -> None:
        """Refuses a prompt that cannot fit ``llm.context_window`` with the answer's room."""
        window = self.settings.llm.context_window
        if window is None:
            return
        tokens = self._counter.count_messages(messages)
        room = self.settings.streaming.max_tokens
        if tokens + room > window:
            raise RequestRefused(
                f"the prompt is {tokens:,} tokens by our count, which with max_tokens {room:,} "
                f"exceeds llm.context_window {window:,}, so it was not sent. Fix: trim it (a "
                "lower --budget) or use a model with a larger context window."
            )

    def _measure(self, prepared: _Prepared, *, streaming: bool, step: str) -> Sample:
        self._check_fits(prepared.messages)
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
        # The trimmer's count (the handler's own estimate is cl100k: the bench's trims are not
        # linked to its calls).
        tokens = self._counter.count_messages(prepared.messages)
        self.calls.append(
            CallCount(step, prepared.budget, prepared.over_budget, tokens, record.input_tokens)
        )
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
        """Explains a failed call, the server's message whole (on one line, without the key)."""
        key = self.settings.llm.api_key
        message = " ".join(str(getattr(error, "message", "") or "").split())
        secret = key.get_secret_value() if key is not None else None
        message = redact(message, secret)
        where = f"{self.endpoint} (model {self.settings.llm.model!r})"
        if isinstance(error, openai.APIStatusError):
            hint = _STATUS_HINTS.get(error.status_code, "check the endpoint's logs")
            kind = RequestRefused if error.status_code in _REFUSED_STATUSES else EndpointError
            return kind(f"{where} answered HTTP {error.status_code}: {message} Fix: {hint}.")
        return EndpointError(
            f"{where} could not be reached ({type(error).__name__}). Fix: check that the server "
            "is running and that base_url is its API root, e.g. http://127.0.0.1:8000/v1."
        )


_REFUSED_STATUSES: Final = frozenset({400, 413, 422})
"""Statuses that refuse one request (too long, invalid), not the endpoint as a whole."""
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
    its default latency model, serving ``llm.model`` and counting in that model's tokens, as
    the real server would) runs in-process on a free loopback port for the length of the
    block, and no API key is sent to it.
    """
    if settings.llm.base_url is not None:
        yield settings, None
        return
    from agent_latency.sim import SimulatorConfig, running_simulator

    config = SimulatorConfig(model=settings.llm.model, tokenizer=settings.llm.model)
    with running_simulator(config) as simulator:
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
            :class:`EndpointError` when the endpoint fails as a whole (unreachable, key refused,
            unknown model). A request it refuses is recorded in the report instead.
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
        calls=tuple(bench.calls),
    )
