"""Shared fixtures: in-memory OpenTelemetry providers and a local OTLP receiver."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import OTLPReceiver


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
