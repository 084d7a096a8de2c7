"""The benchmark: what trimming and streaming do to the first token, measured on a real endpoint.

Single turn: the four modes {untrimmed, trimmed} × {blocking, streaming} send the same scenario
through the real stack (``build_chat_model``, :class:`PriorityTrimmer`,
:class:`LatencyCallbackHandler`) after one warm-up call, ``runs`` times each, interleaved (each
round starts with a different mode), so drift on the endpoint hits every mode alike. A server with
a prefix cache would answer a repeated prompt from its cache, so every call's prompt starts with a
fresh cache salt: every single-turn call pays its full prefill, as the first call of a new agent
conversation does.

Multi-turn: the scenario is replayed call by call as it grew (one model call before each
assistant message, and one at the end), once per strategy: no trimming, trimming whose cut moves
on every call, and prefix-stable trimming. Each replay is one session (its own cache salt, kept
for all its calls), so the server's prefix cache works as it would for one agent conversation.

TTFT is the handler's time to the first content chunk; for a blocking call it equals the total
(the first text arrives with the whole answer). For trimmed calls the trim's own time is added
to both, as the agent waits for it too.

A request the endpoint refuses (HTTP 400, 413, 422), or one that cannot fit
``llm.context_window`` (checked before sending), fails its mode, replay or sweep point only: the
report records why, and the bench goes on with the others.

Ctrl-C keeps what was measured: :class:`BenchInterrupted` (a ``KeyboardInterrupt``) carries the
report of the calls that finished, marked interrupted, with what was not measured.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

import openai
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable

from agent_latency._redaction import display_url
from agent_latency._validation import is_integer
from agent_latency.bench._calls import CallMeter
from agent_latency.bench._errors import (
    EndpointError,
    RequestRefused,
    explain_api_error,
    explain_unreadable_answer,
)
from agent_latency.bench._measurements import (
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
from agent_latency.bench._scenario import call_points, new_cache_salt, with_cache_salt
from agent_latency.config import Settings, build_chat_model
from agent_latency.trimming import PriorityTrimmer

if TYPE_CHECKING:
    from agent_latency.sim import SimulatorConfig

_DEFAULT_CONTEXT_WINDOW: Final = 8192
"""The context window the hard-limit replay assumes when ``llm.context_window`` is not set: the
smallest in common use."""

# -- running --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """What to measure.

    Attributes:
        runs: Timed calls per single-turn mode; 0 skips the single-turn modes and their
            warm-up (for a run that only wants the replay, ``--quality`` or a workload).
        turns: Calls per multi-turn replay; ``None`` skips the replay.
        budget: The trimmer's budget; ``None`` takes ``prompt.token_budget`` from the settings.
        sweep: Also sweep budgets to fit the prefill cost per token.
    """

    runs: int = 5
    turns: int | None = None
    budget: int | None = None
    sweep: bool = False

    def __post_init__(self) -> None:
        if not is_integer(self.runs) or self.runs < 0:
            raise ValueError(f"--runs must be 0 or a positive integer, got {self.runs!r}.")
        for option, value in (("turns", self.turns), ("budget", self.budget)):
            if value is not None and (not is_integer(value) or value < 1):
                raise ValueError(f"--{option} must be a positive integer, got {value!r}.")

    def calls(self) -> int:
        """How many model calls these options make (the warm-up included)."""
        calls = (1 + self.runs * len(MODES)) if self.runs else 0
        calls += (self.turns or 0) * len(STRATEGIES)
        return calls + (len(SWEEP_FRACTIONS) + 1 if self.sweep else 0)


ProgressCallback = Callable[[str], None]
"""Called after each model call with a short description of that call."""


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped :func:`run_bench`; still a ``KeyboardInterrupt`` to whoever ignores it.

    Attributes:
        report: What was measured until then: ``report.interrupted`` is true and
            ``report.missing`` says what was not measured.
    """

    def __init__(self, report: BenchReport) -> None:
        super().__init__("the bench was interrupted")
        self.report = report


class BenchFailed(EndpointError):
    """The endpoint failed a call once :func:`run_bench` had started (a 500 after answers, a
    connection lost): the :class:`EndpointError`, holding what was measured until then.

    Attributes:
        report: As :class:`BenchInterrupted`'s: ``report.interrupted`` is true and
            ``report.missing`` says what was not measured.
    """

    def __init__(self, error: EndpointError, report: BenchReport) -> None:
        super().__init__(str(error))
        self.report = report


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
        tools: Tool definitions (OpenAI tool dicts) sent with every call and counted against
            the budget, as an agent's are.
        on_call: Called after each model call.
        simulator: The endpoint's latency model, when it is a simulator (recorded in the report).
    """

    def __init__(
        self,
        settings: Settings,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
        on_call: ProgressCallback | None = None,
        simulator: SimulatorConfig | None = None,
    ) -> None:
        if settings.llm.base_url is None:
            raise ValueError("Bench: settings.llm.base_url must be set; use open_endpoint().")
        if budget is not None:
            settings = replace(settings, prompt=replace(settings.prompt, token_budget=budget))
        self.settings = settings
        self.messages = list(messages)
        self.tools = list(tools)
        self.budget = settings.prompt.token_budget
        self._on_call = on_call
        self.simulator = simulator
        # What was measured, recorded as it comes: Ctrl-C keeps it (see report()).
        self.calls: list[CallCount] = []
        self._samples: dict[Mode, list[Sample]] = {mode: [] for mode in MODES}
        self._errors: dict[Mode, str] = {}
        self._replays: list[StrategyResult] = []
        self._swept: list[SweepPoint] = []
        self._meter = CallMeter(chunk_timeout_ms=settings.streaming.chunk_timeout_ms)
        self._models: dict[bool, Runnable[Any, Any]] = {}
        for streaming in (False, True):
            # No retries: a retried call would be timed as one slow call; a failure must show.
            model = build_chat_model(
                settings, streaming=streaming, callbacks=self._meter.callbacks, max_retries=0
            )
            self._models[streaming] = (
                model.bind_tools([dict(tool) for tool in self.tools]) if self.tools else model
            )
        # The bench counts with the counter the trimmer chooses from the settings, shared.
        stable = PriorityTrimmer.from_settings(settings, prefix_stable=True, tools=self.tools)
        self._counter = stable.token_counter
        self._trimmers = {
            True: stable,
            False: PriorityTrimmer.from_settings(
                settings, prefix_stable=False, token_counter=self._counter, tools=self.tools
            ),
        }
        # The replay's hard-limit strategy needs room for the budget in the context window;
        # without it, it fails alone (its error names the numbers).
        self._at_hard_limit: PriorityTrimmer | str
        prompt = settings.prompt
        window = settings.llm.context_window or max(
            _DEFAULT_CONTEXT_WINDOW, prompt.token_budget + prompt.reserve_for_output
        )
        hard_limit = window - prompt.reserve_for_output
        if hard_limit < prompt.token_budget:
            self._at_hard_limit = (
                f"context_window - reserve_for_output = {hard_limit} is below the budget "
                f"({prompt.token_budget}); lower the budget or the reserve."
            )
        else:
            self._at_hard_limit = PriorityTrimmer.from_settings(
                replace(settings, prompt=replace(prompt, token_budget=hard_limit)),
                prefix_stable=False,
                token_counter=self._counter,
                tools=self.tools,
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
            self._called("warm-up")

    def run_modes(self, runs: int) -> None:
        """Runs every mode ``runs`` times, interleaved, recording each sample as it comes.

        A mode whose request is refused (see :class:`RequestRefused`) keeps the error and is not
        sent again; the other modes go on.
        """
        samples, errors = self._samples, self._errors
        for run in range(runs):
            shift = run % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                step = f"run {run + 1}/{runs}: {mode.label}"
                if mode in errors:
                    self._skipped(step)
                    continue
                try:
                    samples[mode].append(self._single_turn(mode, step))
                    self._called(step)
                except RequestRefused as refused:
                    errors[mode] = str(refused)
                    self._skipped(step)

    def run_turns(self, turns: int) -> None:
        """Replays the last ``turns`` model calls of the conversation once per strategy,
        recording each replay when it ends.

        Raises:
            ValueError: When the conversation holds fewer model calls than ``turns``.
        """
        prefixes = self.replay_prefixes(turns)
        for strategy in STRATEGIES:
            salt = new_cache_salt()  # one session: the id stays for all its calls
            samples: list[Sample] = []
            error = self._unavailable(strategy)
            for turn, end in enumerate(prefixes, start=1):
                step = f"{strategy.label}: call {turn}/{turns}"
                if error is not None:
                    self._skipped(step)
                    continue
                conversation = with_cache_salt(self.messages[:end], salt)
                prepared = self._replay_prompt(strategy, conversation)
                try:
                    samples.append(self._measure(prepared, streaming=True, step=step))
                    self._called(step)
                except RequestRefused as refused:
                    error = f"call {turn} of {turns}: {refused}"
                    self._skipped(step)
            self._replays.append(StrategyResult(strategy, tuple(samples), error))

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

    def sweep(self) -> None:
        """Measures the streamed TTFT for budgets from a fifth of the prompt up to all of it,
        recording each point as it comes."""
        points = self._swept
        for budget in self._sweep_budgets():
            prompt = with_cache_salt(self.messages, new_cache_salt())
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
                    tools=self.tools,
                )
                result = trimmer.trim(prompt)
                prepared = _Prepared(result.messages, result.elapsed_ms, budget, result.over_budget)
            shown = "untrimmed" if budget is None else f"budget {budget}"
            step = f"prefill sweep: {shown}"
            try:
                sample = self._measure(prepared, streaming=True, step=step)
            except RequestRefused as refused:
                tokens = self._count(prepared.messages)
                points.append(SweepPoint(budget, tokens, None, str(refused)))
                self._skipped(step)
                continue
            points.append(SweepPoint(budget, sample.input_tokens, sample.ttft_ms))
            self._called(step)

    def report(self, options: BenchOptions, *, interrupted: bool = False) -> BenchReport:
        """What was measured so far, as a report.

        Args:
            options: What the run was asked to measure.
            interrupted: Ctrl-C stopped the run: the report says so and what is missing.
        """
        modes = tuple(
            ModeResult(mode, tuple(self._samples[mode]), self._errors.get(mode)) for mode in MODES
        )
        return BenchReport(
            endpoint=self.endpoint,
            model=self.settings.llm.model,
            simulator=self.simulator,
            runs=options.runs,
            budget=self.budget,
            modes=modes if options.runs else (),
            turns=tuple(self._replays),
            sweep=tuple(self._swept),
            calls=tuple(self.calls),
            interrupted=interrupted,
            missing=self._missing(options, modes) if interrupted else (),
        )

    def _missing(self, options: BenchOptions, modes: tuple[ModeResult, ...]) -> tuple[str, ...]:
        """What ``options`` asked for that was neither measured nor failed."""
        runs = options.runs
        missing = [
            f"{runs - len(result.samples)} of {runs} runs of {result.mode.label}"
            for result in modes
            if runs and result.error is None and len(result.samples) < runs
        ]
        if options.turns is not None:
            replayed = {result.strategy for result in self._replays}
            missing += [f"the replay of {s.label}" for s in STRATEGIES if s not in replayed]
        if options.sweep:
            planned, swept = len(self._sweep_budgets()), len(self._swept)
            if not swept:
                missing.append("the prefill sweep")
            elif swept < planned:
                missing.append(f"{planned - swept} of {planned} points of the prefill sweep")
        return tuple(missing)

    def _sweep_budgets(self) -> list[int | None]:
        """The sweep's budgets: fractions of the untrimmed prompt, then the untrimmed prompt."""
        return [*sweep_budgets(self._count(self.messages)), None]

    def _single_turn(self, mode: Mode, step: str) -> Sample:
        prompt = with_cache_salt(self.messages, new_cache_salt())
        prepared = self._prepare(prompt, True if mode.trimmed else None)
        return self._measure(prepared, streaming=mode.streaming, step=step)

    def _prepare(self, messages: list[BaseMessage], prefix_stable: bool | None) -> _Prepared:
        if prefix_stable is None:
            return _Prepared(messages, 0.0)
        result = self._trimmers[prefix_stable].trim(messages)
        return _Prepared(result.messages, result.elapsed_ms, self.budget, result.over_budget)

    def _unavailable(self, strategy: Strategy) -> str | None:
        """Why ``strategy`` cannot replay with these settings, or ``None``."""
        if strategy.key == "hard_limit" and isinstance(self._at_hard_limit, str):
            return self._at_hard_limit
        return None

    def _replay_prompt(self, strategy: Strategy, messages: list[BaseMessage]) -> _Prepared:
        """Prepares one replayed call's prompt as ``strategy`` does."""
        if strategy.key == "hard_limit" and isinstance(self._at_hard_limit, PriorityTrimmer):
            result = self._at_hard_limit.trim(messages)
            return _Prepared(result.messages, result.elapsed_ms, result.budget, result.over_budget)
        stable = {"untrimmed": None, "moving_cut": False, "prefix_stable": True}[strategy.key]
        return self._prepare(messages, stable)

    def _count(self, messages: list[BaseMessage]) -> int:
        """The prompt tokens of a request of ``messages`` and the bench's tools."""
        return self._counter.count_request(messages, self.tools)

    def _called(self, step: str) -> None:
        """Tells ``on_call`` a call ended: once its result is recorded, so that Ctrl-C right
        after the progress shows it keeps that result."""
        if self._on_call is not None:
            self._on_call(step)

    def _skipped(self, step: str) -> None:
        self._called(f"{step} (failed)")

    def _check_fits(self, messages: list[BaseMessage]) -> None:
        """Refuses a prompt that cannot fit ``llm.context_window`` with the answer's room."""
        window = self.settings.llm.context_window
        if window is None:
            return
        tokens = self._count(messages)
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
        try:
            call = (
                self._meter.stream(model, prepared.messages)
                if streaming
                else self._meter.invoke(model, prepared.messages)
            )
        except openai.APIError as exc:
            raise explain_api_error(exc, self.settings) from None
        except ValueError as exc:  # LangChain's: no chunks, or a body of no chat completion
            raise explain_unreadable_answer(exc, self.settings) from None
        # The trimmer's count (the handler's own estimate is cl100k: the bench's trims are not
        # linked to its calls).
        tokens = self._count(prepared.messages)
        usage = call.usage
        self.calls.append(
            CallCount(
                step,
                prepared.budget,
                prepared.over_budget,
                tokens,
                usage.prompt_tokens,
                usage.cached_tokens,
            )
        )
        return Sample(
            ttft_ms=call.ttft_ms + prepared.trim_ms,
            total_ms=call.total_ms + prepared.trim_ms,
            input_tokens=tokens,
            cached_tokens=usage.cached_tokens,
            output_tokens=usage.completion_tokens,
            server_input_tokens=usage.prompt_tokens,
        )


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
    options: BenchOptions,
    *,
    simulator: SimulatorConfig | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
    on_call: ProgressCallback | None = None,
    stopped: Callable[[], bool] | None = None,
) -> BenchReport:
    """Measures what ``options`` ask for on the endpoint of ``settings``; returns what it measured.

    Args:
        settings: Settings with ``llm.base_url`` set (see :func:`open_endpoint`).
        messages: The conversation to benchmark.
        options: What to measure.
        tools: Tool definitions sent with every call and counted (see :class:`Bench`).
        simulator: The endpoint's latency model, when it is a simulator (see
            :func:`open_endpoint`); recorded in the report.
        on_call: Called after each model call.
        stopped: Whether a stopping signal was taken (the command's Ctrl-C handler): an error
            raised after one is the signal's doing and stops the bench as Ctrl-C does (its
            ``KeyboardInterrupt`` can land inside a call, in an import half done, and the call
            then fails otherwise).

    Raises:
        ValueError: For options the conversation cannot serve (checked before any call).
        BenchFailed: An :class:`EndpointError`, when the endpoint fails as a whole (unreachable,
            key refused, unknown model) or falls over during the run; its report holds the
            calls that finished. A request it refuses is recorded in the report instead.
        BenchInterrupted: On Ctrl-C once the bench has started: its report holds the calls
            that finished.
    """
    bench = Bench(
        settings,
        messages,
        budget=options.budget,
        tools=tools,
        on_call=on_call,
        simulator=simulator,
    )
    if options.turns is not None:
        bench.replay_prefixes(options.turns)  # fail before spending any time
    try:
        if options.runs:
            bench.warm_up()
            bench.run_modes(options.runs)
        if options.turns is not None:
            bench.run_turns(options.turns)
        if options.sweep:
            bench.sweep()
        # Inside: a signal while the report is made, after the last call's progress line, still
        # keeps the calls (it was taken for one before any call).
        return bench.report(options)
    except KeyboardInterrupt:
        raise BenchInterrupted(bench.report(options, interrupted=True)) from None
    except Exception as error:
        if stopped is not None and stopped():
            raise BenchInterrupted(bench.report(options, interrupted=True)) from None
        if isinstance(error, EndpointError):
            raise BenchFailed(error, bench.report(options, interrupted=True)) from None
        raise
