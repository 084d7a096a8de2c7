"""The handler's timing function, and fixes: blocking-call hint, per-handler warn-once,
completion models, a bounded shutdown, and the hint when the fixed part exceeds the budget."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any
from uuid import uuid4

import pytest
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.language_models.llms import LLM
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, GenerationChunk, LLMResult
from langchain_core.tools import tool
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from agent_latency import (
    LatencyCallbackHandler,
    LatencyRecord,
    PriorityTrimmer,
    Settings,
    configure_telemetry,
    semconv,
)
from agent_latency.telemetry import Telemetry
from agent_latency.telemetry import _model_call as handler_module
from agent_latency.telemetry._timing import call_timing, ttft_level

MS = 1_000_000


@pytest.fixture
def ticking_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler's clock moves 1,000 ms forward at every reading."""
    readings = iter(range(0, 10**15, 1_000 * MS))
    monkeypatch.setattr(handler_module, "_now_ns", lambda: next(readings))


def handler_for(
    tracer_provider: Any, meter_provider: Any, records: list[LatencyRecord] | None = None
) -> LatencyCallbackHandler:
    return LatencyCallbackHandler(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        ttft_warn_ms=500,
        ttft_error_ms=5_000,
        log_every_request=False,
        on_record=None if records is None else records.append,
    )


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The handler's warnings (the trimmer's own go to its logger)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name == "agent_latency.telemetry"
    ]


# -- the timing function ---------------------------------------------------------------------


def timing(**overrides: Any) -> Any:
    readings: dict[str, Any] = {
        "started_ns": 0,
        "end_ns": 1_215 * MS,
        "first_chunk_ns": 300 * MS,
        "last_chunk_ns": 1_210 * MS,
        "chunks": 3,
        "failed": False,
        "record_ttft": True,
        "warn_ms": 1_200,
        "error_ms": 2_500,
    }
    return call_timing(**{**readings, **overrides})


def test_timing_of_a_streamed_call() -> None:
    result = timing()
    assert (result.total_ms, result.ttft_ms, result.first_chunk_s) == (1215, 300, 0.3)
    assert result.mean_chunk_gap_s == pytest.approx(0.455)
    assert result.ttft_level == "ok"


def test_timing_of_a_call_without_chunks_is_the_whole_answer() -> None:
    result = timing(first_chunk_ns=None, chunks=0)
    assert (result.ttft_ms, result.first_chunk_s, result.mean_chunk_gap_s) == (1215, None, None)
    assert result.ttft_level == "warn"
    # A call that failed before any content has no TTFT; its wait, above a threshold, is its
    # level. One its consumer left has neither: the wait was the consumer's.
    failed = timing(first_chunk_ns=None, chunks=0, failed=True, gave_up=True)
    assert (failed.ttft_ms, failed.ttft_level) == (None, "warn")
    failed_fast = timing(first_chunk_ns=None, chunks=0, failed=True, gave_up=True, end_ns=900 * MS)
    assert (failed_fast.ttft_ms, failed_fast.ttft_level) == (None, None)
    left = timing(first_chunk_ns=None, chunks=0, failed=True)
    assert (left.ttft_ms, left.ttft_level) == (None, None)


def test_timing_without_ttft_keeps_the_durations() -> None:
    result = timing(record_ttft=False)
    assert (result.ttft_ms, result.first_chunk_s, result.ttft_level) == (None, None, None)
    assert result.total_ms == 1215 and result.mean_chunk_gap_s == pytest.approx(0.455)


@pytest.mark.parametrize(
    ("ttft_ms", "level"), [(None, None), (1200, "ok"), (1200.5, "warn"), (2501, "error")]
)
def test_ttft_level_is_strictly_above_the_thresholds(ttft_ms: float | None, level: str) -> None:
    assert ttft_level(ttft_ms, 1200, 2500) == level


# -- a slow blocking call is not a slow first token -------------------------------------------


def test_slow_blocking_call_hints_at_streaming_and_is_no_ttft_breach(
    ticking_clock: None,
    tracer_provider: Any,
    meter_provider: Any,
    metric_points: Callable[[str], list[Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler = handler_for(tracer_provider, meter_provider)
    model = GenericFakeChatModel(messages=iter([AIMessage("whole answer")]))
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        model.invoke("hi", config={"callbacks": [handler]})

    (message,) = warnings_of(caplog)
    assert message.startswith("slow answer: ")
    assert "blocking call" in message and "arrives with the whole answer" in message
    assert "stream" in message.split("Hint:")[1]
    assert "token_budget" not in message and "slow first token" not in message
    assert metric_points(semconv.TTFT_BREACHES_METRIC) == []


def test_slow_streamed_call_is_a_ttft_breach_with_the_trim_hint(
    ticking_clock: None,
    tracer_provider: Any,
    meter_provider: Any,
    metric_points: Callable[[str], list[Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler = handler_for(tracer_provider, meter_provider)
    model = GenericFakeChatModel(messages=iter([AIMessage("streamed answer")]))
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        list(model.stream("hi", config={"callbacks": [handler]}))

    (message,) = warnings_of(caplog)
    assert message.startswith("slow first token: ")
    assert "lower prompt.token_budget" in message
    (breach,) = metric_points(semconv.TTFT_BREACHES_METRIC)
    assert breach.attributes[semconv.TTFT_LEVEL] == "warn"


# -- the hint names a fixed part over the budget -----------------------------------------------


@tool
def lookup_invoice(invoice_id: str, include_lines: bool, currency: str, region: str) -> str:
    """Looks up an invoice by id in the billing system and returns its lines, totals, taxes,
    currency, due date, payment status and the customer's billing address, for the region."""
    return invoice_id


def test_hint_names_the_fixed_part_when_it_alone_exceeds_the_budget(
    ticking_clock: None,
    tracer_provider: Any,
    span_exporter: InMemorySpanExporter,
    meter_provider: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler = handler_for(tracer_provider, meter_provider)
    trimmer = PriorityTrimmer(budget=60, tools=[lookup_invoice])
    model = GenericFakeChatModel(messages=iter([AIMessage("answer")]))
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        list((trimmer | model).stream([HumanMessage("hi")], config={"callbacks": [handler]}))

    (chat,) = [s for s in span_exporter.get_finished_spans() if s.name.startswith("chat")]
    cause = chat.attributes[semconv.TRIM_OVER_BUDGET_CAUSE]
    assert chat.attributes[semconv.TRIM_OVER_BUDGET] is True
    (message,) = warnings_of(caplog)
    assert cause in message and "tool definitions" in message
    assert "lower prompt.token_budget" not in message
    assert "cannot help" in message


# -- warn once per handler, not per process ---------------------------------------------------


class BrokenProvider:
    """A tracer provider whose tracer fails to start spans."""

    class _Tracer:
        def start_span(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("tracer down")

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        return self._Tracer()


def test_each_handler_reports_its_own_first_failure(caplog: pytest.LogCaptureFixture) -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage("fine")] * 3))
    first = LatencyCallbackHandler(tracer_provider=BrokenProvider())  # type: ignore[arg-type]
    second = LatencyCallbackHandler(tracer_provider=BrokenProvider())  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        for handler in (first, first, second):
            assert model.invoke("hi", config={"callbacks": [handler]}).content == "fine"
    failures = [m for m in warnings_of(caplog) if "on_chat_model_start failed" in m]
    assert len(failures) == 2  # once for each handler, not twice for the first


# -- completion models are traced -------------------------------------------------------------


class StreamingCompletionModel(LLM):
    """A text-in, text-out model that streams its answer one character at a time."""

    answer: str = "abc"

    @property
    def _llm_type(self) -> str:
        return "streaming-completion"

    def _call(self, prompt: str, stop: list[str] | None = None, **kwargs: Any) -> str:
        return self.answer

    def _stream(
        self, prompt: str, stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> Iterator[GenerationChunk]:
        for character in self.answer:
            chunk = GenerationChunk(text=character)
            if run_manager is not None:
                run_manager.on_llm_new_token(character, chunk=chunk)
            yield chunk


def test_completion_model_calls_are_traced_like_chat_calls(
    tracer_provider: Any,
    span_exporter: InMemorySpanExporter,
    meter_provider: Any,
    metric_points: Callable[[str], list[Any]],
) -> None:
    records: list[LatencyRecord] = []
    handler = handler_for(tracer_provider, meter_provider, records)
    config: Any = {"callbacks": [handler]}
    assert FakeListLLM(responses=["plain"]).invoke("complete this", config=config) == "plain"
    streamed = "".join(StreamingCompletionModel().stream("go on", config=config))
    assert streamed == "abc"

    spans = span_exporter.get_finished_spans()
    assert [span.name for span in spans] == ["text_completion", "text_completion"]
    blocking, streaming = (span.attributes for span in spans)
    assert blocking[gen_ai.GEN_AI_OPERATION_NAME] == "text_completion"
    assert blocking[gen_ai.GEN_AI_REQUEST_STREAM] is False
    assert (streaming[gen_ai.GEN_AI_REQUEST_STREAM], streaming[semconv.CHUNKS]) == (True, 3)
    assert [record.outcome for record in records] == ["ok", "ok"]
    assert records[1].ttft_ms is not None and records[1].chunks == 3
    durations = metric_points("gen_ai.client.operation.duration")
    assert {p.attributes[gen_ai.GEN_AI_OPERATION_NAME] for p in durations} == {"text_completion"}
    assert handler.open_runs == 0


def test_completion_output_is_captured_only_when_asked(
    tracer_provider: Any, span_exporter: InMemorySpanExporter
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, capture_content=True)
    FakeListLLM(responses=["plain"]).invoke("complete this", config={"callbacks": [handler]})
    (span,) = span_exporter.get_finished_spans()
    assert "complete this" in span.attributes[gen_ai.GEN_AI_INPUT_MESSAGES]
    assert '"content": "plain"' in span.attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES]


# -- shutdown is bounded ----------------------------------------------------------------------


class BlockingSpanProcessor(SpanProcessor):
    """Its shutdown hangs until released, like a batch processor exporting to a hung collector."""

    def __init__(self, entered: threading.Event, release: threading.Event) -> None:
        self.entered, self.release = entered, release

    def shutdown(self) -> None:
        self.entered.set()
        self.release.wait()


class BlockingMetricReader(MetricReader):
    """Its shutdown hangs until released, like a metric export to a hung collector."""

    def __init__(self, entered: threading.Event, release: threading.Event) -> None:
        super().__init__()
        self.entered, self.release = entered, release

    def _receive_metrics(self, *args: Any, **kwargs: Any) -> None:
        return None

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.entered.set()
        self.release.wait()


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # lets the background shutdown threads finish


def test_shutdown_with_hung_exports_returns_within_its_timeout(
    release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    spans_entered, metrics_entered = threading.Event(), threading.Event()
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(BlockingSpanProcessor(spans_entered, release))
    meter_provider = MeterProvider(
        metric_readers=[BlockingMetricReader(metrics_entered, release)], shutdown_on_exit=False
    )
    telemetry = Telemetry(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        settings=Settings(),
        exporter="otlp-http",
        endpoint="http://127.0.0.1:4318",
    )
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        telemetry.shutdown(timeout_s=0.05)  # returns although neither export ever ends

    assert not release.is_set()
    # Both providers were flushing at once: the second did not wait for the first.
    assert spans_entered.wait(30) and metrics_entered.wait(30)
    (message,) = warnings_of(caplog)
    assert "shutdown gave up after 0.1 s" in message and "http://127.0.0.1:4318" in message


@pytest.mark.parametrize("timeout_s", [-1, float("inf"), "3", True])
def test_shutdown_refuses_a_bad_timeout(timeout_s: Any) -> None:
    telemetry = Telemetry(TracerProvider(), MeterProvider(), Settings(), "none", None)
    with pytest.raises(ValueError, match="timeout_s"):
        telemetry.shutdown(timeout_s=timeout_s)
    telemetry.shutdown()


def test_end_of_call_without_usage_has_no_ratio(
    tracer_provider: Any, span_exporter: InMemorySpanExporter
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    run_id = uuid4()
    handler.on_chat_model_start({}, [[HumanMessage("hi")]], run_id=run_id)
    handler.on_llm_end(
        LLMResult(generations=[[ChatGeneration(message=AIMessage("x"))]]), run_id=run_id
    )
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes[semconv.ESTIMATED_INPUT_TOKENS] > 0
    assert semconv.INPUT_TOKENS_RATIO not in span.attributes


def test_a_second_shutdown_does_nothing(caplog: pytest.LogCaptureFixture) -> None:
    telemetry = configure_telemetry(exporter="none", set_global=False)
    with caplog.at_level(logging.WARNING):
        telemetry.shutdown()
        telemetry.shutdown()  # the SDK would warn "shutdown can only be called once"
    assert caplog.records == []
