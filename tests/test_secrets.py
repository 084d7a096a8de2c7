"""One recognisable API key and one recognisable sentence through every code path.

The key must appear nowhere: configuration errors, reprs, ``doctor`` and ``bench`` output (table
and JSON), logs of every logger at DEBUG, span names, attributes, events and statuses, metrics,
exception messages. The sentence (message content) must appear in no span, event, metric or log
unless ``capture_content=True``, and then only where the GenAI conventions put it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from pydantic import SecretStr

from agent_latency import cli as _cli
from agent_latency.config import ConfigError, LLMSettings, Settings, build_chat_model, load_settings
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.telemetry import LatencyCallbackHandler, LatencyRecord
from agent_latency.trimming import PriorityTrimmer, TrimmingMiddleware

KEY = "sk-agentlatency-SECRET-9f8e7d"
OTHER_KEY = "sk-the-server-wants-this-one-1234"
SENTENCE = "The heron counts seventeen lanterns at midnight."
FAST = SimulatorConfig(
    overhead_ms=20, prefill_ms_per_token=0.01, decode_tokens_per_s=100, answer_tokens=8
)
CONVERSATION = [
    {"role": "system", "content": "You are a support agent. " * 20},
    *[
        message
        for n in range(3)
        for message in (
            {"role": "user", "content": f"Question {n}: {SENTENCE} " + "Details. " * 30},
            {"role": "assistant", "content": f"Answer {n}. " + "More. " * 30},
        )
    ],
    {"role": "user", "content": f"Latest: {SENTENCE}"},
]


pytestmark = pytest.mark.usefixtures("clean_environment")


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every logger at DEBUG (httpx, openai, uvicorn, langchain, ours), captured at the root."""
    with caplog.at_level(logging.DEBUG):
        yield caplog


def logged(caplog: pytest.LogCaptureFixture) -> str:
    """Everything logged, as written (tracebacks included) and as raw arguments."""
    raw = [f"{record.msg} {record.args!r}" for record in caplog.records]
    return caplog.text + "\n".join(raw)


def everything_in(spans: tuple[ReadableSpan, ...]) -> str:
    """Every text a span exporter would ship: names, attributes, events, statuses, resources."""
    return "\n".join(span.to_json() for span in spans)


def metrics_in(reader: InMemoryMetricReader) -> str:
    data = reader.get_metrics_data()
    return "" if data is None else data.to_json()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    status = _cli.main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out + captured.err


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "json_text"),
    [
        pytest.param(
            f'[llm]\napi_key = "{KEY}"\ntimeout_seconds = "soon"\n', None, id="wrong-type"
        ),
        pytest.param(f'[llm]\napi_key = ["{KEY}"]\n', None, id="key-in-a-list"),
        pytest.param(f'[llm]\napi_key = {{ value = "{KEY}" }}\n', None, id="key-in-a-table"),
        pytest.param(f'[llm]\napi_key = "{KEY}" trailing\n', None, id="malformed-line"),
        pytest.param(f'[llm]\napi_key = "{KEY}\n', None, id="unterminated-string"),
        pytest.param(f'[llm]\napi_kee = "{KEY}"\n', None, id="misspelt-key"),
        pytest.param(
            f'[llm]\napi_key = "{KEY}"\n[llm.prompt]\ntoken_budget = 5000\n',
            '{"promptTrimmer": {"defaultBudget": 6000}}',
            id="files-disagree",
        ),
        pytest.param(
            f'[llm]\napi_key = "{KEY}"\ncontext_window = 4000\n', None, id="budget-over-window"
        ),
        pytest.param(f'[llm]\napi_key = "{KEY}"\nbase_url = "ftp://x"\n', None, id="bad-url"),
        pytest.param(None, f'{{"llm": {{"api_key": "{KEY}"}}}}', id="key-in-settings-json"),
    ],
)
def test_configuration_errors_never_show_the_key(
    toml: str | None,
    json_text: str | None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    paths: list[str | Path] = []
    if toml is not None:
        paths += ["--config", write(tmp_path / "config.toml", toml)]
    if json_text is not None:
        paths += ["--settings", write(tmp_path / "settings.json", json_text)]
    config = tmp_path / "config.toml" if toml is not None else None
    settings = tmp_path / "settings.json" if json_text is not None else None

    with pytest.raises(ConfigError) as error:
        load_settings(config, settings)
    status, output = run_cli(capsys, "doctor", *paths)

    assert status == 2 and output.startswith("agent-latency: error: ")
    for text in (str(error.value), repr(error.value), output, logged(debug_logs)):
        assert KEY not in text
    assert KEY[3:] not in output  # not even without its prefix


def test_settings_and_simulator_reprs_mask_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path / "config.toml", f'[llm]\napi_key = "{KEY}"\n')
    from_file = load_settings(config)
    monkeypatch.setenv("AGENT_LATENCY_API_KEY", KEY)
    from_environment = load_settings()
    simulator = SimulatorConfig(api_key=KEY)

    assert from_file.llm.api_key is not None
    assert from_file.llm.api_key.get_secret_value() == KEY
    texts = [
        repr(from_file),
        str(from_environment),
        repr(from_file.llm),
        f"{from_environment.llm}",
        repr(dataclasses.asdict(from_file)),
        repr(simulator),
        repr(running_simulator(simulator)),
    ]
    assert not [text for text in texts if KEY in text]


def test_a_bad_option_beside_a_key_names_the_option_not_the_key() -> None:
    settings = Settings(llm=LLMSettings(api_key=SecretStr(KEY), max_tokens_param="max_length"))
    with pytest.raises(ValueError) as error:
        build_chat_model(settings)
    assert "max_tokens_param" in str(error.value) and KEY not in str(error.value)


# --- doctor and bench -------------------------------------------------------------------------


def test_doctor_with_a_wrong_key_never_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], debug_logs: pytest.LogCaptureFixture
) -> None:
    config = write(tmp_path / "config.toml", f'[llm]\napi_key = "{KEY}"\ncontext_window = 8192\n')
    with running_simulator(dataclasses.replace(FAST, api_key=OTHER_KEY)) as sim:
        from_flag = run_cli(capsys, "doctor", "--base-url", sim.base_url, "--api-key", KEY)
        from_file = run_cli(capsys, "doctor", "--base-url", sim.base_url, "--config", config)

    for status, output in (from_flag, from_file):
        assert status == 1
        assert "401" in output
        assert KEY not in output and OTHER_KEY not in output
    assert KEY not in logged(debug_logs)


def test_doctor_with_the_right_key_never_shows_it(
    capsys: pytest.CaptureFixture[str],
    debug_logs: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENT_LATENCY_API_KEY", KEY)
    with running_simulator(dataclasses.replace(FAST, api_key=KEY)) as sim:
        status, output = run_cli(capsys, "doctor", "--base-url", sim.base_url)

    assert "key is accepted" in output, output
    assert status in (0, 1)  # a check of the machine's speed may fail; the key check passes
    assert KEY not in output and KEY not in logged(debug_logs)


PLAIN_KEY = "plainkey4c1d9e7b"  # not sk-shaped: the key-shaped-word masking cannot catch it


def test_doctor_with_a_key_file_ending_in_a_newline_uses_it_and_never_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], debug_logs: pytest.LogCaptureFixture
) -> None:
    # A key mounted from a file: before, httpx refused the header and doctor printed it whole.
    config = write(tmp_path / "config.toml", f'[llm]\napi_key = "{PLAIN_KEY}\\n"\n')
    with running_simulator(dataclasses.replace(FAST, api_key=PLAIN_KEY)) as sim:
        status, output = run_cli(capsys, "doctor", "--base-url", sim.base_url, "--config", config)

    assert "key is accepted" in output, output
    assert status in (0, 1)  # a check of the machine's speed may fail; the key check passes
    assert PLAIN_KEY not in output and PLAIN_KEY not in logged(debug_logs)


def test_doctor_given_settings_with_an_unsendable_key_never_shows_it() -> None:
    # Settings built in code skip load_settings' checks; httpx then quotes the header.
    from agent_latency.doctor import run_checks

    with running_simulator(FAST) as sim:
        key = SecretStr(f"{PLAIN_KEY}\n")
        settings = Settings(llm=LLMSettings(base_url=sim.base_url, api_key=key))
        results = list(run_checks(settings))

    shown = "\n".join(f"{r.message} {r.fix}" for r in results)
    assert "Bearer ***" in shown  # httpx's error, quoted without the header's value
    assert PLAIN_KEY not in shown


def test_a_password_in_base_url_never_reaches_doctors_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    password = "pw-5b0e2c9d"
    monkeypatch.setenv("AGENT_LATENCY_BASE_URL", f"http://user:{password}@127.0.0.1:9/v1")

    status, output = run_cli(capsys, "doctor")

    assert status == 2 and "user name or password" in output
    assert password not in output


def test_bench_table_json_and_errors_never_show_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], debug_logs: pytest.LogCaptureFixture
) -> None:
    messages = write(tmp_path / "conversation.json", json.dumps(CONVERSATION))
    report = tmp_path / "bench.json"
    options = ["--messages", messages, "--runs", "1", "--budget", "300", "--api-key", KEY]
    with running_simulator(dataclasses.replace(FAST, api_key=KEY)) as sim:
        ok_status, table = run_cli(
            capsys, "bench", "--base-url", sim.base_url, *options, "--json", report
        )
    with running_simulator(dataclasses.replace(FAST, api_key=OTHER_KEY)) as sim:
        refused_status, refused = run_cli(capsys, "bench", "--base-url", sim.base_url, *options)

    assert ok_status == 0, table
    assert "TTFT" in table
    assert refused_status == 2 and "401" in refused
    written = report.read_text(encoding="utf-8")
    assert json.loads(written)
    for text in (table, written, refused, logged(debug_logs)):
        assert KEY not in text
        assert SENTENCE not in text


# --- model calls: logs, spans, metrics, exceptions, reprs --------------------------------------


@tool
def lookup_order(order: str) -> str:
    """Looks an order up."""
    return f"Order {order}: {SENTENCE}"


def run_agent_and_chain(
    base_url: str, handler: LatencyCallbackHandler, trimmer: PriorityTrimmer
) -> list[str]:
    """A create_agent run (model, tool, model) and a streamed chain; returns the answers."""
    settings = Settings(llm=LLMSettings(api_key=SecretStr(KEY), base_url=base_url))
    model = build_chat_model(settings, max_retries=0)
    agent = create_agent(model, tools=[lookup_order], middleware=[TrimmingMiddleware(trimmer)])
    state = agent.invoke(
        {"messages": [HumanMessage(f"Where is order 7? {SENTENCE}")]},
        config={"callbacks": [handler]},
    )
    prompt = [SystemMessage(f"Be brief. {SENTENCE}"), HumanMessage(SENTENCE)]
    streamed = "".join(
        str(chunk.content)
        for chunk in (trimmer | model).stream(prompt, config={"callbacks": [handler]})
    )
    return [str(state["messages"][-1].content), streamed]


@pytest.mark.parametrize("capture_content", [False, True])
def test_model_calls_keep_the_key_out_and_content_out_unless_captured(
    capture_content: bool,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    meter_provider: Any,
    metric_reader: InMemoryMetricReader,
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    records: list[LatencyRecord] = []
    handler = LatencyCallbackHandler(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        capture_content=capture_content,
        log_every_request=True,
        ttft_warn_ms=1,  # the slow-call warning runs too
        on_record=records.append,
    )
    trimmer = PriorityTrimmer(2000, tracer_provider=tracer_provider)
    with running_simulator(dataclasses.replace(FAST, api_key=KEY)) as sim:
        answers = run_agent_and_chain(sim.base_url, handler, trimmer)

    assert all(answers) and len(records) == 3  # two agent model calls and the chain's
    spans = span_exporter.get_finished_spans()
    recorded = everything_in(spans) + metrics_in(metric_reader) + repr(records)
    everywhere = recorded + logged(debug_logs)
    assert KEY not in everywhere
    if not capture_content:
        assert SENTENCE not in everywhere
        return
    assert SENTENCE not in logged(debug_logs) + metrics_in(metric_reader) + repr(records)
    chats = [span for span in spans if span.name.startswith("chat ")]
    assert all(
        SENTENCE in str((span.attributes or {})[gen_ai.GEN_AI_INPUT_MESSAGES]) for span in chats
    )
    (tool_span,) = [span for span in spans if span.name == "execute_tool lookup_order"]
    assert SENTENCE in str((tool_span.attributes or {})[gen_ai.GEN_AI_TOOL_CALL_RESULT])
    # Nowhere else: not in span names, events or the trim and agent spans.
    others = [span for span in spans if span not in chats and span is not tool_span]
    assert SENTENCE not in everything_in(tuple(others))
    assert not [
        event for span in spans for event in span.events if SENTENCE in str(event.attributes)
    ]


def test_a_refused_key_raises_the_servers_error_without_the_key(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    with running_simulator(dataclasses.replace(FAST, api_key=OTHER_KEY)) as sim:
        settings = Settings(llm=LLMSettings(api_key=SecretStr(KEY), base_url=sim.base_url))
        model = build_chat_model(settings, max_retries=0)
        with pytest.raises(Exception) as error:
            model.invoke([HumanMessage(SENTENCE)], config={"callbacks": [handler]})

    assert "401" in str(error.value)
    texts = [str(error.value), repr(error.value), everything_in(span_exporter.get_finished_spans())]
    texts.append(logged(debug_logs))
    assert not [text for text in texts if KEY in text or SENTENCE in text]
    assert handler.open_runs == 0


def test_reprs_of_the_model_handler_trimmer_and_results_never_show_the_key(
    tracer_provider: TracerProvider,
) -> None:
    settings = Settings(llm=LLMSettings(api_key=SecretStr(KEY), base_url="http://127.0.0.1:9/v1"))
    model = build_chat_model(settings)
    handler = LatencyCallbackHandler(tracer_provider=tracer_provider)
    trimmer = PriorityTrimmer(50, tracer_provider=tracer_provider)
    result = trimmer.trim([HumanMessage(SENTENCE * 20)])

    texts = [
        repr(model),
        str(model),
        json.dumps(model.to_json(), default=str),  # what callback handlers are given
        repr(model.model_dump()),
        repr(handler),
        repr(trimmer),
        repr(result),
    ]
    assert not [text for text in texts if KEY in text]
    assert SENTENCE not in repr(result)
    assert model.openai_api_key is not None
    assert model.openai_api_key.get_secret_value() == KEY  # the key is there, only hidden
