"""Exporters that report their health: one WARNING when a collector stops answering, one
INFO when it is back, and the OTLP exporters' own per-attempt warnings let through once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agent_latency.telemetry._log import logger


class ExportHealth:
    """Logs the first failure of a signal's exports once, and the recovery after it."""

    def __init__(self, signal: str, destination: str) -> None:
        self._signal = signal
        self._destination = destination
        self._failing = False
        self._lock = threading.Lock()

    def report(self, ok: bool) -> None:
        with self._lock:
            changed = ok == self._failing
            self._failing = not ok
        if not changed:
            if not ok:
                logger.debug("agent-latency: %s export to %s failed again", *self._describe())
            return
        if ok:
            logger.info("agent-latency: %s export to %s works again", *self._describe())
        else:
            logger.warning(
                "agent-latency: cannot export %s to %s; they are dropped until the collector "
                "answers (the application is not slowed down; further failures at DEBUG)",
                *self._describe(),
            )

    def _describe(self) -> tuple[str, str]:
        return self._signal, self._destination


class ReportingSpanExporter(SpanExporter):
    """Delegates to an exporter and reports each outcome to an :class:`ExportHealth`."""

    def __init__(self, inner: SpanExporter, health: ExportHealth) -> None:
        self._inner = inner
        self._health = health

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            logger.debug("agent-latency: span exporter raised", exc_info=True)
            result = SpanExportResult.FAILURE
        self._health.report(result is SpanExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


class ReportingMetricExporter(MetricExporter):
    """Delegates to a metric exporter and reports each outcome to an :class:`ExportHealth`."""

    def __init__(self, inner: MetricExporter, health: ExportHealth) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self._health = health

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception:
            logger.debug("agent-latency: metric exporter raised", exc_info=True)
            result = MetricExportResult.FAILURE
        self._health.report(result is MetricExportResult.SUCCESS)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class _OnlyFirstWarning(logging.Filter):
    """Lets through the first warning of an exporter's logger; ``ExportHealth`` says the rest.

    The OTLP exporters log every failed attempt, which floods the application's log while a
    collector is down.
    """

    def __init__(self) -> None:
        super().__init__()
        self._seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        if self._seen:
            return False
        self._seen = True
        return True


def limit_exporter_warnings(
    *exporters: object,
) -> tuple[tuple[logging.Logger, logging.Filter], ...]:
    """Lets each OTLP exporter module log its first warning only (``ExportHealth`` goes on)."""
    modules = sorted(
        {
            cls.__module__
            for exporter in exporters
            for cls in type(exporter).__mro__
            if cls.__module__.startswith("opentelemetry.exporter.")
        }
    )
    filters = []
    for module in modules:
        log, log_filter = logging.getLogger(module), _OnlyFirstWarning()
        log.addFilter(log_filter)
        filters.append((log, log_filter))
    return tuple(filters)
