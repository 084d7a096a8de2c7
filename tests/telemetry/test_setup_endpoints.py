"""configure_telemetry's endpoints by OpenTelemetry's rules, credentials kept out of every log
line, and a quick shutdown when nothing listens.

Real OTLP/HTTP exporters, to the test receiver or to a port that refuses connections.
"""

from __future__ import annotations

import logging
import time

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from support.otlp_receiver import OTLPReceiver
from support.ports import refused_port

from agent_latency import configure_telemetry

TOKEN = "tok3n-QUINCE-7781"
PASSWORD = "pw-MEDLAR-5523"


def call_fake_model(handler: object, calls: int = 1) -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage(content="fine")] * calls))
    for _ in range(calls):
        model.invoke("hi", config={"callbacks": [handler]})


def test_a_base_endpoint_gets_the_signal_paths_after_its_own_path_and_keeps_its_query() -> None:
    # It sent to "/collector?token=.../v1/traces": the query swallowed the signal path.
    with OTLPReceiver(base_path="/collector") as receiver:
        base = f"{receiver.endpoint}/collector?token={TOKEN}"
        with configure_telemetry(exporter="otlp-http", endpoint=base, set_global=False) as tm:
            call_fake_model(tm.handler())
        assert [span.name for span in receiver.wait_for_spans(1)] == ["chat"]
    assert f"/collector/v1/traces?token={TOKEN}" in receiver.targets
    assert f"/collector/v1/metrics?token={TOKEN}" in receiver.targets
    assert tm.endpoint == f"{receiver.endpoint}/collector/v1/traces"  # no query shown


def test_per_signal_endpoints_are_used_as_given(otlp_receiver: OTLPReceiver) -> None:
    with configure_telemetry(
        exporter="otlp-http",
        traces_endpoint=f"{otlp_receiver.endpoint}/v1/traces",
        metrics_endpoint=f"{otlp_receiver.endpoint}/v1/metrics",
        set_global=False,
    ) as telemetry:
        call_fake_model(telemetry.handler())
    assert [span.name for span in otlp_receiver.wait_for_spans(1)] == ["chat"]
    assert set(otlp_receiver.targets) == {"/v1/traces", "/v1/metrics"}


def test_per_signal_environment_variables_win_over_the_base_one(
    monkeypatch: pytest.MonkeyPatch, otlp_receiver: OTLPReceiver
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{refused_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{otlp_receiver.endpoint}/v1/traces")
    with configure_telemetry(exporter="otlp-http", set_global=False) as telemetry:
        call_fake_model(telemetry.handler())
        assert telemetry.endpoint == f"{otlp_receiver.endpoint}/v1/traces"
    assert [span.name for span in otlp_receiver.wait_for_spans(1)] == ["chat"]


@pytest.mark.parametrize(
    ("variable", "path"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "/v1/traces"),
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "/v1/metrics"),
    ],
)
def test_an_endpoint_variable_without_http_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, otlp_receiver: OTLPReceiver, variable: str, path: str
) -> None:
    # "127.0.0.1:4318" was used as it was: the collector listened there and got nothing, while
    # the log said it did not answer ("No connection adapters were found" at ERROR).
    address = otlp_receiver.endpoint.removeprefix("http://")
    monkeypatch.setenv(variable, f"user:{PASSWORD}@{address}{path}")

    with pytest.raises(ValueError) as raised:
        configure_telemetry(exporter="otlp-http", set_global=False)

    message = str(raised.value)
    assert f"{variable} must be a URL such as http://localhost:4318" in message
    assert address in message and PASSWORD not in message


def test_a_signal_url_given_as_the_base_endpoint_is_refused_with_the_fix() -> None:
    # It was accepted, then every export went to /v1/traces/v1/traces (404).
    endpoint = f"http://user:{PASSWORD}@collector.example:4318/v1/traces?token={TOKEN}"

    with pytest.raises(ValueError) as raised:
        configure_telemetry(exporter="otlp-http", endpoint=endpoint, set_global=False)

    message = str(raised.value)
    assert "endpoint='http://collector.example:4318'" in message
    assert "traces_endpoint=" in message
    assert TOKEN not in message and PASSWORD not in message


def test_a_signal_url_in_the_base_endpoint_variable_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, otlp_receiver: OTLPReceiver
) -> None:
    # Refused as an argument, taken from the variable: every export went to
    # /v1/traces/v1/traces, answered 404, while the collector listened.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"{otlp_receiver.endpoint}/v1/traces")

    with pytest.raises(ValueError) as raised:
        configure_telemetry(exporter="otlp-http", set_global=False)

    message = str(raised.value)
    assert message.startswith("configure_telemetry: OTEL_EXPORTER_OTLP_ENDPOINT is the collector")
    assert f"Fix: OTEL_EXPORTER_OTLP_ENDPOINT={otlp_receiver.endpoint} " in message
    assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in message

    # Unused when both signals have a URL of their own.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{otlp_receiver.endpoint}/v1/traces")
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"{otlp_receiver.endpoint}/v1/metrics"
    )
    with configure_telemetry(exporter="otlp-http", set_global=False) as telemetry:
        call_fake_model(telemetry.handler())
    assert [span.name for span in otlp_receiver.wait_for_spans(1)] == ["chat"]


@pytest.mark.parametrize(
    "variable",
    [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    ],
)
def test_a_header_variable_opentelemetry_cannot_read_is_quoted_without_its_token(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    otlp_receiver: OTLPReceiver,
    variable: str,
) -> None:
    # "Name: value" instead of "name=value": OpenTelemetry's header parser warned with the
    # header as written, token and all, as configure_telemetry made the exporters.
    monkeypatch.setenv(variable, f"x-tenant=blue, Authorization: Bearer {TOKEN}")
    with caplog.at_level(logging.DEBUG):
        telemetry = configure_telemetry(
            exporter="otlp-http", endpoint=otlp_receiver.endpoint, set_global=False
        )
        telemetry.shutdown()

    assert "Header format invalid" in caplog.text  # the warning itself still says what is wrong
    assert TOKEN not in caplog.text


def test_credentials_in_the_endpoint_are_in_no_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The exporter's own retry warning quoted the HTTP client's error, token and all.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    endpoint = f"http://user:{PASSWORD}@127.0.0.1:{refused_port()}/otlp?token={TOKEN}"
    with caplog.at_level(logging.DEBUG):
        telemetry = configure_telemetry(exporter="otlp-http", endpoint=endpoint, set_global=False)
        call_fake_model(telemetry.handler())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "retrying" not in caplog.text:
            time.sleep(0.05)  # the batch processor exports, is refused, and will retry
        telemetry.shutdown()

    assert "retrying" in caplog.text  # the exporter's own warning was let through, masked
    assert "cannot export spans" in caplog.text
    assert TOKEN not in caplog.text and PASSWORD not in caplog.text
    assert TOKEN not in repr(telemetry) and PASSWORD not in repr(telemetry)


def test_shutdown_does_not_wait_for_a_port_that_refuses(caplog: pytest.LogCaptureFixture) -> None:
    # It waited the whole 3 s export timeout, retrying, and logged four lines.
    port = refused_port()
    with caplog.at_level(logging.INFO):
        telemetry = configure_telemetry(
            exporter="otlp-http", endpoint=f"http://127.0.0.1:{port}", set_global=False
        )
        call_fake_model(telemetry.handler(), 3)
        caplog.clear()  # the calls' own INFO lines
        started = time.monotonic()
        telemetry.shutdown()
        elapsed = time.monotonic() - started

    assert elapsed < 1.0
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) <= 1, lines
    assert lines == [
        f"agent-latency: nothing listens at 127.0.0.1:{port} (connection refused); the spans "
        "and metrics not yet sent are dropped"
    ]


def test_metrics_exporter_none_sends_spans_only(
    monkeypatch: pytest.MonkeyPatch, otlp_receiver: OTLPReceiver
) -> None:
    # For a trace UI that takes no metrics (Phoenix answers 405 on /v1/metrics).
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    with configure_telemetry(
        exporter="otlp-http", endpoint=otlp_receiver.endpoint, set_global=False
    ) as telemetry:
        call_fake_model(telemetry.handler())
    assert [span.name for span in otlp_receiver.wait_for_spans(1)] == ["chat"]
    assert set(otlp_receiver.targets) == {"/v1/traces"}
