"""Faults around agent-latency: the application sees what it would see without it, and no more.

Every fault runs twice against the same local servers: once with a plain ``ChatOpenAI`` and once
with agent-latency in the path (``PriorityTrimmer`` before the model, ``LatencyCallbackHandler``
attached). Both runs must end the same way (same answer, or the same exception type and
message); the run with agent-latency must leave no span open and no per-run state behind, and
must record the fault on the chat span. Collector faults must not slow the caller down.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable
from langchain_openai import ChatOpenAI
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanKind, StatusCode
from support.otlp_receiver import OTLPReceiver
from support.ports import refused_port

from agent_latency import (
    LatencyCallbackHandler,
    LatencyRecord,
    PriorityTrimmer,
    Settings,
    TokenCounter,
    build_chat_model,
    configure_telemetry,
    semconv,
)
from agent_latency.semconv import TRIM_SPAN_NAME
from agent_latency.sim import RunningSimulator, SimulatorConfig, running_simulator
from agent_latency.trimming import TrimmingMiddleware

COUNTER = TokenCounter()
BUDGET = 300
CHUNK_TIMEOUT_MS = 100
FAST = SimulatorConfig(
    overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=5000, answer_tokens=8
)
COLLECTOR_SLOWDOWN_ALLOWED_S = 0.05
"""How much slower a call may be with a faulty collector than with no telemetry at all."""


class SpanLedger(SpanProcessor):
    """Counts the spans a provider starts and ends, to find any left open."""

    def __init__(self) -> None:
        self.started = 0
        self.ended = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started += 1

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1

    @property
    def open(self) -> int:
        """Spans started and not ended."""
        return self.started - self.ended


def history() -> list[BaseMessage]:
    """An agent conversation over BUDGET tokens: every call gets trimmed first."""
    messages: list[BaseMessage] = [SystemMessage("You are a support agent. Be brief.")]
    for n in range(6):
        messages += [
            HumanMessage(f"Where is order {n}? " + "Some detail. " * 12),
            AIMessage(f"Order {n} is in transit. " + "More detail. " * 8),
        ]
    return [*messages, HumanMessage("Which orders are late?")]


def qualified_name(error: BaseException) -> str:
    """The exception type as the handler records it in ``error.type``."""
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"


Outcome = tuple[str, str]
"""``("answer", text)``, or the exception's qualified type name and message."""


def outcome_of(call: Callable[[], str]) -> Outcome:
    try:
        return "answer", call()
    except Exception as error:
        return qualified_name(error), str(error)


MODES = ("invoke", "stream", "astream")
STREAMING_MODES = ("stream", "astream")


def run_sync(
    runnable: Runnable[Any, Any], messages: list[BaseMessage], mode: str, config: Any
) -> str:
    """Calls ``runnable`` (``invoke`` or ``stream``) and returns the answer's text."""
    if mode == "invoke":
        return str(runnable.invoke(messages, config=config).content)
    return "".join(str(chunk.content) for chunk in runnable.stream(messages, config=config))


async def astream_outcome(
    runnable: Runnable[Any, Any], messages: list[BaseMessage], config: Any
) -> Outcome:
    try:
        return "answer", "".join(
            [str(chunk.content) async for chunk in runnable.astream(messages, config)]
        )
    except Exception as error:
        return qualified_name(error), str(error)


def outcomes(
    mode: str,
    plain: Runnable[Any, Any],
    traced: Runnable[Any, Any],
    messages: list[BaseMessage],
    config: Any,
) -> tuple[Outcome, Outcome]:
    """How a call ends without agent-latency (``plain``) and with it (``traced``, ``config``)."""
    if mode != "astream":
        return (
            outcome_of(lambda: run_sync(plain, messages, mode, None)),
            outcome_of(lambda: run_sync(traced, messages, mode, config)),
        )

    async def both() -> tuple[Outcome, Outcome]:
        # One event loop for both: ChatOpenAI shares its async HTTP client between instances.
        return (
            await astream_outcome(plain, messages, None),
            await astream_outcome(traced, messages, config),
        )

    return asyncio.run(both())


def chat_model(sim: RunningSimulator, **overrides: Any) -> ChatOpenAI:
    options: dict[str, Any] = {"model": sim.config.models[0], "max_retries": 0, **overrides}
    return build_chat_model(Settings(), base_url=sim.base_url, **options)


@dataclass
class WithAgentLatency:
    """agent-latency as a user wires it: a trimmer before the model, the handler attached."""

    handler: LatencyCallbackHandler
    trimmer: PriorityTrimmer
    ledger: SpanLedger
    records: list[LatencyRecord]

    @property
    def config(self) -> dict[str, Any]:
        return {"callbacks": [self.handler]}

    def chain(self, model: ChatOpenAI) -> Runnable[Any, Any]:
        return self.trimmer | model

    def assert_nothing_left_open(self) -> None:
        assert self.ledger.started > 0
        assert self.ledger.open == 0
        assert self.handler.open_runs == 0


def wire(tracer_provider: TracerProvider, **handler_options: Any) -> WithAgentLatency:
    ledger = SpanLedger()
    tracer_provider.add_span_processor(ledger)
    records: list[LatencyRecord] = []
    handler = LatencyCallbackHandler(
        tracer_provider=tracer_provider,
        chunk_timeout_ms=CHUNK_TIMEOUT_MS,
        on_record=records.append,
        **handler_options,
    )
    trimmer = PriorityTrimmer(BUDGET, token_counter=COUNTER, tracer_provider=tracer_provider)
    return WithAgentLatency(handler, trimmer, ledger, records)


@pytest.fixture
def agent_latency(tracer_provider: TracerProvider) -> WithAgentLatency:
    return wire(tracer_provider)


def chat_span(spans: tuple[ReadableSpan, ...]) -> ReadableSpan:
    (chat,) = [span for span in spans if span.kind == SpanKind.CLIENT]
    return chat


def stall_gaps_ms(span: ReadableSpan) -> list[float]:
    return [
        float((event.attributes or {})[semconv.STALL_GAP_MS])
        for event in span.events
        if event.name == semconv.STALL_EVENT
    ]


# --- the model server misbehaves --------------------------------------------------------------


@dataclass(frozen=True)
class ModelFault:
    """A misbehaving model server and what the client should make of it."""

    server: SimulatorConfig
    timeout_s: float = 10.0
    fails: bool = True
    min_stall_ms: float | None = None  # a stall at least this long must be recorded
    modes: tuple[str, ...] = MODES


MODEL_FAULTS = {
    "http_500": ModelFault(replace(FAST, error_rate=1.0)),
    "http_429_retry_after": ModelFault(replace(FAST, rate_limit_rate=1.0, retry_after_s=0.05)),
    "client_timeout": ModelFault(replace(FAST, overhead_ms=600), timeout_s=0.2),
    "stall_mid_stream": ModelFault(
        replace(FAST, stall_after_chunks=3, stall_ms=300),
        fails=False,
        min_stall_ms=150,  # the client may handle the chunk before the pause a little late
        modes=STREAMING_MODES,
    ),
    "stall_past_the_client_timeout": ModelFault(
        replace(FAST, stall_after_chunks=3, stall_ms=600),
        timeout_s=0.2,
        min_stall_ms=150,
        modes=STREAMING_MODES,
    ),
    "reset_mid_stream": ModelFault(replace(FAST, reset_after_chunks=3), modes=STREAMING_MODES),
}
MODEL_FAULT_CASES = [
    pytest.param(fault, mode, id=f"{name}-{mode}")
    for name, fault in MODEL_FAULTS.items()
    for mode in fault.modes
]


@pytest.mark.parametrize(("fault", "mode"), MODEL_FAULT_CASES)
def test_model_server_faults_reach_the_caller_unchanged_and_are_recorded(
    fault: ModelFault,
    mode: str,
    agent_latency: WithAgentLatency,
    span_exporter: InMemorySpanExporter,
) -> None:
    messages = history()
    with running_simulator(fault.server) as sim:
        model = chat_model(sim, timeout=fault.timeout_s, streaming=mode != "invoke")
        without, with_it = outcomes(
            mode, model, agent_latency.chain(model), messages, agent_latency.config
        )

    assert with_it == without
    assert (without[0] != "answer") is fault.fails
    agent_latency.assert_nothing_left_open()
    spans = span_exporter.get_finished_spans()
    assert any(span.name == TRIM_SPAN_NAME for span in spans)
    chat = chat_span(spans)
    attributes = chat.attributes or {}
    (record,) = agent_latency.records
    if fault.fails:
        assert chat.status.status_code is StatusCode.ERROR
        assert attributes[error_attributes.ERROR_TYPE] == without[0]
        assert attributes[semconv.OUTCOME] == "error"
        assert record.error_type == without[0]
    else:
        assert chat.status.status_code is StatusCode.UNSET
        assert error_attributes.ERROR_TYPE not in attributes
        assert attributes[semconv.OUTCOME] == record.outcome == "ok"
    if fault.min_stall_ms is not None:
        assert max(stall_gaps_ms(chat), default=0) >= fault.min_stall_ms
        assert attributes[semconv.STALLS] >= 1 and record.stalls >= 1


def test_a_rate_limited_call_retried_after_retry_after_is_one_span(
    agent_latency: WithAgentLatency, span_exporter: InMemorySpanExporter
) -> None:
    messages = history()
    server = replace(FAST, rate_limit_rate=1.0, retry_after_s=0.05)
    attempts = []
    with running_simulator(server) as sim:
        model = chat_model(sim, max_retries=2)
        without = outcome_of(lambda: run_sync(model, messages, "stream", None))
        attempts.append(sim.stats.errors)
        with_it = outcome_of(
            lambda: run_sync(agent_latency.chain(model), messages, "stream", agent_latency.config)
        )
        attempts.append(sim.stats.errors - attempts[0])

    assert with_it == without and "429" in without[1]
    assert attempts == [3, 3]  # the client honoured Retry-After twice, in both runs
    agent_latency.assert_nothing_left_open()
    chat = chat_span(span_exporter.get_finished_spans())
    assert (chat.attributes or {})[error_attributes.ERROR_TYPE] == without[0]


# --- the consumer walks away ------------------------------------------------------------------

SLOW_STREAM = replace(FAST, decode_tokens_per_s=50, answer_tokens=12)
TAKEN_CHUNKS = 3


def take_sync(stream: Iterator[Any], how: str) -> list[str]:
    """Reads TAKEN_CHUNKS content chunks, then walks away as ``how`` says."""
    texts: list[str] = []
    for chunk in stream:
        if chunk.content:
            texts.append(str(chunk.content))
        if len(texts) == TAKEN_CHUNKS:
            break
    if how == "close":
        stream.close()  # type: ignore[attr-defined]
    else:  # "dropped": the last reference goes away without a close()
        del stream
        gc.collect()
    return texts


async def take_async(stream: Any) -> list[str]:
    texts: list[str] = []
    async for chunk in stream:
        if chunk.content:
            texts.append(str(chunk.content))
        if len(texts) == TAKEN_CHUNKS:
            break
    await stream.aclose()
    return texts


@pytest.mark.parametrize("how", ["close", "dropped", "aclose"])
def test_a_stream_abandoned_by_the_consumer_ends_its_span(
    how: str, agent_latency: WithAgentLatency, span_exporter: InMemorySpanExporter
) -> None:
    messages = history()

    with running_simulator(SLOW_STREAM) as sim:
        model = chat_model(sim)
        traced, config = agent_latency.chain(model), agent_latency.config
        if how == "aclose":

            async def both() -> tuple[list[str], list[str]]:
                return (
                    await take_async(model.astream(messages)),
                    await take_async(traced.astream(messages, config)),
                )

            without, with_it = asyncio.run(both())
        else:
            without = take_sync(model.stream(messages), how)
            with_it = take_sync(traced.stream(messages, config), how)

    assert with_it == without and len(without) == TAKEN_CHUNKS
    agent_latency.assert_nothing_left_open()
    chat = chat_span(span_exporter.get_finished_spans())
    attributes = chat.attributes or {}
    assert attributes[semconv.OUTCOME] == "abandoned"
    assert chat.status.status_code is StatusCode.UNSET  # walking away is not an error
    assert attributes[semconv.CHUNKS] >= TAKEN_CHUNKS
    assert [record.outcome for record in agent_latency.records] == ["abandoned"]


# --- the agent run is cancelled ---------------------------------------------------------------


class FirstToken(BaseCallbackHandler):
    """Sets an event when the first streamed token arrives (called in the loop: run_inline)."""

    run_inline = True

    def __init__(self) -> None:
        self.arrived = asyncio.Event()

    def on_llm_new_token(self, token: str | list[str | dict[str, Any]], **kwargs: Any) -> None:
        if token:
            self.arrived.set()


@pytest.mark.parametrize("when", ["before_the_first_token", "mid_stream"])
async def test_an_agent_run_cancelled_mid_call_ends_every_span(
    when: str, agent_latency: WithAgentLatency, span_exporter: InMemorySpanExporter
) -> None:
    server = replace(SLOW_STREAM, overhead_ms=1000 if when == "before_the_first_token" else 0)
    outcomes: list[str] = []
    async with running_simulator(server) as sim:
        model = chat_model(sim)
        for middleware, callbacks in (
            ([], []),
            # No recall tool: the simulator would call it first, and this is about one call.
            ([TrimmingMiddleware(agent_latency.trimmer, recall=False)], [agent_latency.handler]),
        ):
            agent = create_agent(model, tools=[], middleware=middleware)
            first_token = FirstToken()
            task = asyncio.create_task(
                agent.ainvoke(
                    {"messages": history()}, config={"callbacks": [first_token, *callbacks]}
                )
            )
            if when == "mid_stream":
                await asyncio.wait_for(first_token.arrived.wait(), timeout=10)
            else:
                await asyncio.sleep(0.2)  # the request is out; the server holds the first token
                assert not first_token.arrived.is_set()
            task.cancel()
            try:
                await task
                outcomes.append("answer")
            except asyncio.CancelledError as error:
                outcomes.append(qualified_name(error))
            await asyncio.sleep(0)  # let done-callbacks run

    assert outcomes == ["asyncio.exceptions.CancelledError"] * 2
    agent_latency.assert_nothing_left_open()
    spans = span_exporter.get_finished_spans()
    chat = chat_span(spans)
    assert (chat.attributes or {})[semconv.OUTCOME] == "cancelled"
    assert (chat.attributes or {})[error_attributes.ERROR_TYPE] == outcomes[0]
    assert any(span.name == TRIM_SPAN_NAME for span in spans)
    assert [record.outcome for record in agent_latency.records] == ["cancelled"]


# --- the OpenTelemetry collector misbehaves ---------------------------------------------------


@pytest.fixture
def quick_exports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exports start within milliseconds and give up after half a second: faults show at once."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.5")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "50")


@contextmanager
def closed_port() -> Iterator[tuple[str, OTLPReceiver | None]]:
    yield f"http://127.0.0.1:{refused_port()}", None  # nothing listens there: connections refused


@contextmanager
def receiver(**options: Any) -> Iterator[tuple[str, OTLPReceiver | None]]:
    with OTLPReceiver(**options) as collector:
        yield collector.endpoint, collector


COLLECTORS: dict[str, Callable[[], AbstractContextManager[tuple[str, OTLPReceiver | None]]]] = {
    "down": closed_port,
    "slow_5s": lambda: receiver(delay_s=5),
    "refusing_503": lambda: receiver(status=503),
}
PAIRED_CALLS = 8


def timed(call: Callable[[], str]) -> tuple[Outcome, float]:
    started = time.perf_counter()
    result = outcome_of(call)
    return result, time.perf_counter() - started


@pytest.mark.parametrize("collector", list(COLLECTORS))
def test_a_faulty_collector_neither_breaks_nor_slows_the_calls(
    collector: str, quick_exports: None
) -> None:
    messages = history()
    with running_simulator(FAST) as sim, COLLECTORS[collector]() as (endpoint, otlp):
        telemetry = configure_telemetry(endpoint=endpoint, set_global=False)
        try:
            wired = wire(telemetry.tracer_provider, meter_provider=telemetry.meter_provider)
            model = chat_model(sim)
            traced = wired.chain(model)
            run_sync(traced, messages, "stream", wired.config)  # warm up; gives the exporter work
            run_sync(model, messages, "stream", None)
            deadline = time.monotonic() + 5
            while otlp is not None and otlp.requests == 0 and time.monotonic() < deadline:
                time.sleep(0.01)  # an export is now under way (or waiting on a slow collector)
            with_it, without = [], []
            for _ in range(PAIRED_CALLS):  # interleaved: machine noise hits both alike
                with_it.append(timed(lambda: run_sync(traced, messages, "stream", wired.config)))
                without.append(timed(lambda: run_sync(model, messages, "stream", None)))
        finally:
            telemetry.shutdown()

    assert otlp is None or otlp.requests > 0
    assert [result for result, _ in with_it] == [result for result, _ in without]
    assert all(result[0] == "answer" for result, _ in with_it)
    with_s = statistics.median(seconds for _, seconds in with_it)
    without_s = statistics.median(seconds for _, seconds in without)
    assert with_s <= without_s + COLLECTOR_SLOWDOWN_ALLOWED_S
    assert max(seconds for _, seconds in with_it) < 1  # nobody waited for the collector
    wired.assert_nothing_left_open()
    assert len(wired.records) == PAIRED_CALLS + 1


# --- the caller passes bad input --------------------------------------------------------------

BAD_INPUTS: dict[str, tuple[Callable[[], object], type[Exception], str]] = {
    "none": (lambda: None, TypeError, "got NoneType"),
    "generator": (lambda: (m for m in [HumanMessage("a")]), TypeError, "got generator"),
    "nested_list": (lambda: [[HumanMessage("a")]], TypeError, "Message 0: .* got list"),
    "object": (lambda: [HumanMessage("a"), object()], TypeError, "Message 1: .* got object"),
    "unknown_role": (
        lambda: [{"role": "critic", "content": "x"}],
        ValueError,
        "Message 0: unknown role 'critic'",
    ),
    "tool_without_id": (
        lambda: [{"role": "user", "content": "q"}, {"role": "tool", "content": "x"}],
        ValueError,
        r"Message 1 \(tool\)",
    ),
    "bytes_content": (
        lambda: [{"role": "user", "content": b"x"}],
        ValueError,
        r"Message 0 \(user\): content must be",
    ),
}
ENTRY_POINTS: dict[str, Callable[[PriorityTrimmer, object, Any], object]] = {
    "invoke_in_a_chain": lambda trimmer, value, config: (
        trimmer.with_config(run_name="trim") | (lambda messages: messages)
    ).invoke(value, config),
    "ainvoke": lambda trimmer, value, config: asyncio.run(trimmer.ainvoke(value, config)),
    "batch": lambda trimmer, value, config: trimmer.batch([value], config),
    "stream": lambda trimmer, value, config: list(trimmer.stream(value, config)),
    "pre_model_hook": lambda trimmer, value, config: trimmer.as_pre_model_hook()(
        {"messages": value}
    ),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("bad", list(BAD_INPUTS))
def test_bad_input_gets_the_same_clear_error_through_every_entry_point(
    bad: str, entry: str, agent_latency: WithAgentLatency
) -> None:
    make, error, pattern = BAD_INPUTS[bad]
    with pytest.raises(error, match=pattern) as direct:
        agent_latency.trimmer.trim(make())
    with pytest.raises(error) as through:
        ENTRY_POINTS[entry](agent_latency.trimmer, make(), agent_latency.config)

    assert str(through.value) == str(direct.value)
    assert agent_latency.ledger.open == 0 and agent_latency.handler.open_runs == 0


def test_a_tool_result_answering_no_call_is_dropped_with_a_warning_naming_its_index(
    agent_latency: WithAgentLatency, caplog: pytest.LogCaptureFixture
) -> None:
    conversation = [
        {"role": "user", "content": "Where is my order?"},
        {"role": "tool", "tool_call_id": "call_unknown", "content": "secret order data"},
        {"role": "user", "content": "Hello?"},
    ]
    sent = agent_latency.trimmer.invoke(conversation, agent_latency.config)

    assert [message.type for message in sent] == ["human", "human"]
    assert "at message index(es) [1]" in caplog.text
    assert "secret order data" not in caplog.text
