"""A model call from its start value to its one outcome: what LangChain said at the start is one
:class:`ModelStart`, and what the call measured is worked out once and reaches the span, the
metrics, the record and the log alike."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from opentelemetry.context import Context
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import server_attributes

from agent_latency import LatencyRecord, semconv
from agent_latency.telemetry import _model_call
from agent_latency.telemetry._log import FailureLog
from agent_latency.telemetry._model_call import CallOptions, ModelCallTracer, ModelStart

MS = 1_000_000  # nanoseconds


def test_a_call_started_from_one_value_ends_with_one_outcome_everywhere(
    tracer_provider: Any,
    meter_provider: Any,
    span_exporter: InMemorySpanExporter,
    metric_points: Callable[[str], list[Any]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = iter([0, 900 * MS, 950 * MS, 1_000 * MS])  # start, two chunks, end
    monkeypatch.setattr(_model_call, "_now_ns", lambda: next(clock))
    records: list[LatencyRecord] = []
    tracer = ModelCallTracer(
        tracer=tracer_provider.get_tracer("test"),
        meter=meter_provider.get_meter("test"),
        options=CallOptions(
            ttft_warn_ms=500,
            ttft_error_ms=2_000,
            chunk_timeout_ms=800,
            capture_content=False,
            log_every_request=False,
            record_ttft=True,
            on_record=records.append,
        ),
        failures=FailureLog(),
    )
    start = ModelStart(
        operation="chat",
        run_id=uuid.uuid4(),
        parent_run_id=None,
        serialized={"kwargs": {"base_url": "http://llm.internal:8080/v1"}},
        metadata={"ls_provider": "openai"},
        params={"model": "m-1", "temperature": 0.2, "max_tokens": 64, "stream": True},
        content=None,
        messages=[HumanMessage("hi")],
    )
    state = tracer.start(start, parent_context=Context(), trim=None)
    tracer.chunk(state, content=True)
    tracer.chunk(state, content=True)
    answer = AIMessage(
        "hello there",
        usage_metadata={"input_tokens": 1_000, "output_tokens": 2, "total_tokens": 1_002},
        response_metadata={"timings": {"prompt_ms": 600.0, "prompt_n": 1_000, "cache_n": 0}},
    )
    with caplog.at_level(logging.WARNING, logger="agent_latency"):
        tracer.finish(state, None, LLMResult(generations=[[ChatGeneration(message=answer)]]))

    (span,) = span_exporter.get_finished_spans()
    attributes = span.attributes or {}
    assert span.name == "chat m-1"
    assert attributes[server_attributes.SERVER_ADDRESS] == "llm.internal"
    assert attributes[gen_ai.GEN_AI_REQUEST_TEMPERATURE] == 0.2
    assert attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] == 64
    (record,) = records
    # The one outcome: 900 ms to the first chunk, 600 of them the server's prefill.
    assert (record.ttft_ms, record.total_ms, record.outcome) == (900.0, 1_000.0, "ok")
    assert (record.server_prefill_ms, record.ttft_remainder_ms) == (600.0, 300.0)
    assert attributes[semconv.TTFT_MS] == record.ttft_ms
    assert attributes[semconv.TTFT_SERVER_PREFILL_MS] == record.server_prefill_ms
    assert attributes[semconv.TTFT_REMAINDER_MS] == record.ttft_remainder_ms
    assert attributes[semconv.OUTCOME] == record.outcome
    assert attributes[semconv.TTFT_LEVEL] == record.ttft_level == "warn"
    (prefill,) = metric_points(semconv.TTFT_SERVER_PREFILL_METRIC)
    (remainder,) = metric_points(semconv.TTFT_REMAINDER_METRIC)
    assert (prefill.sum, remainder.sum) == (0.6, 0.3)
    (breaches,) = metric_points(semconv.TTFT_BREACHES_METRIC)
    assert breaches.value == 1
    (warning,) = [r.getMessage() for r in caplog.records if "slow first token" in r.getMessage()]
    assert "took 900 ms (threshold 500 ms)" in warning
    assert "600 ms prefill of 1,000 uncached tokens, 300 ms client, network and queue" in warning
