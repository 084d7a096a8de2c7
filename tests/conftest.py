"""Shared fixtures: a clean environment, in-memory OpenTelemetry providers, an OTLP receiver,
a quick simulator."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.otlp_receiver import OTLPReceiver
from support.simulators import QUICK

from agent_latency.sim import RunningSimulator, running_simulator

# The suite gates every landing: property tests draw the same examples on every run, so that a
# red run means a change broke something, not an unlucky draw. HYPOTHESIS_PROFILE=explore draws
# new ones (run it when working on what they test).
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

CHANNEL_VARIABLES = (
    "AGENT_LATENCY_BASE_URL",
    "AGENT_LATENCY_API_KEY",
    "AGENT_LATENCY_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Runs the files holding a test marked slow first, each file's tests still together.

    Parallel workers (``make test``) take whole files in this order: a file of minutes started
    last would leave one worker running it alone at the end.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty working directory (no config.toml or settings.json of the developer's) and no
    channel variables of the caller's shell; returns the directory."""
    monkeypatch.chdir(tmp_path)
    for variable in CHANNEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    return tmp_path


@pytest.fixture
def span_exporter() -> InMemorySpanExporter:
    """Collects finished spans of ``tracer_provider``."""
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(span_exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """A tracer provider exporting synchronously to ``span_exporter``; not global."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def metric_reader() -> InMemoryMetricReader:
    """Reads the metrics of ``meter_provider`` on demand."""
    return InMemoryMetricReader()


@pytest.fixture
def meter_provider(metric_reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    """A meter provider read by ``metric_reader``; not global."""
    provider = MeterProvider(metric_readers=[metric_reader])
    yield provider
    provider.shutdown()


@pytest.fixture
def metric_points(
    metric_reader: InMemoryMetricReader,
) -> Callable[[str], list[Any]]:
    """Returns a function giving the current data points of one metric, by name."""

    def points(name: str) -> list[Any]:
        data = metric_reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource_metrics in data.resource_metrics
            for scope_metrics in resource_metrics.scope_metrics
            for metric in scope_metrics.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    return points


@pytest.fixture
def otlp_receiver() -> Iterator[OTLPReceiver]:
    """An OTLP/HTTP collector on 127.0.0.1 that decodes and keeps what it receives."""
    with OTLPReceiver() as receiver:
        yield receiver


@pytest.fixture
def sim() -> Iterator[RunningSimulator]:
    """The simulator answering at once (``QUICK``), one per test. A module that needs another
    configuration defines a ``sim`` of its own, which takes the place of this one."""
    with running_simulator(QUICK) as running:
        yield running
