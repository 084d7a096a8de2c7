"""The names the handler emits: ours under ``agent_latency.*``, the conventions' version stated."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_latency import LatencyCallbackHandler, semconv

# Values of our attributes, not names.
VALUES = {
    semconv.TOKEN_CACHE_READ,
    semconv.TOKEN_CACHE_CREATION,
    semconv.SCHEMA_URL,
    semconv.INSTRUMENTATION_SCOPE,
    semconv.OVER_BUDGET_FIXED_PART,
    semconv.OVER_BUDGET_WARM_CACHE_APPEND,
}


def test_every_name_of_ours_is_in_our_namespace_never_the_conventions() -> None:
    # Issue 23 item 12: gen_ai.first_chunk and gen_ai.token.type=cache_read looked standard and
    # were not; a gen_ai.* name the conventions lack may later mean something else.
    names = {
        value
        for key, value in vars(semconv).items()
        if key.isupper() and isinstance(value, str) and value not in VALUES
    }
    assert names
    assert sorted(name for name in names if not name.startswith("agent_latency.")) == []


def test_spans_and_metrics_carry_the_schema_url_of_the_conventions_followed(
    tracer_provider: Any,
    span_exporter: InMemorySpanExporter,
    meter_provider: Any,
    metric_reader: InMemoryMetricReader,
) -> None:
    assert semconv.SCHEMA_URL == "https://opentelemetry.io/schemas/1.41.0"
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider, meter_provider=meter_provider)
    model = GenericFakeChatModel(messages=iter([AIMessage("streamed answer")]))
    list(model.stream("hi", config={"callbacks": [handler]}))

    (span,) = span_exporter.get_finished_spans()
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.schema_url == semconv.SCHEMA_URL
    assert [event.name for event in span.events] == ["agent_latency.first_chunk"]
    data = metric_reader.get_metrics_data()
    assert data is not None
    scopes = [scope for rm in data.resource_metrics for scope in rm.scope_metrics]
    assert scopes and {scope.scope.schema_url for scope in scopes} == {semconv.SCHEMA_URL}


def test_a_trim_span_without_a_handler_carries_the_same_scope_and_schema_url() -> None:
    # The handler's tracer had the schema URL; the trimmers' own (a trim outside any traced
    # run) had none.
    from langchain_core.messages import HumanMessage, SystemMessage
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from agent_latency import CostAwareTrimmer, PriorityTrimmer

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    messages = [SystemMessage("s"), HumanMessage("q")]
    PriorityTrimmer(500, tracer_provider=provider).trim(messages)
    CostAwareTrimmer(
        PriorityTrimmer(500), context_window=8192, reserve_for_output=1000, tracer_provider=provider
    ).trim(messages, key="k")
    spans = exporter.get_finished_spans()
    assert len(spans) == 2 and {s.name for s in spans} == {semconv.TRIM_SPAN_NAME}
    for span in spans:
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == semconv.INSTRUMENTATION_SCOPE
        assert span.instrumentation_scope.schema_url == semconv.SCHEMA_URL
