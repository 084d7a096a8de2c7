"""The mixed workload (issue 12): interleaved conversations, some resumed after an idle gap, each
asking about facts it stated earlier.

Each conversation is the scenario with facts planted in its first half and question rounds in
its second (:func:`~agent_latency.bench._facts.plant_facts`), replayed call by call as it grew
on the timeline of :mod:`~agent_latency.bench._mixed`. Every contender (a strategy at one knob
point, :mod:`~agent_latency.bench._contenders`) replays the same schedule on the embedded
simulator (or an endpoint: ``base_url``) through the real ``ChatOpenAI``, streaming, with the
project's callback handler measuring the first token.

The idle gap is emulated, not waited for: from a turn after an idle gap on, the prompt sent starts
with a new *epoch* marker, so the server's prefix cache holds nothing of it, exactly as if it had
expired the conversation. Each contender's prompts carry its own marker too, so none is served from
another's cache.

On the simulator without a profile, its clock is scaled by :data:`CLOCK_SCALE` (half its default
overhead and prefill costs; 4-token answers at 2,000 tokens/s); a server profile runs at its own
speed, scaled down only where a cold prefill of the budget would take over a second
(:func:`profile_simulator`). The client's own time per call (LangChain and the OpenAI SDK
converting the request, a few ms per thousand tokens) is not scaled, so it weighs more than it
would against a real endpoint.

Before the contenders, one untimed call sends the longest prompt, so that what a server does on
its first request (the simulator loads its tokenizer) falls on no strategy's time. The user's
wait of a call is its time to first token, plus the time its strategy took to prepare the prompt
(a trim; for ``SummarizationMiddleware`` its summary call to the same server). Retention is the
share of the facts the calls' questions need that are still in what was sent; with ``answers``,
after a contender's timed calls, each fact question's prompt as sent, less the bench's own
marker, is answered greedily (temperature 0) and scored (:func:`_score_answers`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import openai
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from agent_latency._chat_format import content_key
from agent_latency._redaction import display_url
from agent_latency.bench._calls import CallMeter, MeasuredCall
from agent_latency.bench._contenders import (
    STRATEGIES,
    SUMMARY_MAX_TOKENS,
    Contender,
    Kit,
    Strategy,
    contenders,
)
from agent_latency.bench._errors import (
    RequestRefused,
    explain_api_error,
    explain_unreadable_answer,
)
from agent_latency.bench._facts import PlantedConversation, answer_gives, fact_kept, plant_facts
from agent_latency.bench._mixed import MixedWorkload, Turn, schedule
from agent_latency.bench._scenario import (
    call_points,
    load_scenario,
    with_cache_salt,
    without_cache_salt,
)
from agent_latency.bench._workload_report import (
    StrategyCall,
    StrategyRun,
    WhereItRan,
    WorkloadReport,
)
from agent_latency.config import Settings, build_chat_model
from agent_latency.tokens import TokenCounter

if TYPE_CHECKING:
    from agent_latency.sim import SimulatorConfig

CLOCK_SCALE: Final = 0.5
"""The default simulator runs at this many times its default overhead and prefill costs."""
ANSWER_TOKENS: Final = 32
"""The output limit of a fact question's answer, with answers asked for."""
_TIMED_ANSWER_TOKENS: Final = 4
_COLD_PREFILL_LIMIT_MS: Final = 1000.0


class WorkloadProgress(NamedTuple):
    """One call done: how many of how many, and what it was."""

    done: int
    total: int
    step: str


def workload_simulator(workload: MixedWorkload | None = None) -> SimulatorConfig:
    """The simulator of the mixed workload: default latency model, clock scaled, no expiry, the
    workload's context window (``MixedWorkload()``'s by default)."""
    from agent_latency.sim import SimulatorConfig

    defaults = SimulatorConfig()
    return _fast_answers(_scaled(defaults, CLOCK_SCALE), workload or MixedWorkload())


def profile_simulator(name: str, workload: MixedWorkload) -> tuple[SimulatorConfig, float]:
    """The simulator of a server profile for the workload, and the clock scale it runs at.

    The profile's latency and prefix-cache rules, with short fast answers; its clock is scaled
    down only where a cold prefill of the workload's budget would take over a second (so a
    CPU profile does not take hours), by as much as brings it to a second.

    Raises:
        ValueError: For an unknown profile, naming the known ones.
    """
    from agent_latency.sim import server_profile

    config = server_profile(name).config
    cold = config.ttft_ms(workload.budget, workload.budget)
    scale = min(1.0, _COLD_PREFILL_LIMIT_MS / cold) if cold > 0 else 1.0
    return _fast_answers(_scaled(config, scale), workload), scale


def _scaled(config: SimulatorConfig, scale: float) -> SimulatorConfig:
    return replace(
        config,
        overhead_ms=config.overhead_ms * scale,
        prefill_ms_per_token=config.prefill_ms_per_token * scale,
        attention_ms_per_1k_context=config.attention_ms_per_1k_context * scale,
    )


def _fast_answers(config: SimulatorConfig, workload: MixedWorkload) -> SimulatorConfig:
    # Short answers, whatever max_tokens a call reserves; the workload's context window, so that
    # a request past the hard limit is refused where the profile's server refuses it.
    return replace(
        config,
        decode_tokens_per_s=2000.0,
        answer_tokens=_TIMED_ANSWER_TOKENS,
        context_window=workload.context_window,
    )


def _invalid(messages: Sequence[BaseMessage]) -> bool:
    """Whether an OpenAI endpoint would reject the sequence: unanswered calls, orphan results."""
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in open_calls:
                return True
            open_calls.discard(message.tool_call_id)
            continue
        if open_calls:
            return True
        if isinstance(message, AIMessage):
            open_calls = {call["id"] for call in message.tool_calls if call["id"] is not None}
    return bool(open_calls)


@dataclass(frozen=True)
class _Channel:
    settings: Settings
    simulator: SimulatorConfig | None
    clock_scale: float | None


def _simulator_tokenizer(settings: Settings) -> str:
    tokenizer = settings.llm.tokenizer
    return tokenizer if tokenizer not in (None, "server") else settings.llm.model


@contextlib.contextmanager
def _endpoint(
    settings: Settings,
    workload: MixedWorkload,
    simulator: SimulatorConfig | None,
    profile: str | None,
    base_url: str | None,
) -> Iterator[_Channel]:
    """Yields the channel to run on: the endpoint, or a simulator running for the block."""
    if base_url is not None:
        yield _Channel(replace(settings, llm=replace(settings.llm, base_url=base_url)), None, None)
        return
    from agent_latency.sim import running_simulator

    scale: float | None = CLOCK_SCALE
    if profile is not None:
        simulator, scale = profile_simulator(profile, workload)
    elif simulator is not None:
        scale = None  # the caller's own
    simulator = replace(
        simulator or workload_simulator(workload),
        model=settings.llm.model,
        tokenizer=_simulator_tokenizer(settings),
    )
    with running_simulator(simulator) as server:
        llm = replace(settings.llm, base_url=server.base_url, api_key=None)
        yield _Channel(replace(settings, llm=llm), simulator, scale)


def _latency(simulator: SimulatorConfig, scale: float | None) -> dict[str, Any]:
    return {
        "overhead_ms": simulator.overhead_ms,
        "prefill_ms_per_token": simulator.prefill_ms_per_token,
        "attention_ms_per_1k_context": simulator.attention_ms_per_1k_context,
        "cache_block_tokens": simulator.cache_block_tokens,
        "cache_min_tokens": simulator.cache_min_tokens,
        "cache_slots": simulator.cache_slots,
        "cache_tokens": simulator.cache_tokens,
        "cache_lifetime_s": simulator.cache_lifetime_s,
        "tokenizer": simulator.prompt_tokenizer,
        "clock_scale": scale,
    }


def _warm_up(meter: CallMeter, model: Any, messages: list[BaseMessage], settings: Settings) -> None:
    """One untimed call of the longest prompt before the contenders: the server loads what it
    loads on a first request (a tokenizer, the messages' tokens) on nobody's time.

    A refused warm-up (a prompt too long for the server) is left for the contenders to record.
    """
    try:
        meter.stream(model, with_cache_salt(messages, "warm-up"))
    except openai.APIError as exc:
        _refusal(exc, settings)
    except ValueError as exc:  # LangChain's: no chunks, or a body of no chat completion
        raise explain_unreadable_answer(exc, settings) from None


def _refusal(exc: openai.APIError, settings: Settings) -> RequestRefused:
    """Returns the server's refusal of a request (HTTP 400, 413, 422), to be recorded; any other
    failure is raised, explained: the endpoint fails as a whole."""
    error = explain_api_error(exc, settings)
    if not isinstance(error, RequestRefused):
        raise error from None
    return error


def _score_answers(
    calls: Sequence[StrategyCall],
    prompts: Sequence[Sequence[BaseMessage] | None],
    ask: Callable[[list[BaseMessage]], str | None],
    asked: dict[tuple[Any, ...], str | None],
) -> list[StrategyCall]:
    """Returns ``calls`` with each fact question's answer and whether it gave the fact.

    ``prompts[i]`` is what call ``i`` sent less the bench's cache salt (``None`` where it
    asked no fact question or was refused): the marker is the bench's, not the user's, and a few
    different tokens at the start of a prompt can turn a small model's greedy answer. A prompt
    asked before, by this strategy or another, is not asked again (``asked``, keyed by what goes
    on the wire), so strategies that send the same are scored the same. ``ask`` returns ``None``
    when the server refuses the prompt: a wrong answer.
    """
    scored = []
    for call, prompt in zip(calls, prompts, strict=True):
        if prompt is None or call.fact is None:
            scored.append(call)
            continue
        key = tuple(content_key(message) for message in prompt)
        if key not in asked:
            asked[key] = ask(list(prompt))
        answer = asked[key]
        answered = answer is not None and answer_gives(call.fact, answer)
        scored.append(replace(call, answered=answered, answer=answer))
    return scored


def _label(knob: Any) -> str:
    return ",".join(f"{name}={value}" for name, value in knob.items()) or "-"


def run_mixed_workload(
    workload: MixedWorkload | None = None,
    *,
    settings: Settings | None = None,
    messages: Sequence[BaseMessage] | None = None,
    simulator: SimulatorConfig | None = None,
    profile: str | None = None,
    base_url: str | None = None,
    only: Sequence[str] | None = None,
    frontier: bool = False,
    answers: bool = False,
    on_call: Callable[[WorkloadProgress], None] | None = None,
) -> WorkloadReport:
    """Runs the mixed workload once per contender, on the embedded simulator or an endpoint.

    On an endpoint (``base_url``), ``settings.llm`` says the model, key and tokenizer; the trimmers
    count with that tokenizer, and so does the simulator (the model's own tokens). A call whose
    stream reports no usage (llama-cpp-python reports none when streaming) is counted with it too
    (``prompt_tokens_counted``), its whole prompt taken as prefilled. A request the server refuses
    (HTTP 400, 413, 422: a context overflow, an invalid sequence) is recorded with the server's
    message and the run goes on.

    Args:
        workload: Its shape. Default: :class:`MixedWorkload`.
        settings: The model, generation and trimming options and, with ``base_url``, the
            channel. Default: the defaults.
        messages: The conversation each one replays, before its facts are planted. Default: the
            shipped scenario.
        simulator: The simulator. Default: :func:`workload_simulator`. Not with ``base_url`` or
            ``profile``.
        profile: Run the simulator as this server profile (see
            :func:`agent_latency.sim.server_profile`).
        base_url: Run against this OpenAI-compatible endpoint instead of the simulator.
        only: Run only these strategies (by name). Default: all.
        frontier: Run every point of every strategy's knob sweep, not only its default.
        answers: Answer each fact question greedily and score it (a real model's endpoint), after
            each contender's timed calls (:func:`_score_answers`).
        on_call: Called after each model call.

    Raises:
        ValueError: For an unknown strategy or profile, or more than one of ``simulator``,
            ``profile`` and ``base_url``; an :class:`~agent_latency.bench._errors.EndpointError`
            when the endpoint fails as a whole.
    """
    _check_choices(simulator, profile, base_url, only)
    workload = workload or MixedWorkload()
    plan = _plan_calls(workload, messages)
    with _endpoint(settings or Settings(), workload, simulator, profile, base_url) as channel:
        rig = _Rig(channel, workload, greedy=answers)
        kit = Kit(
            workload=workload,
            settings=channel.settings,
            counter=rig.counter,
            summary_model=rig.model(SUMMARY_MAX_TOKENS),
        )
        chosen = [
            c for c in contenders(kit, frontier=frontier) if only is None or c.strategy in only
        ]
        _warm_up(rig.meter, rig.timed, plan.conversations[0][: plan.points[-1]], channel.settings)
        progress = _Progress(on_call, total=len(chosen) * len(plan.turns))
        runs = [
            _run_contender(rig, plan, contender, index, answers=answers, progress=progress)
            for index, contender in enumerate(chosen)
        ]
    return WorkloadReport(
        workload=workload,
        calls_per_conversation=len(plan.points),
        where=_where_it_ran(channel, profile, base_url),
        strategies=tuple(run for run in runs if run.default),
        frontier=tuple(runs) if frontier else (),
        answers=answers,
    )


def _check_choices(
    simulator: SimulatorConfig | None,
    profile: str | None,
    base_url: str | None,
    only: Sequence[str] | None,
) -> None:
    """Refuses more than one place to run on, and unknown strategies, before any call."""
    if sum(option is not None for option in (simulator, profile, base_url)) > 1:
        raise ValueError("run_mixed_workload: pass one of simulator, profile or base_url.")
    unknown = sorted(set(only or ()) - set(STRATEGIES))
    if unknown:
        raise ValueError(
            f"run_mixed_workload: unknown strategies {unknown}; choose from {list(STRATEGIES)}."
        )


@dataclass(frozen=True)
class _CallPlan:
    """The calls every contender replays, in order.

    Attributes:
        workload: The workload's shape.
        planted: Each conversation with its facts planted (and what each question needs).
        conversations: Each conversation's messages, marked with its request id.
        points: The prompt lengths replayed of each conversation.
        turns: The calls, interleaved by their virtual time.
        epochs: Per turn: how many idle gaps its conversation has been through, itself
            included (a new epoch's prompt shares no prefix with the one before).
    """

    workload: MixedWorkload
    planted: list[PlantedConversation]
    conversations: list[list[BaseMessage]]
    points: list[int]
    turns: list[Turn]
    epochs: list[int]


def _plan_calls(workload: MixedWorkload, messages: Sequence[BaseMessage] | None) -> _CallPlan:
    """Plants the facts in each conversation and schedules the calls."""
    scenario = list(messages) if messages is not None else load_scenario()
    planted = [plant_facts(scenario, index) for index in range(workload.conversations)]
    conversations = [
        with_cache_salt(list(p.messages), f"conversation {index}")
        for index, p in enumerate(planted)
    ]
    every_point = call_points(conversations[0])
    points = every_point[-workload.calls :] if workload.calls else every_point
    turns = schedule(workload, points)
    gaps = [0] * workload.conversations
    epochs = []
    for turn in turns:
        gaps[turn.conversation] += turn.idle
        epochs.append(gaps[turn.conversation])
    return _CallPlan(workload, planted, conversations, points, turns, epochs)


class _Rig:
    """What every contender's calls go through: the channel, the token counter, the meter and
    the models, and the answers to fact questions asked so far (by what goes on the wire).

    On the simulator each call reserves the answer's room, as a user's settings do
    (``streaming.max_tokens = prompt.reserve_for_output``), and is answered short; an endpoint
    really writes what it is allowed to. With ``greedy``, every answer is greedy
    (temperature 0).
    """

    def __init__(self, channel: _Channel, workload: MixedWorkload, *, greedy: bool) -> None:
        self.channel = channel
        self.counter = _counter(channel)
        self.meter = CallMeter(chunk_timeout_ms=channel.settings.streaming.chunk_timeout_ms)
        self._greedy: dict[str, Any] = {"temperature": 0.0} if greedy else {}
        on_sim = channel.simulator is not None
        self.timed = self.model(
            workload.reserve_for_output if on_sim else _TIMED_ANSWER_TOKENS, measured=True
        )
        self._answering = self.model(
            workload.reserve_for_output if on_sim else ANSWER_TOKENS, measured=True
        )
        self.asked: dict[tuple[Any, ...], str | None] = {}

    def model(self, max_tokens: int, *, measured: bool = False) -> Any:
        """A chat model of the channel; ``measured``: streaming, greedy if asked, metered."""
        options: dict[str, Any] = (
            {"streaming": True, "callbacks": self.meter.callbacks, **self._greedy}
            if measured
            else {}
        )
        return build_chat_model(
            self.channel.settings, max_retries=0, max_tokens=max_tokens, **options
        )

    def ask(self, prompt: list[BaseMessage]) -> str | None:
        """The answer to a fact question; ``None`` when the server refuses the prompt."""
        try:
            return self.meter.stream(self._answering, prompt).text
        except openai.APIError as exc:
            _refusal(exc, self.channel.settings)
            return None


def _counter(channel: _Channel) -> TokenCounter:
    """Counts as the simulator counts, or with the endpoint's model and tokenizer."""
    if channel.simulator is not None:
        return TokenCounter.for_model(channel.simulator.prompt_tokenizer)
    llm = channel.settings.llm
    return TokenCounter.for_model(
        llm.model,
        tokenizer=llm.tokenizer,
        base_url=llm.base_url,
        api_key=llm.api_key.get_secret_value() if llm.api_key is not None else None,
        timeout_s=llm.timeout_seconds,
    )


class _Progress:
    """Counts the calls of the whole run and reports each to ``on_call``, if given."""

    def __init__(self, on_call: Callable[[WorkloadProgress], None] | None, total: int) -> None:
        self._on_call = on_call
        self._total = total
        self._done = 0

    def __call__(self, step: str) -> None:
        self._done += 1
        if self._on_call is not None:
            self._on_call(WorkloadProgress(self._done, self._total, step))


def _run_contender(
    rig: _Rig,
    plan: _CallPlan,
    contender: Contender,
    index: int,
    *,
    answers: bool,
    progress: _Progress,
) -> StrategyRun:
    """Replays every call of ``plan`` with one contender, then scores its answers if asked."""
    strategy = contender.build()
    calls = []
    questions = []
    for turn, epoch in zip(plan.turns, plan.epochs, strict=True):
        marker = f"{contender.strategy} {index} {turn.conversation} epoch {epoch}"
        call, question = _replay(rig, plan, strategy, turn, marker)
        calls.append(call)
        questions.append(question)
        progress(_step(contender, turn, call))
    if answers:
        calls = _score_answers(calls, questions, rig.ask, rig.asked)
    return StrategyRun(
        contender.strategy,
        contender.knob,
        contender.default,
        tuple(calls),
        plan.workload.hard_limit,
        answers,
    )


def _replay(
    rig: _Rig, plan: _CallPlan, strategy: Strategy, turn: Turn, marker: str
) -> tuple[StrategyCall, list[BaseMessage] | None]:
    """Prepares one call with a contender's strategy and sends it.

    Returns:
        The call's record, and the prompt it sent less ``marker`` when it asked a fact question
        and was answered (``None`` otherwise), to answer again with answers asked for.
    """
    # Marked before the strategy sees it, so that its budget covers the marker.
    marked = with_cache_salt(plan.conversations[turn.conversation][: turn.end], marker)
    started = time.perf_counter()
    sent = strategy(turn.conversation, marked, turn.at).messages
    prepare_ms = (time.perf_counter() - started) * 1000
    fact = plan.planted[turn.conversation].needs.get(turn.end)
    record = StrategyCall(
        conversation=turn.conversation,
        end=turn.end,
        idle=turn.idle,
        wait_ms=None,
        ttft_ms=None,
        tokens=rig.counter.count_messages(sent),
        server_tokens=None,
        cached_tokens=None,
        invalid=_invalid(sent),
        refused=None,
        needed=int(fact is not None),
        kept=int(fact is not None and fact_kept(fact, sent)),
        fact=fact,
    )
    try:
        call = rig.meter.stream(rig.timed, sent)
    except openai.APIError as exc:
        refusal = _refusal(exc, rig.channel.settings)
        return replace(record, refused=refusal.server_message, kept=0), None
    return _answered(record, call, prepare_ms), without_cache_salt(sent, marker) if fact else None


def _answered(record: StrategyCall, call: MeasuredCall, prepare_ms: float) -> StrategyCall:
    """``record`` with what its call measured: the wait is the prompt's preparation and TTFT."""
    return replace(
        record,
        wait_ms=call.ttft_ms + prepare_ms,
        ttft_ms=call.ttft_ms,
        server_tokens=call.usage.prompt_tokens,
        cached_tokens=call.usage.cached_tokens,
        server_prefill_ms=call.server_prefill_ms,
        ttft_remainder_ms=call.ttft_remainder_ms,
    )


def _step(contender: Contender, turn: Turn, call: StrategyCall) -> str:
    """What a call was, for the progress line."""
    idle = " after an idle gap" if turn.idle else ""
    result = (
        "refused"
        if call.wait_ms is None
        else f"wait {call.wait_ms:.0f} ms, {call.sent_tokens} tokens"
    )
    return (
        f"{contender.strategy} {_label(contender.knob)}: conversation {turn.conversation}, "
        f"{turn.end} messages{idle}: {result}"
    )


def _where_it_ran(channel: _Channel, profile: str | None, base_url: str | None) -> WhereItRan:
    """The endpoint or simulator the workload ran on, for the report."""
    simulator = channel.simulator
    return WhereItRan(
        server=None if simulator is not None else display_url(base_url or ""),
        model=channel.settings.llm.model,
        profile=profile,
        latency=None if simulator is None else _latency(simulator, channel.clock_scale),
    )
