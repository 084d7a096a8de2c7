"""Soak: agent-latency in every model call, for a long time and under load.

Two phases against the latency simulator, which fails a share of requests with HTTP 500:

1. **Sequential.** ``--calls`` (10,000) calls of ``PriorityTrimmer | ChatOpenAI`` streaming over
   HTTP, with the ``LatencyCallbackHandler`` attached; the conversation grows by one question per
   call and is trimmed every time. After every ``--baseline-every``-th call the same request
   (the messages the trimmer produced) is sent once more without agent-latency, side by side.
   The process's resident memory (RSS) is read after a warm-up and at the end.
2. **Concurrent.** ``--concurrent`` (1,000) ``create_agent`` runs with ``TrimmingMiddleware`` and
   the handler, started at once with ``ainvoke``; every ``--cancel-every``-th is cancelled
   mid-call.

It prints, per phase, the calls, answers, injected server errors, cancellations and *lost* calls
(any other outcome: must be 0), then the spans left open (a span processor counts starts and
ends), the handler's open runs and the run states still alive, the RSS growth, and agent-latency's
own added latency per call, measured two ways side by side:

- *inside*: the time spent in the trimmer step and in the handler's callbacks (p50/p99; and the
  part before the request is sent, which is what delays the first token);
- *difference*: the median call time with agent-latency minus the median of the same requests
  without it (noisier: it includes HTTP and the server).

The simulator runs in a child process (``agent-latency sim``) so that its memory and CPU are not
the ones measured. Linux only (RSS from ``/proc``).

Run: ``python scripts/soak.py`` (about four minutes on 2 cores), or
``python scripts/soak.py --calls 1000 --concurrent 200`` for a quick look.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import httpx
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanKind

from agent_latency.bench import percentile
from agent_latency.config import Settings, build_chat_model
from agent_latency.sim import DEFAULT_MODEL
from agent_latency.telemetry import LatencyCallbackHandler, LatencyRecord, configure_telemetry
from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware

BUDGET = 600
ROUNDS = 8
ERROR_RATE = 0.02
SERVER_OPTIONS = {
    "overhead_ms": 1,
    "prefill_ms_per_token": 0,
    "decode_tokens_per_s": 5000,
    "answer_tokens": 16,
    "error_rate": ERROR_RATE,
}
"""The simulator's options: a fast server, so that the client side dominates the figures."""

QUIET_MS = 3_600_000
"""TTFT thresholds no call reaches."""

INJECTED_ERROR = "Error code: 500"
"""How the application sees one of the simulator's injected failures."""

# The handler callbacks a chain or agent run calls; each is timed in the sequential phase.
_TIMED_CALLBACKS = (
    "on_chain_start",
    "on_chain_end",
    "on_chain_error",
    "on_chat_model_start",
    "on_llm_new_token",
    "on_llm_end",
    "on_llm_error",
    "on_custom_event",
)


# -- what is counted ------------------------------------------------------------------------------


class SpanLedger(SpanProcessor):
    """Counts started and ended spans, and the chat (CLIENT) spans among them."""

    def __init__(self) -> None:
        self.started = 0
        self.ended = 0
        self.chat_spans = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started += 1
        self.chat_spans += span.kind == SpanKind.CLIENT

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1


class StopWatch:
    """Adds up the time spent in the functions it wraps, outermost calls only (one thread).

    ``before_request_ns`` is the total when ``on_chat_model_start`` returns: the trim and the
    start callbacks, which is what agent-latency adds before the request goes out.
    """

    def __init__(self) -> None:
        self.total_ns = 0
        self.before_request_ns = 0
        self._depth = 0

    def reset(self) -> None:
        self.total_ns = self.before_request_ns = 0

    def wrap(self, function: Callable[..., Any], *, marks_request: bool = False) -> Any:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:  # a callback inside the trimmer step: already being timed
                return function(*args, **kwargs)
            self._depth += 1
            started = time.perf_counter_ns()
            try:
                return function(*args, **kwargs)
            finally:
                self.total_ns += time.perf_counter_ns() - started
                self._depth -= 1
                if marks_request:
                    self.before_request_ns = self.total_ns

        return timed


def time_agent_latency(
    watch: StopWatch, handler: LatencyCallbackHandler, trimmer: PriorityTrimmer
) -> None:
    """Makes ``watch`` time the trimmer step and every handler callback (instance attributes)."""
    trimmer.invoke = watch.wrap(trimmer.invoke)
    for name in _TIMED_CALLBACKS:
        setattr(
            handler,
            name,
            watch.wrap(getattr(handler, name), marks_request=name == "on_chat_model_start"),
        )


class Samples:
    """Milliseconds in a buffer allocated up front, so that the soak's own memory stays flat."""

    def __init__(self, capacity: int) -> None:
        self._values = array("d", bytes(8 * capacity))
        self._count = 0

    def add(self, value: float) -> None:
        self._values[self._count] = value
        self._count += 1

    def values(self) -> list[float]:
        return self._values[: self._count].tolist()


def rss_mb() -> float:
    """The resident memory of this process, in MB (Linux ``/proc``)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def live_run_states() -> int:
    """Run states the handler kept that are still alive anywhere (0 when nothing leaked).

    The telemetry package's run-state classes are not public: they are found by their name
    (``RunState`` and its subclasses) among the objects of that package.
    """
    gc.collect()
    return sum(_is_run_state(type(item)) for item in gc.get_objects())


def _is_run_state(cls: type) -> bool:
    module = getattr(cls, "__module__", None)  # a descriptor on some built-in metaclasses
    return (
        isinstance(module, str)
        and module.startswith("agent_latency.telemetry")
        and any(base.__name__ == "RunState" for base in cls.__mro__)
    )


@dataclass
class PhaseResult:
    """How the calls of one phase ended."""

    name: str
    calls: int = 0
    answered: int = 0
    server_errors: int = 0
    cancelled: int = 0
    lost: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, outcome: object) -> None:
        """Counts one call: its answer's text, or the exception it ended with."""
        self.calls += 1
        if isinstance(outcome, str):
            self.answered += 1
        elif isinstance(outcome, asyncio.CancelledError):
            self.cancelled += 1
        elif isinstance(outcome, Exception) and str(outcome).startswith(INJECTED_ERROR):
            self.server_errors += 1
        else:
            self.lost.append(f"{type(outcome).__name__}: {outcome}"[:200])

    def line(self) -> str:
        return (
            f"{self.name}: {self.calls:,} calls in {self.seconds:.1f} s; answered "
            f"{self.answered:,}, injected server errors {self.server_errors:,}, cancelled "
            f"{self.cancelled:,}, lost {len(self.lost)}"
        )


@dataclass
class SoakResult:
    """Everything a soak measured."""

    sequential: PhaseResult
    concurrent: PhaseResult
    records: Counter[str]
    spans: SpanLedger
    open_runs: int
    live_run_states: int
    token_counter: str
    rss_mb: list[tuple[int, float]]
    inside_ms: list[float]
    before_request_ms: list[float]
    with_ms: list[float]
    without_ms: list[float]

    @property
    def lost(self) -> int:
        return len(self.sequential.lost) + len(self.concurrent.lost)

    @property
    def open_spans(self) -> int:
        return self.spans.started - self.spans.ended

    def rss_growth_mb(self, since_calls: int = 0) -> float:
        """RSS at the end minus RSS at the first sample taken after ``since_calls`` calls."""
        start = next(mb for calls, mb in self.rss_mb if calls >= since_calls)
        return self.rss_mb[-1][1] - start


# -- the calls ------------------------------------------------------------------------------------


def history(rounds: int = ROUNDS) -> list[BaseMessage]:
    """An agent conversation: ``rounds`` questions, each answered after a tool call.

    Eight rounds make about 1,300 tokens: over BUDGET, so every call is trimmed.
    """
    messages: list[BaseMessage] = [
        SystemMessage("You are a support agent for an online shop. Answer briefly. " * 3)
    ]
    for n in range(rounds):
        call = {"name": "get_order", "args": {"order": n}, "id": f"call_{n}"}
        messages += [
            HumanMessage(f"Where is order {n}? I ordered it last week and it has not arrived."),
            AIMessage("", tool_calls=[call]),
            ToolMessage(
                f'{{"order": {n}, "status": "in_transit", "events": ['
                + '"scanned at hub", ' * 12
                + '"out for delivery"]}',
                tool_call_id=f"call_{n}",
            ),
            AIMessage(f"Order {n} left the warehouse on Monday and is in transit."),
        ]
    return messages


def question(index: int) -> HumanMessage:
    return HumanMessage(f"Question {index}: which of my orders are late, and by how much?")


def _stream_text(runnable: Any, messages: Sequence[BaseMessage], config: Any = None) -> str:
    return "".join(str(chunk.content) for chunk in runnable.stream(messages, config=config))


def _outcome(call: Callable[..., str], *args: Any) -> object:
    """The call's answer, or the exception it raised."""
    try:
        return call(*args)
    except Exception as error:
        return error


@dataclass
class AgentLatency:
    """agent-latency wired as a user would, plus what the soak counts about it."""

    handler: LatencyCallbackHandler
    trimmer: PriorityTrimmer
    spans: SpanLedger
    records: Counter[str]


def wire_agent_latency(settings: Settings, budget: int) -> AgentLatency:
    """Providers as ``configure_telemetry`` makes them (spans made, not exported), a trimmer and
    a handler on them."""
    telemetry = configure_telemetry(settings, exporter="none", set_global=False)
    spans = SpanLedger()
    telemetry.tracer_provider.add_span_processor(spans)
    records: Counter[str] = Counter()

    def count(record: LatencyRecord) -> None:
        records[record.outcome] += 1  # counted, not kept: the soak's own memory stays flat

    # Thresholds out of reach: under the concurrent burst every call would log a slow TTFT.
    handler = telemetry.handler(
        on_record=count,
        log_every_request=False,
        ttft_warn_ms=QUIET_MS,
        ttft_error_ms=QUIET_MS,
    )
    trimmer = PriorityTrimmer.from_settings(
        settings, budget=budget, tracer_provider=telemetry.tracer_provider
    )
    return AgentLatency(handler, trimmer, spans, records)


def run_sequential(
    base_url: str,
    wired: AgentLatency,
    conversation: list[BaseMessage],
    calls: int,
    *,
    baseline_every: int,
    warm_up: int,
    on_progress: Callable[[int], None] | None = None,
) -> tuple[PhaseResult, dict[str, Samples], list[tuple[int, float]]]:
    """Makes ``calls`` traced calls (after ``warm_up`` untimed ones) and the baseline calls.

    Returns:
        How the traced calls ended; the per-call times in ms (``inside``, ``before_request``,
        ``with``, ``without``); and the RSS in MB after the warm-up and after each tenth of the
        calls, with the number of calls made so far.
    """
    settings = Settings()
    model = build_chat_model(
        settings, base_url=base_url, model=DEFAULT_MODEL, max_retries=0, streaming=True
    )
    untraced = PriorityTrimmer.from_settings(
        settings, budget=wired.trimmer.options.budget, tracer_provider=trace.NoOpTracerProvider()
    )
    watch = StopWatch()
    time_agent_latency(watch, wired.handler, wired.trimmer)
    traced = wired.trimmer | model
    config = {"callbacks": [wired.handler]}
    times = {
        "inside": Samples(calls),
        "before_request": Samples(calls),
        "with": Samples(calls),
        "without": Samples(calls // baseline_every + 1),
    }
    result = PhaseResult("sequential")
    rss: list[tuple[int, float]] = []
    rss_every = max(calls // 10, 1)
    for index in range(warm_up + calls):
        if index >= warm_up and (index - warm_up) % rss_every == 0:
            gc.collect()
            rss.append((index - warm_up, rss_mb()))
        if index == warm_up:
            result.seconds = time.perf_counter()
        messages = [*conversation, question(index)]
        watch.reset()
        started = time.perf_counter_ns()
        outcome = _outcome(_stream_text, traced, messages, config)
        elapsed_ms = (time.perf_counter_ns() - started) / 1e6
        if index < warm_up:
            continue
        result.count(outcome)
        if on_progress is not None:
            on_progress(result.calls)
        if not isinstance(outcome, str):
            continue  # a failed call is not a latency sample
        times["with"].add(elapsed_ms)
        times["inside"].add(watch.total_ns / 1e6)
        times["before_request"].add(watch.before_request_ns / 1e6)
        if (index - warm_up) % baseline_every == 0:
            sent = untraced.trim(messages).messages  # the request agent-latency sent
            started = time.perf_counter_ns()
            baseline = _outcome(_stream_text, model, sent)
            if isinstance(baseline, str):
                times["without"].add((time.perf_counter_ns() - started) / 1e6)
    result.seconds = time.perf_counter() - result.seconds
    gc.collect()
    rss.append((calls, rss_mb()))
    return result, times, rss


class FirstToken(BaseCallbackHandler):
    """Sets an event when a streamed call's first token arrives (in the loop: run_inline)."""

    run_inline = True

    def __init__(self) -> None:
        self.arrived = asyncio.Event()

    def on_llm_new_token(self, token: str | list[str | dict[str, Any]], **kwargs: Any) -> None:
        if token:
            self.arrived.set()


async def _cancel_at_first_token(task: asyncio.Task[str], first_token: FirstToken) -> None:
    arrival = asyncio.ensure_future(first_token.arrived.wait())
    await asyncio.wait([arrival, task], return_when=asyncio.FIRST_COMPLETED)
    arrival.cancel()
    task.cancel()  # mid-stream; a no-op when the run already ended (say, with a server error)


async def run_concurrent(
    base_url: str,
    wired: AgentLatency,
    conversation: list[BaseMessage],
    calls: int,
    *,
    cancel_every: int,
) -> PhaseResult:
    """Starts ``calls`` agent runs at once; cancels every ``cancel_every``-th at its first token."""
    model = build_chat_model(
        Settings(), base_url=base_url, model=DEFAULT_MODEL, max_retries=0, streaming=True
    )
    # No recall tool: the simulator would call it first; one model call per run is soaked.
    middleware = TrimmingMiddleware(wired.trimmer, recall=False)
    agent = create_agent(model, tools=[], middleware=[middleware])

    async def run(index: int, callbacks: list[BaseCallbackHandler]) -> str:
        inputs: Any = {"messages": [*conversation, question(index)]}
        state = await agent.ainvoke(inputs, {"callbacks": callbacks})
        return str(state["messages"][-1].content)

    started = time.perf_counter()
    tasks, cancellers = [], []
    for index in range(calls):
        if index % cancel_every:
            tasks.append(asyncio.create_task(run(index, [wired.handler])))
            continue
        first_token = FirstToken()
        task = asyncio.create_task(run(index, [wired.handler, first_token]))
        tasks.append(task)
        cancellers.append(asyncio.create_task(_cancel_at_first_token(task, first_token)))
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.gather(*cancellers)
    await asyncio.sleep(0)  # done-callbacks of the cancelled tasks
    result = PhaseResult("concurrent", seconds=time.perf_counter() - started)
    for outcome in outcomes:
        result.count(outcome)
    return result


def soak(
    base_url: str,
    *,
    calls: int,
    concurrent: int,
    baseline_every: int = 5,
    cancel_every: int = 10,
    warm_up: int = 200,
    rounds: int = ROUNDS,
    budget: int = BUDGET,
    on_progress: Callable[[int], None] | None = None,
) -> SoakResult:
    """Runs both phases against the OpenAI-compatible endpoint at ``base_url``.

    ``rounds`` and ``budget`` size the conversation and the trimmer's budget (keep the
    conversation over the budget, so that every call is trimmed).
    """
    wired = wire_agent_latency(Settings(), budget)
    conversation = history(rounds)
    sequential, times, rss = run_sequential(
        base_url,
        wired,
        conversation,
        calls,
        baseline_every=baseline_every,
        warm_up=warm_up,
        on_progress=on_progress,
    )
    concurrent_result = asyncio.run(
        run_concurrent(
            base_url,
            wired,
            conversation,
            concurrent,
            cancel_every=cancel_every,
        )
    )
    return SoakResult(
        sequential=sequential,
        concurrent=concurrent_result,
        records=wired.records,
        spans=wired.spans,
        open_runs=wired.handler.open_runs,
        live_run_states=live_run_states(),
        token_counter=repr(wired.trimmer.token_counter),
        rss_mb=rss,
        inside_ms=times["inside"].values(),
        before_request_ms=times["before_request"].values(),
        with_ms=times["with"].values(),
        without_ms=times["without"].values(),
    )


# -- the report -----------------------------------------------------------------------------------


def _quantiles(values: Sequence[float]) -> str:
    if not values:
        return "no samples"
    p50, p90, p99 = (percentile(values, q) for q in (0.5, 0.9, 0.99))
    return f"p50 {p50:.3f} ms, p90 {p90:.3f} ms, p99 {p99:.3f} ms, max {max(values):.3f} ms"


def report(result: SoakResult, *, warm_up: int) -> str:
    """The soak's figures as printed."""
    with_p50 = statistics.median(result.with_ms) if result.with_ms else float("nan")
    without_p50 = statistics.median(result.without_ms) if result.without_ms else float("nan")
    calls = result.sequential.calls
    growth = result.rss_growth_mb()
    late_growth = result.rss_growth_mb(calls - calls // 5)
    series = ", ".join(f"{done:,}: {mb:.1f}" for done, mb in result.rss_mb)
    records = ", ".join(f"{outcome} {count:,}" for outcome, count in sorted(result.records.items()))
    lines = [
        result.sequential.line(),
        result.concurrent.line(),
        f"lost calls: {result.lost}",
        f"handler records: {sum(result.records.values()):,} ({records}); chat spans: "
        f"{result.spans.chat_spans:,}",
        f"spans: started {result.spans.started:,}, ended {result.spans.ended:,}, "
        f"open {result.open_spans}",
        f"state: handler open runs {result.open_runs}, run states alive {result.live_run_states}",
        f"RSS over the sequential calls (after {warm_up} warm-up calls): "
        f"{result.rss_mb[0][1]:.1f} MB -> {result.rss_mb[-1][1]:.1f} MB ({growth:+.1f} MB, "
        f"{growth * 1e6 / max(calls, 1):+,.0f} bytes per call); over the last fifth "
        f"{late_growth:+.1f} MB",
        f"  RSS in MB by calls made: {series}",
        f"  token cache: {result.token_counter} (bounded LRU: it fills, then stays)",
        f"added latency inside agent-latency (trimmer step + handler callbacks), per answered "
        f"call: {_quantiles(result.inside_ms)}",
        f"  of which before the request is sent (delays the first token): "
        f"{_quantiles(result.before_request_ms)}",
        f"side by side, call time p50: with agent-latency {with_p50:.2f} ms "
        f"({len(result.with_ms):,} calls), without {without_p50:.2f} ms "
        f"({len(result.without_ms):,} calls, same requests), difference "
        f"{with_p50 - without_p50:+.2f} ms",
    ]
    for phase in (result.sequential, result.concurrent):
        lines += [f"  lost in {phase.name}: {description}" for description in phase.lost[:5]]
    return "\n".join(lines)


def machine() -> str:
    versions = ", ".join(
        f"{package} {metadata.version(package)}"
        for package in ("langchain-core", "langchain-openai", "opentelemetry-sdk")
    )
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs (load average "
        f"{load}), {platform.python_implementation()} {platform.python_version()}; {versions}"
    )


@contextlib.contextmanager
def simulator_process() -> Iterator[str]:
    """Runs ``agent-latency sim`` in a child process on a free port; yields its API root."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = [f"--{name.replace('_', '-')}={value}" for name, value in SERVER_OPTIONS.items()]
    command = [sys.executable, "-m", "agent_latency.cli._app", "sim", f"--port={port}", *options]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{root}/health", timeout=1).status_code == 200:
                    break
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the simulator did not start: {' '.join(command)}")
            time.sleep(0.1)
        yield f"{root}/v1"
    finally:
        child.terminate()
        child.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000, help="sequential calls")
    parser.add_argument("--concurrent", type=int, default=1_000, help="concurrent agent runs")
    parser.add_argument("--baseline-every", type=int, default=5, help="baseline call frequency")
    parser.add_argument("--cancel-every", type=int, default=10, help="cancel every n-th run")
    parser.add_argument("--warm-up", type=int, default=200, help="untimed calls first")
    args = parser.parse_args(argv)
    if min(args.calls, args.concurrent, args.baseline_every, args.cancel_every) < 1:
        parser.error("--calls, --concurrent, --baseline-every and --cancel-every must be >= 1")
    if args.warm_up < 0:
        parser.error("--warm-up must be >= 0")

    print(f"machine: {machine()}")
    print(
        f"agent-latency soak: {args.calls:,} sequential calls + {args.concurrent:,} concurrent "
        f"agent runs; simulator in a child process failing {ERROR_RATE:.0%} of requests with 500"
    )
    started = time.perf_counter()

    def progress(done: int) -> None:
        if done % 1000 == 0:
            print(f"  {done:,} sequential calls ({time.perf_counter() - started:.0f} s)")

    with simulator_process() as base_url:
        result = soak(
            base_url,
            calls=args.calls,
            concurrent=args.concurrent,
            baseline_every=args.baseline_every,
            cancel_every=args.cancel_every,
            warm_up=args.warm_up,
            on_progress=progress,
        )
    print(report(result, warm_up=args.warm_up))
    clean = result.lost == 0 and result.open_spans == 0 and result.open_runs == 0
    print(f"verdict: {'clean' if clean else 'NOT CLEAN'} ({time.perf_counter() - started:.0f} s)")
    print(f"load average after: {', '.join(f'{value:.1f}' for value in os.getloadavg())}")
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
