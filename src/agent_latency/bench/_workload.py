"""The mixed workload (issue 12): interleaved conversations, some resumed after an idle gap.

Each conversation replays the scenario call by call as it grew (see
:func:`~agent_latency.bench._scenario.call_points`), with its own id at the start of the system
prompt. The conversations' calls are interleaved by a virtual clock: turns of one conversation
come ``turn_gap_s`` apart, and every ``idle_every``-th turn comes ``idle_gap_s`` later, longer
than ``cache_lifetime_s``. Every strategy replays the same schedule on the embedded simulator
(or an endpoint: ``base_url``) through the real ``ChatOpenAI``, streaming.

The idle gap is emulated, not waited for: from a turn after an idle gap on, the prompt sent
starts with a new *epoch* marker, so the simulator's prefix cache holds nothing of it, exactly as
if the server had expired the conversation; the cost-aware trimmer is told the virtual time. Each
strategy's prompts carry its own marker too, so no strategy is served from another's cache.

The simulator's clock is scaled by :data:`CLOCK_SCALE` (half its default overhead and prefill
costs; 4-token answers at 2,000 tokens/s) so that the whole workload (3 conversations × 16 calls
× 10 strategies) runs in about three minutes. The client's own time per call (LangChain and the
OpenAI SDK converting the request, a few ms per thousand tokens) is not scaled, so it weighs
more than it would against a real endpoint.

The user's wait of a call is its time to first token, plus the time its strategy took to prepare
the prompt (a trim; for ``SummarizationMiddleware`` its summary call to the same simulator).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, cast

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_openai import ChatOpenAI

from agent_latency._latency_model import LatencyModel
from agent_latency._redaction import display_url
from agent_latency.bench._contenders import STRATEGIES, contenders
from agent_latency.bench._results import percentile
from agent_latency.bench._scenario import call_points, load_scenario, with_request_id
from agent_latency.config import Settings, build_chat_model
from agent_latency.doctor._latency import seed_latency_model
from agent_latency.doctor._probes import Endpoint
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming._result import TrimResult

CLOCK_SCALE: Final = 0.5
"""The simulator runs this many times its default overhead and prefill costs."""

_DEFAULTS: Final = SimulatorConfig()


def workload_simulator() -> SimulatorConfig:
    """The simulator of the mixed workload: default latency model, clock scaled, no expiry."""
    return SimulatorConfig(
        overhead_ms=_DEFAULTS.overhead_ms * CLOCK_SCALE,
        prefill_ms_per_token=_DEFAULTS.prefill_ms_per_token * CLOCK_SCALE,
        attention_ms_per_1k_context=_DEFAULTS.attention_ms_per_1k_context * CLOCK_SCALE,
        decode_tokens_per_s=2000.0,
        answer_tokens=4,
    )


@dataclass(frozen=True, kw_only=True)
class MixedWorkload:
    """The mixed workload's shape.

    Attributes:
        conversations: How many conversations run interleaved.
        calls: Model calls per conversation: the last ``calls`` call points of the scenario
            (``None``: all 25 of the shipped one).
        budget: The trimmers' budget.
        context_window: The model's context window.
        reserve_for_output: Tokens kept free for the answer; the hard limit is
            ``context_window − reserve_for_output``.
        cache_lifetime_s: The server's cache lifetime, as the cost-aware trimmer is told.
        turn_gap_s: Virtual time between two turns of a conversation.
        idle_gap_s: Virtual time before a turn after an idle gap.
        idle_every: Every this many turns of a conversation comes after an idle gap.
    """

    conversations: int = 3
    calls: int | None = 16
    budget: int = 3000
    context_window: int = 8192
    reserve_for_output: int = 2048
    cache_lifetime_s: float = 300.0
    turn_gap_s: float = 20.0
    idle_gap_s: float = 600.0
    idle_every: int = 5

    def __post_init__(self) -> None:
        for name in ("conversations", "budget", "context_window", "idle_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MixedWorkload: {name} must be an integer >= 1, got {value!r}.")
        if self.calls is not None and (not isinstance(self.calls, int) or self.calls < 1):
            raise ValueError(f"MixedWorkload: calls must be >= 1 or None, got {self.calls!r}.")
        if self.hard_limit < self.budget:
            raise ValueError(
                f"MixedWorkload: context_window - reserve_for_output ({self.hard_limit}) must "
                f"not be below the budget ({self.budget})."
            )
        if self.idle_gap_s <= self.cache_lifetime_s:
            raise ValueError("MixedWorkload: idle_gap_s must exceed cache_lifetime_s.")

    @property
    def hard_limit(self) -> int:
        """The prompt tokens a request must not exceed."""
        return self.context_window - self.reserve_for_output


@dataclass(frozen=True)
class _Turn:
    at: float
    conversation: int
    end: int  # the prompt is the scenario's first ``end`` messages
    idle: bool  # comes after an idle gap: the server's cache of it has expired


def schedule(workload: MixedWorkload, points: Sequence[int]) -> list[_Turn]:
    """Returns every conversation's turns, interleaved by their virtual time."""
    turns = []
    for conversation in range(workload.conversations):
        at = conversation * workload.turn_gap_s / workload.conversations
        for index, end in enumerate(points):
            idle = index > 0 and (index + conversation) % workload.idle_every == 0
            at += workload.idle_gap_s if idle else workload.turn_gap_s
            turns.append(_Turn(at, conversation, end, idle))
    return sorted(turns, key=lambda turn: (turn.at, turn.conversation))


@dataclass
class _Tally:
    waits: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    counted: int = 0  # calls whose usage was not reported: prompt counted here
    prefilled_tokens: int = 0
    violations: int = 0
    invalid: int = 0

    def to_json(self, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "mean_ttft_ms": round(statistics.fmean(self.waits), 1),
            "p95_ttft_ms": round(percentile(self.waits, 0.95), 1),
            "prefilled_tokens": self.prefilled_tokens,
            "hard_limit_violations": self.violations,
            "invalid_requests": self.invalid,
            "calls": len(self.waits),
            "prompt_tokens": self.prompt_tokens,
            "prompt_tokens_counted": self.counted,
            "mean_model_ttft_ms": round(statistics.fmean(self.ttfts), 1),
            "p95_model_ttft_ms": round(percentile(self.ttfts, 0.95), 1),
        }


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


def _stream(model: ChatOpenAI, messages: list[BaseMessage]) -> tuple[float, int | None, int | None]:
    """Streams one call: (ms to the first content chunk, prompt tokens, cached tokens), each
    count ``None`` when the server did not report it."""
    started = time.perf_counter()
    ttft: float | None = None
    prompt = cached = None
    for chunk in model.stream(messages):
        if ttft is None and chunk.content:
            ttft = (time.perf_counter() - started) * 1000
        usage = chunk.usage_metadata
        if usage:
            prompt = usage["input_tokens"]
            cached = (usage.get("input_token_details") or {}).get("cache_read")
    return (ttft if ttft is not None else (time.perf_counter() - started) * 1000), prompt, cached


@contextlib.contextmanager
def _endpoint(
    settings: Settings, simulator: SimulatorConfig | None, base_url: str | None
) -> Iterator[tuple[Settings, SimulatorConfig | None]]:
    """Yields the settings of the endpoint to run on, and the simulator's configuration."""
    if base_url is not None:
        yield replace(settings, llm=replace(settings.llm, base_url=base_url)), None
        return
    simulator = simulator or workload_simulator()
    with running_simulator(replace(simulator, model=settings.llm.model)) as server:
        llm = replace(settings.llm, base_url=server.base_url, api_key=None)
        yield replace(settings, llm=llm), simulator


def run_mixed_workload(
    workload: MixedWorkload | None = None,
    *,
    settings: Settings | None = None,
    messages: Sequence[BaseMessage] | None = None,
    simulator: SimulatorConfig | None = None,
    base_url: str | None = None,
    only: Sequence[str] | None = None,
    on_call: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Runs the mixed workload once per strategy, on the embedded simulator or an endpoint.

    On an endpoint (``base_url``), ``settings.llm`` says the model, key and tokenizer; the
    trimmers count with that tokenizer. On either, doctor's prefill probes first teach the
    cost-aware trimmer's latency model the endpoint's speed (``latency_probes``). A call
    whose stream reports no usage (llama-cpp-python reports none when streaming) is counted with
    it too: ``prompt_tokens_counted`` says how many, and their prefilled tokens are taken as the
    whole prompt (nothing known cached).

    Args:
        workload: Its shape. Default: :class:`MixedWorkload`.
        settings: The model, generation options and, with ``base_url``, the channel. Default:
            the defaults.
        messages: The conversation each one replays. Default: the shipped scenario.
        simulator: The simulator. Default: :func:`workload_simulator`. Not with ``base_url``.
        base_url: Run against this OpenAI-compatible endpoint instead of the simulator.
        only: Run only these strategies (by name). Default: all.
        on_call: Called after each model call with a short description of it.

    Returns:
        ``{"name": "mixed", "strategies": [...], ...}``: per strategy its ``mean_ttft_ms`` and
        ``p95_ttft_ms`` (the user's wait), ``prefilled_tokens``, ``hard_limit_violations``,
        ``invalid_requests`` and more; then the workload and the simulator or endpoint.

    Raises:
        ValueError: For an unknown strategy, or both ``simulator`` and ``base_url``.
    """
    if simulator is not None and base_url is not None:
        raise ValueError("run_mixed_workload: pass simulator or base_url, not both.")
    unknown = sorted(set(only or ()) - set(STRATEGIES))
    if unknown:
        raise ValueError(
            f"run_mixed_workload: unknown strategies {unknown}; choose from {list(STRATEGIES)}."
        )
    workload = workload or MixedWorkload()
    settings = settings or Settings()
    scenario = list(messages) if messages is not None else load_scenario()
    points = call_points(scenario)[-workload.calls :] if workload.calls else call_points(scenario)
    turns = schedule(workload, points)
    conversations = [
        with_request_id(scenario, f"conversation {index}")
        for index in range(workload.conversations)
    ]
    now = [0.0]
    latency_model = LatencyModel()
    results = []
    with _endpoint(settings, simulator, base_url) as (channel, simulated):
        llm = channel.llm
        # The simulator counts with cl100k; an endpoint as its settings say.
        counter = (
            TokenCounter()
            if simulated is not None
            else TokenCounter.for_model(
                llm.model,
                tokenizer=llm.tokenizer,
                base_url=llm.base_url,
                api_key=llm.api_key.get_secret_value() if llm.api_key is not None else None,
            )
        )
        model = build_chat_model(channel, streaming=True, max_retries=0, max_tokens=4)
        # The cost-aware trimmer starts from the endpoint's own speed, as after doctor's probes.
        with Endpoint(channel, timeout_s=llm.timeout_seconds) as endpoint:
            probed = seed_latency_model(channel, endpoint=endpoint, model=latency_model)
        probes = len(probed) if isinstance(probed, list) else 0
        prepares = contenders(workload, model, lambda: now[0], latency_model, counter)
        for name, prepare in prepares.items():
            if only is not None and name not in only:
                continue
            tally, epochs = _Tally(), [0] * workload.conversations
            for turn in turns:
                now[0] = turn.at
                epochs[turn.conversation] += turn.idle
                started = time.perf_counter()
                prepared = prepare(
                    turn.conversation, conversations[turn.conversation][: turn.end], turn.at
                )
                prepare_ms = (time.perf_counter() - started) * 1000
                trim = prepared if isinstance(prepared, TrimResult) else None
                prompt = trim.messages if trim is not None else cast(list[BaseMessage], prepared)
                marker = f"{name} {turn.conversation} epoch {epochs[turn.conversation]}"
                if _invalid(prompt):
                    tally.invalid += 1
                sent = with_request_id(prompt, marker)
                ttft, reported, cached = _stream(model, sent)
                tokens = reported if reported is not None else counter.count_messages(sent)
                tally.counted += reported is None
                if trim is not None and trim.on_usage is not None:
                    trim.on_usage(reported, cached, ttft)  # as the callback handler does
                if name == "cost_aware" and (cached is not None or simulated is not None):
                    latency_model.observe(ttft, tokens, cached)
                tally.waits.append(ttft + prepare_ms)
                tally.ttfts.append(ttft)
                tally.prompt_tokens += tokens
                tally.prefilled_tokens += tokens - (cached or 0)
                tally.violations += tokens > workload.hard_limit
                if on_call is not None:
                    on_call(
                        f"{name}: conversation {turn.conversation}, {turn.end} messages"
                        f"{' after an idle gap' if turn.idle else ''}: wait "
                        f"{ttft + prepare_ms:.0f} ms, {tokens} tokens"
                        f"{'' if reported is not None else ' (counted here)'}, "
                        f"{'?' if cached is None else cached} cached"
                    )
            results.append(tally.to_json(name))
    report: dict[str, Any] = {
        "name": "mixed",
        "strategies": results,
        "workload": {
            **{name: getattr(workload, name) for name in workload.__dataclass_fields__},
            "hard_limit": workload.hard_limit,
            "calls_per_conversation": len(points),
        },
    }
    if simulated is not None:
        report["simulator"] = {
            "overhead_ms": simulated.overhead_ms,
            "prefill_ms_per_token": simulated.prefill_ms_per_token,
            "attention_ms_per_1k_context": simulated.attention_ms_per_1k_context,
            "clock_scale": CLOCK_SCALE,
            "latency_probes": probes,
        }
    else:
        report["endpoint"] = {
            "server": display_url(base_url or ""),
            "model": llm.model,
            "latency_probes": probes,  # 0: a probe failed, the cost-aware model learned nothing
        }
    return report


def workload_table(report: dict[str, Any]) -> str:
    """The result of :func:`run_mixed_workload` as a plain-text table, one strategy a row."""
    rows = [
        f"{'strategy':<28}{'mean wait':>10}{'p95 wait':>10}{'prefilled':>11}"
        f"{'over limit':>11}{'invalid':>8}"
    ]
    for entry in report["strategies"]:
        rows.append(
            f"{entry['name']:<28}{entry['mean_ttft_ms']:>10,.0f}{entry['p95_ttft_ms']:>10,.0f}"
            f"{entry['prefilled_tokens']:>11,}{entry['hard_limit_violations']:>11}"
            f"{entry['invalid_requests']:>8}"
        )
    shape = report["workload"]
    where = (
        f"on the simulator at {report['simulator']['clock_scale']:g}× its default latency"
        if "simulator" in report
        else f"on {report['endpoint']['model']} at {report['endpoint']['server']}"
    )
    counted = sum(entry.get("prompt_tokens_counted", 0) for entry in report["strategies"])
    rows.append(
        f"Mixed workload: {shape['conversations']} conversations × "
        f"{shape['calls_per_conversation']} calls, budget {shape['budget']:,}, hard limit "
        f"{shape['hard_limit']:,}, every {shape['idle_every']}th turn after an idle gap; "
        f"times in ms {where}; wait = time to first token + trim (+ summary call)."
        + (
            f" The server reported no usage for {counted} calls: their prompt tokens are our "
            "count, and all of them count as prefilled."
            if counted
            else ""
        )
    )
    return "\n".join(rows)
