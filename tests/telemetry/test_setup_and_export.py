"""configure_telemetry end to end: real ChatOpenAI streaming and OTLP export, faulty collectors."""

from __future__ import annotations

import gc
import json
import logging
import subprocess
import sys
import time
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from opentelemetry import trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import server_attributes
from support.otlp_receiver import OTLPReceiver
from support.ports import refused_port
from support.simulators import chat_openai_of

from agent_latency import (
    LatencyCallbackHandler,
    LatencyRecord,
    MetricsSettings,
    Settings,
    configure_telemetry,
    semconv,
)
from agent_latency.sim import SimulatorConfig, running_simulator

API_KEY = "sk-test-PLUM-4242-key"
SERVER_DELAY_MS = 300


@pytest.fixture
def quick_exports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short export timeout and batch delay, so faulty-collector tests end quickly."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.5")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")


def closed_port_endpoint() -> str:
    return f"http://127.0.0.1:{refused_port()}"  # nothing listens there: connections refused


def test_streamed_chat_openai_call_arrives_at_the_collector_with_the_servers_ttft(
    otlp_receiver: OTLPReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    simulator = SimulatorConfig(
        overhead_ms=SERVER_DELAY_MS,
        prefill_ms_per_token=0,
        decode_tokens_per_s=500,
        answer_tokens=8,
        api_key=API_KEY,
    )
    records: list[LatencyRecord] = []
    with running_simulator(simulator) as sim, caplog.at_level(logging.DEBUG):
        telemetry = configure_telemetry(
            exporter="otlp", endpoint=otlp_receiver.endpoint, set_global=False
        )
        handler = telemetry.handler(on_record=records.append)
        model = chat_openai_of(
            sim,
            api_key=API_KEY,
            streaming=True,
            stream_usage=True,
            max_retries=0,
            temperature=0.2,
            max_tokens=32,  # type: ignore[call-arg]
        )
        model.invoke("warm up the connection")  # not measured: no handler
        sim_port = sim.port
        gc.collect()
        gc.disable()  # a collection of earlier tests' garbage must not land in the measurement
        try:
            answer = "".join(
                str(chunk.content)
                for chunk in model.stream("hello", config={"callbacks": [handler]})
            )
        finally:
            gc.enable()
        telemetry.shutdown()

    assert answer
    (record,) = records
    # The server holds its first chunk SERVER_DELAY_MS after the request arrives: TTFT is at
    # least that, and the stream (8 chunks at 500 tokens/s) goes on after it.
    assert record.ttft_ms is not None
    assert SERVER_DELAY_MS <= record.ttft_ms < record.total_ms
    (chat,) = [span for span in otlp_receiver.spans() if span.name.startswith("chat ")]
    assert chat.name == f"chat {sim.config.models[0]}"
    assert chat.kind == 3  # SPAN_KIND_CLIENT
    assert chat.resource["service.name"] == "agent-latency"
    attributes = chat.attributes
    assert attributes[semconv.TTFT_MS] == pytest.approx(record.ttft_ms)
    assert attributes[gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == pytest.approx(
        record.ttft_ms / 1000
    )
    assert attributes[gen_ai.GEN_AI_PROVIDER_NAME] == "openai"
    assert attributes[gen_ai.GEN_AI_REQUEST_STREAM] is True
    assert attributes[gen_ai.GEN_AI_REQUEST_TEMPERATURE] == 0.2
    assert attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] == 32
    assert attributes[gen_ai.GEN_AI_RESPONSE_MODEL] == sim.config.models[0]
    assert attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] == ["stop"]
    assert attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == 8
    assert attributes[semconv.CHUNKS] == 8
    assert attributes[server_attributes.SERVER_ADDRESS] == "127.0.0.1"
    assert attributes[server_attributes.SERVER_PORT] == sim_port
    assert [name for name, _ in chat.events] == [semconv.FIRST_CHUNK_EVENT]

    ttft_points = otlp_receiver.points("gen_ai.client.operation.time_to_first_chunk")
    assert [point.count for point in ttft_points] == [1]
    assert ttft_points[0].sum == pytest.approx(record.ttft_ms / 1000)
    assert ttft_points[0].bucket_bounds == semconv.DURATION_BUCKETS_S
    (duration,) = otlp_receiver.points("gen_ai.client.operation.duration")
    assert duration.unit == "s"
    assert duration.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == sim.config.models[0]
    usage = otlp_receiver.points("gen_ai.client.token.usage")
    assert {point.attributes[gen_ai.GEN_AI_TOKEN_TYPE] for point in usage} == {"input", "output"}
    # The simulator reports cached_tokens (0 on this first call): a cache-read record of our own.
    (cached,) = otlp_receiver.points(semconv.CACHE_TOKENS_METRIC)
    assert (cached.attributes[semconv.TOKEN_CACHE], cached.sum) == (semconv.TOKEN_CACHE_READ, 0)

    everything = repr(otlp_receiver.spans()) + repr(otlp_receiver.points()) + caplog.text
    assert API_KEY not in everything + repr(handler) + repr(telemetry)


def call_fake_model(handler: Any, calls: int) -> int:
    model = GenericFakeChatModel(messages=iter([AIMessage(content="fine")] * calls))
    return sum(
        model.invoke("hi", config={"callbacks": [handler]}).content == "fine" for _ in range(calls)
    )


def export_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.WARNING and "export" in record.getMessage().lower()
    ]


def test_refusing_collector_breaks_no_call_and_is_reported_once(
    quick_exports: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        with configure_telemetry(endpoint=closed_port_endpoint(), set_global=False) as telemetry:
            handler = telemetry.handler()
            assert call_fake_model(handler, 100) == 100
            time.sleep(0.1)  # let the batch processor try, and fail, to export
            assert call_fake_model(handler, 100) == 100
        assert handler.open_runs == 0
    ours = [m for m in export_warnings(caplog) if m.startswith("agent-latency: cannot export")]
    # The spans failed while the calls ran; the metrics, due at shutdown, go with the one line
    # saying that nothing listens there.
    assert [message.split()[3] for message in ours] == ["spans"]
    assert "nothing listens at" in caplog.text
    # The exporter's own per-attempt complaints are let through once per logger at most.
    assert len(export_warnings(caplog)) <= len(ours) + 2


def test_collector_answering_503_breaks_no_call(
    quick_exports: None, caplog: pytest.LogCaptureFixture
) -> None:
    with OTLPReceiver(status=503) as receiver, caplog.at_level(logging.WARNING):
        with configure_telemetry(endpoint=receiver.endpoint, set_global=False) as telemetry:
            assert call_fake_model(telemetry.handler(), 50) == 50
        assert receiver.requests > 0
    assert receiver.spans() == []
    assert any("cannot export spans" in message for message in export_warnings(caplog))


def test_slow_collector_does_not_hold_up_calls(quick_exports: None) -> None:
    with OTLPReceiver(delay_s=5) as receiver:
        with configure_telemetry(endpoint=receiver.endpoint, set_global=False) as telemetry:
            started = time.monotonic()
            assert call_fake_model(telemetry.handler(), 50) == 50
            time.sleep(0.1)  # an export is now waiting on the collector
            assert call_fake_model(telemetry.handler(), 50) == 50
            elapsed = time.monotonic() - started
        assert receiver.requests > 0
    assert elapsed < 5  # finished long before the collector answered anything


def test_environment_chooses_service_name_protocol_and_endpoint(
    monkeypatch: pytest.MonkeyPatch, otlp_receiver: OTLPReceiver
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "checkout-agent")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    with configure_telemetry(set_global=False) as telemetry:
        assert (telemetry.exporter, telemetry.endpoint) == (
            "otlp-http",
            f"{otlp_receiver.endpoint}/v1/traces",
        )
        call_fake_model(telemetry.handler(), 1)
    (chat,) = otlp_receiver.wait_for_spans(1)
    assert chat.resource["service.name"] == "checkout-agent"
    assert chat.resource["deployment.environment"] == "test"


def test_grpc_protocol_from_the_environment(
    quick_exports: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    endpoint = closed_port_endpoint()
    with configure_telemetry(endpoint=endpoint, set_global=False) as telemetry:
        assert (telemetry.exporter, telemetry.endpoint) == ("otlp-grpc", endpoint)


def test_none_exporter_still_measures_for_on_record() -> None:
    records: list[LatencyRecord] = []
    with configure_telemetry(exporter="none", set_global=False) as telemetry:
        call_fake_model(telemetry.handler(on_record=records.append), 3)
    assert telemetry.endpoint is None
    assert len(records) == 3


def test_console_json_exporter_prints_spans(capsys: pytest.CaptureFixture[str]) -> None:
    with configure_telemetry(exporter="console-json", set_global=False) as telemetry:
        call_fake_model(telemetry.handler(), 1)
    assert '"name": "chat"' in capsys.readouterr().out


def test_handler_takes_the_settings_thresholds() -> None:
    settings = Settings(metrics=MetricsSettings(ttft_warn_ms=10, ttft_error_ms=20))
    telemetry = configure_telemetry(settings, exporter="none", set_global=False)
    handler = telemetry.handler(chunk_timeout_ms=5)
    assert (handler.ttft_warn_ms, handler.ttft_error_ms, handler.chunk_timeout_ms) == (10, 20, 5)
    telemetry.shutdown()


def test_set_global_false_leaves_the_global_providers_alone() -> None:
    before = trace.get_tracer_provider()
    with configure_telemetry(exporter="none", set_global=False):
        assert trace.get_tracer_provider() is before


def test_set_global_installs_the_providers() -> None:
    # In a fresh interpreter: OpenTelemetry lets a process set its global providers only once.
    program = (
        "from opentelemetry import metrics, trace\n"
        "from agent_latency import configure_telemetry\n"
        "with configure_telemetry(exporter='none') as telemetry:\n"
        "    assert trace.get_tracer_provider() is telemetry.tracer_provider\n"
        "    assert metrics.get_meter_provider() is telemetry.meter_provider\n"
    )
    subprocess.run([sys.executable, "-c", program], check=True, timeout=60)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"exporter": "zipkin"}, "exporter"),
        ({"endpoint": "localhost:4318"}, "endpoint"),
        ({"service_name": " "}, "service_name"),
        ({"set_global": "no"}, "set_global"),
        ({"settings": {"metrics": {}}}, "settings"),
    ],
)
def test_invalid_options_are_refused_by_name(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        configure_telemetry(**options)


def test_unsupported_protocol_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        configure_telemetry(set_global=False)


def test_server_stalling_then_resetting_mid_stream_is_on_the_span(
    tracer_provider: Any, span_exporter: Any
) -> None:
    records: list[LatencyRecord] = []
    handler = LatencyCallbackHandler(
        tracer_provider=tracer_provider, chunk_timeout_ms=100, on_record=records.append
    )
    simulator = SimulatorConfig(
        overhead_ms=0,
        prefill_ms_per_token=0,
        decode_tokens_per_s=1000,
        answer_tokens=10,
        stall_after_chunks=3,
        stall_ms=250,
        reset_after_chunks=6,
    )
    with running_simulator(simulator) as sim:
        model = chat_openai_of(sim, streaming=True, max_retries=0)
        with pytest.raises(Exception) as raised:
            list(model.stream("hello", config={"callbacks": [handler]}))

    (chat,) = span_exporter.get_finished_spans()
    assert chat.attributes["error.type"].endswith(type(raised.value).__name__)
    assert chat.attributes[semconv.OUTCOME] == "error"
    assert chat.attributes[semconv.STALLS] == 1
    assert chat.attributes[semconv.MAX_CHUNK_GAP_MS] > 200  # the server paused 250 ms
    stalls = [event for event in chat.events if event.name == semconv.STALL_EVENT]
    assert len(stalls) == 1 and stalls[0].attributes[semconv.STALL_AFTER_CHUNKS] == 3
    assert records[0].chunks == 6
    assert handler.open_runs == 0


def test_grpc_without_the_grpc_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if agent-latency[grpc] were not installed: the gRPC exporter modules cannot be imported.
    for module in ("trace_exporter", "metric_exporter"):
        monkeypatch.setitem(sys.modules, f"opentelemetry.exporter.otlp.proto.grpc.{module}", None)
    with pytest.raises(ImportError, match=r"pip install 'agent-latency\[grpc\]'"):
        configure_telemetry(exporter="otlp-grpc", endpoint=closed_port_endpoint(), set_global=False)


def test_captured_content_with_a_lone_surrogate_reaches_the_collector_escaped(
    otlp_receiver: OTLPReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    # As json.loads of a truncated page gives it. OTLP carries UTF-8, which a lone surrogate is
    # not: the exporter dropped gen_ai.input.messages (and a tool's arguments and result) with
    # an ERROR and a traceback per attribute.
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    @tool
    def lookup(city: str) -> str:
        """Looks up a city."""
        return f"sunny in {city} \udc00"

    # The openai client cannot send one (its JSON encoder refuses it); other integrations and
    # fakes can, and tools see what the model or the application hands them.
    telemetry = configure_telemetry(
        exporter="otlp-http", endpoint=otlp_receiver.endpoint, set_global=False
    )
    handler = telemetry.handler(capture_content=True)
    model = GenericFakeChatModel(messages=iter([AIMessage("an answer \udbff")]))
    with caplog.at_level(logging.WARNING):
        model.invoke([HumanMessage("half a pair: \ud800!")], config={"callbacks": [handler]})
        lookup.invoke({"city": "Par\ud800is"}, config={"callbacks": [handler]})
        telemetry.shutdown()

    spans = {span.name: span for span in otlp_receiver.spans()}
    chat = spans["chat"].attributes
    assert json.loads(chat[gen_ai.GEN_AI_INPUT_MESSAGES])[0]["parts"][0]["content"] == (
        "half a pair: \ud800!"
    )
    assert (
        "an answer \udbff"
        in json.loads(chat[gen_ai.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["content"]
    )
    tool_span = spans["execute_tool lookup"].attributes
    assert json.loads(tool_span[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"city": "Par\ud800is"}
    assert tool_span[gen_ai.GEN_AI_TOOL_CALL_RESULT] == "sunny in Par\\ud800is \\udc00"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
