"""The names the handler emits: ours under ``agent_latency.*``, the conventions' version stated."""

from __future__ import annotations

import importlib
from typing import Any
from uuid import uuid4

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from support.otlp_receiver import OTLPReceiver
from support.simulators import chat_openai_of

from agent_latency import LatencyCallbackHandler, PriorityTrimmer, configure_telemetry, semconv
from agent_latency.sim import SimulatorConfig, running_simulator

# Values of our attributes, not names.
VALUES = {
    semconv.TOKEN_CACHE_READ,
    semconv.TOKEN_CACHE_CREATION,
    semconv.SCHEMA_URL,
    semconv.INSTRUMENTATION_SCOPE,
    semconv.OVER_BUDGET_FIXED_PART,
}


def package_genai_names() -> set[str]:
    """Every GenAI attribute and metric name the installed opentelemetry-semantic-conventions
    defines."""
    from opentelemetry.semconv._incubating.metrics import gen_ai_metrics

    return {
        value
        for module in (gen_ai, gen_ai_metrics)
        for key, value in vars(module).items()
        if key.isupper() and isinstance(value, str)
    }


def test_every_name_of_ours_is_in_our_namespace_or_a_newer_genai_name_the_package_lacks() -> None:
    # A gen_ai.* name the conventions lack (gen_ai.first_chunk, gen_ai.token.type=cache_read
    # looked standard and were not) may later mean something else. The GenAI names newer than
    # the package are ours until it has them; then its constants replace ours (this test fails
    # when it does).
    names = {
        value
        for key, value in vars(semconv).items()
        if key.isupper() and isinstance(value, str) and value not in VALUES
    }
    assert names
    newer = {name for name in names if not name.startswith("agent_latency.")}
    assert newer == {
        semconv.GEN_AI_CONVERSATION_COMPACTED,
        semconv.GEN_AI_CLIENT_INFERENCE_DURATION,
        semconv.GEN_AI_CLIENT_INFERENCE_TIME_TO_FIRST_CHUNK,
        semconv.GEN_AI_CLIENT_INFERENCE_TIME_PER_OUTPUT_CHUNK,
        semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
    }
    assert all(name.startswith("gen_ai.") for name in newer)
    known = package_genai_names()
    assert "gen_ai.client.operation.time_to_first_chunk" in known  # the walk finds them
    assert sorted(newer & known) == []


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

    from agent_latency import PriorityTrimmer

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    messages = [SystemMessage("s"), HumanMessage("q")]
    PriorityTrimmer(500, tracer_provider=provider).trim(messages)
    spans = exporter.get_finished_spans()
    assert len(spans) == 1 and {s.name for s in spans} == {semconv.TRIM_SPAN_NAME}
    for span in spans:
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == semconv.INSTRUMENTATION_SCOPE
        assert span.instrumentation_scope.schema_url == semconv.SCHEMA_URL


@pytest.mark.parametrize(
    "opt_in", [None, "http", "http/dup, gen_ai_latest_experimental"], ids=["unset", "other", "set"]
)
def test_the_opt_in_switches_the_renamed_genai_names_on_the_wire(
    opt_in: str | None, monkeypatch: pytest.MonkeyPatch, otlp_receiver: OTLPReceiver
) -> None:
    # The newest GenAI conventions renamed the client metrics and the cache writes; like
    # OpenTelemetry's own instrumentations, we emit the new names only when asked to.
    if opt_in is None:
        monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    else:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", opt_in)
    latest = opt_in is not None and "gen_ai_latest_experimental" in opt_in
    fast = SimulatorConfig(overhead_ms=1, prefill_ms_per_token=0, decode_tokens_per_s=5000)
    with running_simulator(fast) as sim:
        telemetry = configure_telemetry(
            exporter="otlp-http", endpoint=otlp_receiver.endpoint, set_global=False
        )
        handler = telemetry.handler()
        model = chat_openai_of(sim, max_retries=0, streaming=True)
        list(model.stream("hi", config={"callbacks": [handler]}))
        # A provider reporting cache writes (Anthropic-style usage), through the same handler.
        writes = AIMessage(
            "b",
            usage_metadata={
                "input_tokens": 1000,
                "output_tokens": 3,
                "total_tokens": 1003,
                "input_token_details": {"cache_creation": 700},
            },
        )
        run_id = uuid4()
        handler.on_chat_model_start({}, [[HumanMessage("hi")]], run_id=run_id)
        handler.on_llm_end(LLMResult(generations=[[ChatGeneration(message=writes)]]), run_id=run_id)
        telemetry.shutdown()

    metrics = {point.metric for point in otlp_receiver.points()}
    old = {
        "gen_ai.client.operation.duration",
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai.client.operation.time_per_output_chunk",
    }
    new = {
        semconv.GEN_AI_CLIENT_INFERENCE_DURATION,
        semconv.GEN_AI_CLIENT_INFERENCE_TIME_TO_FIRST_CHUNK,
        semconv.GEN_AI_CLIENT_INFERENCE_TIME_PER_OUTPUT_CHUNK,
    }
    assert metrics >= (new if latest else old)
    assert not metrics & (old if latest else new)
    assert "gen_ai.client.token.usage" in metrics  # not renamed
    write_span = next(span for span in otlp_receiver.spans() if span.name == "chat")
    written, not_written = (
        semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
        gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    )
    if not latest:
        written, not_written = not_written, written
    assert write_span.attributes[written] == 700
    assert not_written not in write_span.attributes


@pytest.mark.parametrize(("budget", "compacted"), [(120, True), (10_000, False)])
def test_a_cut_request_is_compacted_on_its_chat_and_trim_spans_and_only_then(
    budget: int, compacted: bool, otlp_receiver: OTLPReceiver
) -> None:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You answer questions about invoices."), MessagesPlaceholder("history")]
    )
    history = [
        message
        for turn in range(8)
        for message in (HumanMessage(f"old question {turn} " * 12), AIMessage("an old answer"))
    ]
    fast = SimulatorConfig(overhead_ms=1, prefill_ms_per_token=0, decode_tokens_per_s=5000)
    with running_simulator(fast) as sim:
        telemetry = configure_telemetry(
            exporter="otlp-http", endpoint=otlp_receiver.endpoint, set_global=False
        )
        model = chat_openai_of(sim, max_retries=0)
        chain = prompt | PriorityTrimmer(budget=budget) | model
        chain.invoke(
            {"history": [*history, HumanMessage("What is a credit note?")]},
            config={"callbacks": [telemetry.handler()]},
        )
        telemetry.shutdown()

    spans = otlp_receiver.spans()
    (trim,) = [span for span in spans if span.name == semconv.TRIM_SPAN_NAME]
    (chat,) = [span for span in spans if span.name.startswith("chat ")]
    assert (trim.attributes[semconv.TRIM_DROPPED_MESSAGES] > 0) is compacted
    for span in (trim, chat):
        if compacted:
            assert span.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] is True
        else:
            assert semconv.GEN_AI_CONVERSATION_COMPACTED not in span.attributes


def test_the_telemetry_doc_lists_every_name_we_emit_with_its_source() -> None:
    # Every name, the package's and ours, with the module it comes from.
    import re
    from pathlib import Path

    root = Path(__file__).parents[2]
    modules = {
        "gen_ai": gen_ai,
        "gen_ai_metrics": importlib.import_module(
            "opentelemetry.semconv._incubating.metrics.gen_ai_metrics"
        ),
        "error_attributes": importlib.import_module(
            "opentelemetry.semconv.attributes.error_attributes"
        ),
        "server_attributes": importlib.import_module(
            "opentelemetry.semconv.attributes.server_attributes"
        ),
    }
    pattern = re.compile(
        r"\b(gen_ai|gen_ai_metrics|error_attributes|server_attributes)\.([A-Z_]+)\b"
    )
    from_package = {
        getattr(modules[module], constant): modules[module].__name__
        for path in (root / "src").rglob("*.py")
        for module, constant in pattern.findall(path.read_text())
        if isinstance(getattr(modules[module], constant), str)
    }
    ours = {
        value: f"agent_latency.semconv.{key}"
        for key, value in vars(semconv).items()
        if key.isupper() and isinstance(value, str) and value not in VALUES
    }
    doc = (root / "docs" / "telemetry.md").read_text()
    table = doc.split("**Every name and where it comes from**")[1].split("\n\n")[1]
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    listed = {row[0].strip("| `"): row[1] for row in rows}
    assert set(listed) == set(from_package) | set(ours)
    for name, source in {**from_package, **ours}.items():
        assert f"`{source}" in listed[name], name
