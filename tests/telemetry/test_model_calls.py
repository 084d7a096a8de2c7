"""LatencyCallbackHandler: spans, events, metrics, logs and records of model calls."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult, LLMResult
from langchain_core.tools import tool
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanKind, StatusCode
from support.otlp_receiver import OTLPReceiver
from support.simulators import chat_openai_of

from agent_latency import (
    LatencyCallbackHandler,
    LatencyRecord,
    MetricsSettings,
    RunContextProvider,
    Settings,
    StreamingSettings,
    configure_telemetry,
    semconv,
)
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.telemetry import _model_call as _callbacks

MS = 1_000_000  # nanoseconds


class FakeClock:
    """Stands in for the handler's clock; the scripted model moves it forward."""

    def __init__(self) -> None:
        self.now_ns = 1_000 * MS

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, ms: float) -> None:
        self.now_ns += int(ms * MS)


Step = tuple[float, AIMessageChunk | BaseException]
"""Milliseconds to wait, then the chunk to stream or the exception to raise."""


class ScriptedChat(BaseChatModel):
    """A chat model that streams a script of chunks, moving a fake clock between them."""

    model: str = "scripted-1"
    temperature: float = 0.3
    max_tokens: int = 64
    steps: list[Any]
    clock: Any = None
    pause_s: float = 0.0  # real sleep between async chunks, to give cancellation a chance

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _wait(self, ms: float) -> None:
        if self.clock is not None:
            self.clock.advance(ms)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for wait_ms, item in self.steps:
            self._wait(wait_ms)
            if isinstance(item, BaseException):
                raise item
            yield ChatGenerationChunk(message=item)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for wait_ms, item in self.steps:
            await asyncio.sleep(self.pause_s)
            self._wait(wait_ms)
            if isinstance(item, BaseException):
                raise item
            yield ChatGenerationChunk(message=item)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        merged: AIMessageChunk | None = None
        for wait_ms, item in self.steps:
            self._wait(wait_ms)
            if isinstance(item, BaseException):
                raise item
            merged = item if merged is None else merged + item
        assert merged is not None
        message = AIMessage(
            content=merged.content,
            usage_metadata=merged.usage_metadata,
            response_metadata=merged.response_metadata,
            id="resp-blocking",
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


def text(content: str, **fields: Any) -> AIMessageChunk:
    return AIMessageChunk(content=content, **fields)


def final_chunk(
    input_tokens: int = 11, output_tokens: int = 3, response_id: str = "r-1"
) -> AIMessageChunk:
    """An empty last chunk carrying usage and response metadata, as OpenAI's stream ends."""
    metadata = {"finish_reason": "stop", "model_name": "scripted-1-0613"}
    if response_id:
        metadata["id"] = response_id
    return AIMessageChunk(
        content="",
        usage_metadata={
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        },
        response_metadata=metadata,
    )


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(_callbacks, "_now_ns", fake)
    return fake


@pytest.fixture
def records() -> list[LatencyRecord]:
    return []


@pytest.fixture
def handler(
    tracer_provider: Any, meter_provider: Any, records: list[LatencyRecord]
) -> LatencyCallbackHandler:
    return LatencyCallbackHandler(
        tracer_provider=tracer_provider, meter_provider=meter_provider, on_record=records.append
    )


def config(handler: LatencyCallbackHandler) -> Any:
    return {"callbacks": [handler]}


def only_span(exporter: InMemorySpanExporter, name: str) -> Any:
    spans = [span for span in exporter.get_finished_spans() if span.name == name]
    assert len(spans) == 1, [span.name for span in exporter.get_finished_spans()]
    return spans[0]


def test_streamed_call_gets_one_client_span_with_exact_timings(
    clock: FakeClock,
    handler: LatencyCallbackHandler,
    span_exporter: InMemorySpanExporter,
    metric_points: Callable[[str], list[Any]],
    records: list[LatencyRecord],
) -> None:
    model = ScriptedChat(
        clock=clock,
        steps=[(300, text("Hel")), (10, text("lo")), (900, text(" there")), (5, final_chunk())],
    )
    chunks = list(model.stream("hi", config=config(handler)))

    assert "".join(str(chunk.content) for chunk in chunks) == "Hello there"
    span = only_span(span_exporter, "chat scripted-1")
    attributes = span.attributes
    assert span.kind is SpanKind.CLIENT
    assert attributes[gen_ai.GEN_AI_OPERATION_NAME] == "chat"
    assert attributes[gen_ai.GEN_AI_PROVIDER_NAME] == "scripted"
    assert attributes[gen_ai.GEN_AI_REQUEST_MODEL] == "scripted-1"
    assert attributes[gen_ai.GEN_AI_REQUEST_TEMPERATURE] == 0.3
    assert attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert attributes[gen_ai.GEN_AI_REQUEST_STREAM] is True
    assert attributes[gen_ai.GEN_AI_RESPONSE_MODEL] == "scripted-1-0613"
    assert attributes[gen_ai.GEN_AI_RESPONSE_ID] == "r-1"
    assert attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 11
    assert attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
    assert attributes[gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == pytest.approx(0.3)
    assert attributes[semconv.TTFT_MS] == pytest.approx(300)
    assert attributes[semconv.TOTAL_MS] == pytest.approx(1215)
    # The empty last chunk carries no content: three content chunks, not four.
    assert attributes[semconv.CHUNKS] == 3
    assert attributes[semconv.MAX_CHUNK_GAP_MS] == pytest.approx(900)
    assert attributes[semconv.STALLS] == 1
    assert attributes[semconv.TTFT_LEVEL] == "ok"
    assert attributes[semconv.OUTCOME] == "ok"
    assert attributes[semconv.ESTIMATED_INPUT_TOKENS] > 0
    assert error_attributes.ERROR_TYPE not in attributes
    assert span.status.status_code is StatusCode.UNSET
    events = [(event.name, dict(event.attributes or {})) for event in span.events]
    assert events == [
        (semconv.FIRST_CHUNK_EVENT, {}),
        (semconv.STALL_EVENT, {semconv.STALL_GAP_MS: 900.0, semconv.STALL_AFTER_CHUNKS: 2}),
    ]

    (duration,) = metric_points("gen_ai.client.operation.duration")
    assert duration.sum == pytest.approx(1.215)
    assert tuple(duration.explicit_bounds) == semconv.DURATION_BUCKETS_S
    assert dict(duration.attributes) == {
        gen_ai.GEN_AI_OPERATION_NAME: "chat",
        gen_ai.GEN_AI_PROVIDER_NAME: "scripted",
        gen_ai.GEN_AI_REQUEST_MODEL: "scripted-1",
        gen_ai.GEN_AI_RESPONSE_MODEL: "scripted-1-0613",
    }
    (ttft,) = metric_points("gen_ai.client.operation.time_to_first_chunk")
    assert ttft.sum == pytest.approx(0.3)
    (per_chunk,) = metric_points("gen_ai.client.operation.time_per_output_chunk")
    assert per_chunk.count == 1
    assert per_chunk.sum == pytest.approx(0.455)  # (10 + 900) ms over 2 gaps
    usage = {
        point.attributes[gen_ai.GEN_AI_TOKEN_TYPE]: point.sum
        for point in metric_points("gen_ai.client.token.usage")
    }
    assert usage == {"input": 11, "output": 3}
    assert tuple(metric_points("gen_ai.client.token.usage")[0].explicit_bounds) == (
        semconv.TOKEN_USAGE_BUCKETS
    )
    (stalls,) = metric_points(semconv.STALLS_METRIC)
    assert stalls.value == 1

    (record,) = records
    assert record.model == "scripted-1"
    assert record.streaming is True
    assert (record.ttft_ms, record.total_ms, record.chunks) == (300, 1215, 3)
    assert (record.stalls, record.max_chunk_gap_ms) == (1, 900)
    assert (record.input_tokens, record.output_tokens) == (11, 3)
    assert record.estimated_input_tokens == attributes[semconv.ESTIMATED_INPUT_TOKENS]
    assert (record.ttft_level, record.error_type, record.outcome) == ("ok", None, "ok")
    assert handler.open_runs == 0


def test_first_chunk_is_the_first_with_content_or_a_tool_call(
    clock: FakeClock, handler: LatencyCallbackHandler, records: list[LatencyRecord]
) -> None:
    role_only = AIMessageChunk(content="")
    tool_call = AIMessageChunk(
        content="", tool_call_chunks=[{"name": "add", "args": "", "id": "c1", "index": 0}]
    )
    model = ScriptedChat(clock=clock, steps=[(100, role_only), (150, tool_call), (5, text("x"))])
    list(model.stream("hi", config=config(handler)))
    assert records[0].ttft_ms == pytest.approx(250)
    assert records[0].chunks == 2


def test_blocking_call_has_total_as_ttft_and_no_first_chunk_figures(
    clock: FakeClock,
    handler: LatencyCallbackHandler,
    span_exporter: InMemorySpanExporter,
    metric_points: Callable[[str], list[Any]],
    records: list[LatencyRecord],
) -> None:
    model = ScriptedChat(
        clock=clock, steps=[(400, text("Hello")), (0, final_chunk(response_id=""))]
    )
    assert model.invoke("hi", config=config(handler)).content == "Hello"

    attributes = only_span(span_exporter, "chat scripted-1").attributes
    assert attributes[gen_ai.GEN_AI_REQUEST_STREAM] is False
    assert gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in attributes
    assert attributes[semconv.TTFT_MS] == attributes[semconv.TOTAL_MS] == pytest.approx(400)
    assert attributes[semconv.CHUNKS] == 0
    assert attributes[gen_ai.GEN_AI_RESPONSE_ID] == "resp-blocking"
    assert metric_points("gen_ai.client.operation.time_to_first_chunk") == []
    assert metric_points("gen_ai.client.operation.duration")[0].sum == pytest.approx(0.4)
    assert records[0].streaming is False


@pytest.mark.parametrize(
    ("ttft_ms", "level", "log_level"),
    [(1000, "ok", None), (1500, "warn", logging.WARNING), (3000, "error", logging.ERROR)],
)
def test_ttft_thresholds_set_the_level_and_log_with_a_hint(
    clock: FakeClock,
    handler: LatencyCallbackHandler,
    span_exporter: InMemorySpanExporter,
    metric_points: Callable[[str], list[Any]],
    caplog: pytest.LogCaptureFixture,
    ttft_ms: float,
    level: str,
    log_level: int | None,
) -> None:
    model = ScriptedChat(clock=clock, steps=[(ttft_ms, text("a")), (0, final_chunk(42, 1))])
    with caplog.at_level(logging.INFO, logger="agent_latency"):
        list(model.stream("hi", config=config(handler)))

    assert only_span(span_exporter, "chat scripted-1").attributes[semconv.TTFT_LEVEL] == level
    slow = [record for record in caplog.records if record.levelno >= logging.WARNING]
    breaches = metric_points(semconv.TTFT_BREACHES_METRIC)
    if log_level is None:
        assert slow == []
        assert breaches == []
        return
    (message,) = slow
    assert message.levelno == log_level
    assert message.name == "agent_latency.telemetry"
    line = message.getMessage()
    for expected in ("scripted-1", f"{ttft_ms:.0f} ms", "42 input tokens", "no trim", "Hint"):
        assert expected in line
    (breach,) = breaches
    assert breach.attributes[semconv.TTFT_LEVEL] == level


def test_log_every_request_writes_one_info_line_per_call(
    tracer_provider: Any, meter_provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    handler = LatencyCallbackHandler.from_settings(
        Settings(metrics=MetricsSettings(log_every_request=True)),
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )
    model = GenericFakeChatModel(messages=iter([AIMessage(content="one two")] * 2))
    with caplog.at_level(logging.INFO, logger="agent_latency"):
        model.invoke("hi", config=config(handler))
        list(model.stream("hi", config=config(handler)))
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(lines) == 2
    assert all(line.startswith("model call: ") and "outcome=ok" in line for line in lines)


def test_from_settings_takes_thresholds_and_overrides() -> None:
    settings = Settings(
        metrics=MetricsSettings(ttft_warn_ms=100, ttft_error_ms=200, log_every_request=False),
        streaming=StreamingSettings(chunk_timeout_ms=50),
    )
    handler = LatencyCallbackHandler.from_settings(settings, ttft_error_ms=900)
    assert (handler.ttft_warn_ms, handler.ttft_error_ms, handler.chunk_timeout_ms) == (
        100,
        900,
        50,
    )
    assert handler.log_every_request is False


def test_constructor_defaults_agree_with_the_default_settings() -> None:
    built, configured = LatencyCallbackHandler(), LatencyCallbackHandler.from_settings(Settings())
    assert built.log_every_request is configured.log_every_request is True
    assert repr(built) == repr(configured)


def test_record_ttft_off_keeps_durations_and_stalls_but_no_ttft(
    clock: FakeClock,
    tracer_provider: Any,
    meter_provider: Any,
    span_exporter: InMemorySpanExporter,
    metric_points: Callable[[str], list[Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings(
        metrics=MetricsSettings(ttft_warn_ms=100, ttft_error_ms=200),
        streaming=StreamingSettings(record_ttft=False),
    )
    handler = LatencyCallbackHandler.from_settings(
        settings, tracer_provider=tracer_provider, meter_provider=meter_provider
    )
    assert handler.record_ttft is False
    model = ScriptedChat(
        clock=clock, steps=[(300, text("a")), (900, text("b")), (5, final_chunk())]
    )

    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        list(model.stream("hi", config=config(handler)))

    attributes = only_span(span_exporter, "chat scripted-1").attributes
    assert attributes[semconv.TOTAL_MS] == pytest.approx(1205)
    assert attributes[semconv.STALLS] == 1
    for absent in (
        semconv.TTFT_MS,
        semconv.TTFT_LEVEL,
        gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
    ):
        assert absent not in attributes
    events = [event.name for event in only_span(span_exporter, "chat scripted-1").events]
    assert semconv.FIRST_CHUNK_EVENT not in events
    assert metric_points("gen_ai.client.operation.time_to_first_chunk") == []
    assert metric_points("gen_ai.client.operation.duration")
    assert not [r for r in caplog.records if "slow first token" in r.getMessage()]


async def _save_record_later(record: LatencyRecord) -> None:
    await asyncio.sleep(0)


class _RecordSink:
    async def __call__(self, record: LatencyRecord) -> None:
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("options", "named", "raised"),
    [
        ({"ttft_warn_ms": 0}, "ttft_warn_ms", ValueError),
        ({"ttft_error_ms": float("nan")}, "ttft_error_ms", ValueError),
        ({"ttft_warn_ms": 500, "ttft_error_ms": 400}, "ttft_error_ms", ValueError),
        ({"chunk_timeout_ms": True}, "chunk_timeout_ms", TypeError),
        # An OverflowError ("cannot convert float infinity to integer") named nothing.
        ({"chunk_timeout_ms": 1e308}, "chunk_timeout_ms", ValueError),
        # AttributeErrors ("'int' object has no attribute 'get_tracer'") named nothing.
        ({"tracer_provider": 5}, "tracer_provider", TypeError),
        ({"meter_provider": "global"}, "meter_provider", TypeError),
        ({"capture_content": "yes"}, "capture_content", TypeError),
        ({"on_record": 3}, "on_record", TypeError),
        # Called, it returns a coroutine nothing awaits: every record was lost without a word.
        ({"on_record": _save_record_later}, "on_record", TypeError),
        ({"on_record": _RecordSink()}, "on_record", TypeError),
        ({"max_open_runs": 0}, "max_open_runs", ValueError),
    ],
)
def test_invalid_options_are_refused_by_name(
    options: dict[str, Any], named: str, raised: type[Exception]
) -> None:
    # A value of the wrong type is a TypeError, one of the right type out of bounds a ValueError.
    with pytest.raises(raised, match=named):
        LatencyCallbackHandler(**options)


def test_failed_call_records_error_type_and_re_raises_the_same_exception(
    handler: LatencyCallbackHandler,
    span_exporter: InMemorySpanExporter,
    metric_points: Callable[[str], list[Any]],
    records: list[LatencyRecord],
) -> None:
    boom = ConnectionResetError("peer reset")
    model = ScriptedChat(steps=[(0, text("a")), (0, boom)])
    with pytest.raises(ConnectionResetError) as raised:
        list(model.stream("hi", config=config(handler)))
    assert raised.value is boom

    span = only_span(span_exporter, "chat scripted-1")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ConnectionResetError"
    assert span.attributes[error_attributes.ERROR_TYPE] == "ConnectionResetError"
    assert span.attributes[semconv.OUTCOME] == "error"
    assert span.attributes[semconv.CHUNKS] == 1
    (duration,) = metric_points("gen_ai.client.operation.duration")
    assert duration.attributes[error_attributes.ERROR_TYPE] == "ConnectionResetError"
    assert records[0].error_type == "ConnectionResetError"
    assert handler.open_runs == 0


def test_failure_before_any_chunk_has_no_ttft(
    handler: LatencyCallbackHandler, records: list[LatencyRecord]
) -> None:
    model = ScriptedChat(steps=[(0, TimeoutError("read timed out"))])
    with pytest.raises(TimeoutError):
        model.invoke("hi", config=config(handler))
    assert (records[0].ttft_ms, records[0].ttft_level, records[0].outcome) == (None, None, "error")


def test_abandoned_sync_stream_ends_its_span_without_error(
    handler: LatencyCallbackHandler, span_exporter: InMemorySpanExporter
) -> None:
    model = ScriptedChat(steps=[(0, text(str(i))) for i in range(10)])
    for _ in model.stream("hi", config=config(handler)):
        break

    span = only_span(span_exporter, "chat scripted-1")
    assert span.attributes[semconv.OUTCOME] == "abandoned"
    assert span.attributes[semconv.CHUNKS] == 1
    assert span.status.status_code is StatusCode.UNSET
    assert handler.open_runs == 0


async def test_abandoned_async_stream_ends_its_span(
    handler: LatencyCallbackHandler, span_exporter: InMemorySpanExporter
) -> None:
    model = ScriptedChat(steps=[(0, text(str(i))) for i in range(10)])
    stream = model.astream("hi", config=config(handler))
    async for _ in stream:
        break
    await stream.aclose()  # type: ignore[attr-defined]
    assert only_span(span_exporter, "chat scripted-1").attributes[semconv.OUTCOME] == "abandoned"
    assert handler.open_runs == 0


async def test_cancelled_async_stream_ends_its_span_as_cancelled(
    handler: LatencyCallbackHandler, span_exporter: InMemorySpanExporter
) -> None:
    model = ScriptedChat(steps=[(0, text(str(i))) for i in range(50)], pause_s=0.01)
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in model.astream("hi", config=config(handler)):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    span = only_span(span_exporter, "chat scripted-1")
    assert span.attributes[semconv.OUTCOME] == "cancelled"
    assert span.attributes[error_attributes.ERROR_TYPE] == "asyncio.exceptions.CancelledError"
    assert span.status.status_code is StatusCode.ERROR
    assert handler.open_runs == 0


async def test_cancelled_ainvoke_is_ended_when_its_task_ends(
    handler: LatencyCallbackHandler, span_exporter: InMemorySpanExporter
) -> None:
    # LangChain reports no error for a cancelled ainvoke: the task watch ends the span. The
    # answer lasts 5 s, so that a loaded machine cannot finish it before it is seen running
    # (50 steps once did, in the lowest-versions job, and the wait below timed out).
    model = ScriptedChat(
        steps=[(0, text(str(i))) for i in range(500)], pause_s=0.01, streaming=True
    )
    task = asyncio.create_task(model.ainvoke("hi", config=config(handler)))
    async with asyncio.timeout(10):
        while handler.open_runs == 0:
            await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)  # done-callbacks run on the next loop iteration

    span = only_span(span_exporter, "chat scripted-1")
    assert span.attributes[semconv.OUTCOME] == "cancelled"
    assert handler.open_runs == 0


def test_handler_failures_are_swallowed_and_logged(
    meter_provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class BrokenTracer:
        def start_span(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("tracer down")

    class BrokenProvider:
        def get_tracer(self, *args: Any, **kwargs: Any) -> BrokenTracer:
            return BrokenTracer()

    def failing_record(record: LatencyRecord) -> None:
        raise KeyError("consumer bug")

    broken = LatencyCallbackHandler(
        tracer_provider=BrokenProvider(),  # type: ignore[arg-type]
        meter_provider=meter_provider,
    )
    model = GenericFakeChatModel(messages=iter([AIMessage(content="fine answer")] * 2))
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        assert model.invoke("hi", config=config(broken)).content == "fine answer"
        recording = LatencyCallbackHandler(meter_provider=meter_provider, on_record=failing_record)
        assert model.invoke("hi", config=config(recording)).content == "fine answer"
    messages = [record.getMessage() for record in caplog.records]
    assert any("on_chat_model_start failed with RuntimeError" in m for m in messages)
    assert any("on_record failed with KeyError" in m for m in messages)
    assert broken.open_runs == recording.open_runs == 0


def test_a_failing_measurement_still_ends_the_call_and_its_parent(
    handler: LatencyCallbackHandler,
    span_exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken_estimate(messages: Any) -> int:
        raise RuntimeError("estimation bug")

    monkeypatch.setattr(handler._calls, "_estimate_tokens", broken_estimate)
    model = GenericFakeChatModel(messages=iter([AIMessage(content="fine answer")]))
    with caplog.at_level(logging.DEBUG, logger="agent_latency"):
        assert model.invoke("hi", config=config(handler)).content == "fine answer"
        # A call left open under a chain is ended with it; its failure spares the chain's span.
        chain_id, call_id = uuid.uuid4(), uuid.uuid4()
        handler.on_chain_start({"name": "outer"}, {}, run_id=chain_id)
        handler.on_chat_model_start(
            {}, [[HumanMessage("hi")]], run_id=call_id, parent_run_id=chain_id
        )
        handler.on_chain_end({}, run_id=chain_id)
    outcomes = sorted(
        (span.name, span.attributes[semconv.OUTCOME]) for span in span_exporter.get_finished_spans()
    )
    assert outcomes == [("chain outer", "ok"), ("chat", "abandoned"), ("chat", "ok")]
    assert handler.open_runs == 0
    messages = [record.getMessage() for record in caplog.records]
    assert "agent-latency: on_llm_end failed" in messages
    assert "agent-latency: ending a child run failed" in messages


def test_odd_trim_event_data_is_ignored(handler: LatencyCallbackHandler) -> None:
    run_id = uuid.uuid4()
    handler.on_chain_start({"name": "seq"}, {}, run_id=run_id)
    for data in (None, "text", SimpleNamespace(tokens_before=1), object()):
        handler.on_custom_event("agent_latency.trim", data, run_id=run_id)
    assert handler._tree.get(run_id).pending_trim is None  # type: ignore[union-attr]
    handler.on_chain_end({}, run_id=run_id)
    assert handler.open_runs == 0


def test_eviction_bounds_open_runs_and_ends_the_oldest(
    tracer_provider: Any,
    span_exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, max_open_runs=2)
    model = ScriptedChat(steps=[(0, text(str(i))) for i in range(3)])
    streams = [model.stream("hi", config=config(handler)) for _ in range(3)]
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        for stream in streams:
            next(stream)  # started, held open, never finished
    assert handler.open_runs == 2
    (evicted,) = span_exporter.get_finished_spans()
    assert evicted.attributes[semconv.OUTCOME] == "abandoned"
    assert any("keeps at most 2 open runs" in r.getMessage() for r in caplog.records)
    for stream in streams:
        stream.close()
    assert handler.open_runs == 0
    assert len(span_exporter.get_finished_spans()) == 3


def test_v2_stream_events_are_timed_like_tokens(clock: FakeClock) -> None:
    records: list[LatencyRecord] = []
    handler = LatencyCallbackHandler(on_record=records.append)
    run_id = uuid.uuid4()
    handler.on_chat_model_start({}, [[HumanMessage("hi")]], run_id=run_id)
    clock.advance(120)
    handler.on_stream_event({"event": "message-start", "role": "ai", "id": "m"}, run_id=run_id)
    clock.advance(30)
    # Each event a new object, as LangChain's chunks_to_events makes them (the same object
    # again is the same event delivered to a handler listed twice).
    delta = {"event": "content-block-delta", "index": 0, "delta": {"type": "text-delta"}}
    handler.on_stream_event(dict(delta), run_id=run_id)
    clock.advance(10)
    handler.on_stream_event(dict(delta), run_id=run_id)
    handler.on_llm_end(LLMResult(generations=[[]]), run_id=run_id)
    assert (records[0].ttft_ms, records[0].chunks, records[0].streaming) == (150, 2, True)


def test_repr_and_provider_protocol(handler: LatencyCallbackHandler) -> None:
    assert isinstance(handler, RunContextProvider)
    assert handler.otel_context_for_run(uuid.uuid4()) is None
    assert repr(handler).startswith("LatencyCallbackHandler(ttft_warn_ms=1200")
    assert "log_every_request=True, record_ttft=True" in repr(handler)
    quiet = LatencyCallbackHandler(log_every_request=False, record_ttft=False)
    assert "log_every_request=False, record_ttft=False" in repr(quiet)


def test_a_long_lived_run_forgets_its_ended_children(handler: LatencyCallbackHandler) -> None:
    root = uuid.uuid4()
    handler.on_chain_start({"name": "agent loop"}, {}, run_id=root)
    for _ in range(1000):
        step = uuid.uuid4()
        handler.on_chain_start({"name": "step"}, {}, run_id=step, parent_run_id=root)
        handler.on_chain_end({}, run_id=step)
    state = handler._tree.get(root)
    assert state is not None and len(state.children) < 256
    handler.on_chain_end({}, run_id=root)
    assert handler.open_runs == 0


def test_the_estimate_of_a_call_with_bound_tools_counts_the_tools(
    otlp_receiver: OTLPReceiver,
) -> None:
    # A handler attached to an agent without our trimmer counted the messages only: 13 tokens
    # against the server's 144, an input_tokens_ratio of 11 that suggests a broken tokenizer.
    @tool
    def lookup_invoice(number: str, include_lines: bool = False) -> str:
        """Looks up an invoice by its number and returns its status, total and due date."""
        return "paid"

    @tool
    def refund(invoice: str, amount: float, reason: str) -> str:
        """Refunds part or all of an invoice to the customer's original payment method."""
        return "refunded"

    records: list[LatencyRecord] = []
    # The server counts with the handler's own vocabulary: the two counts can agree exactly.
    counting_like_us = SimulatorConfig(overhead_ms=1, prefill_ms_per_token=0, tokenizer="cl100k")
    with running_simulator(counting_like_us) as sim:
        telemetry = configure_telemetry(
            exporter="otlp-http", endpoint=otlp_receiver.endpoint, set_global=False
        )
        model = chat_openai_of(sim, max_retries=0).bind_tools([lookup_invoice, refund])
        handler = telemetry.handler(on_record=records.append)
        model.invoke("Is invoice 42 paid?", config=config(handler))
        telemetry.shutdown()

    (record,) = records
    assert record.input_tokens is not None and record.input_tokens > 100  # the tools are most
    assert record.estimated_input_tokens == record.input_tokens
    (chat,) = otlp_receiver.spans()
    assert chat.attributes[semconv.ESTIMATED_INPUT_TOKENS] == record.input_tokens
    assert chat.attributes[semconv.INPUT_TOKENS_RATIO] == 1.0
