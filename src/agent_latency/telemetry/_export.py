"""Exporters that report their health: one WARNING when a collector stops answering, one
INFO when it is back, and the OTLP exporters' own per-attempt warnings let through once, with
the endpoints' credentials masked. At shutdown, a collector whose port refuses connections
(:func:`refuses_connections`) is not waited for: its exporters drop what is left."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agent_latency._redaction import redact, url_secrets
from agent_latency.telemetry._log import logger

_R = TypeVar("_R")

HEADER_VARIABLES: Final = (
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
)
"""The variables of the headers the OTLP exporters send, credentials among them."""

PROBE_TIMEOUT_S: Final = 0.25
"""How long :func:`refuses_connections` waits at most: a refusal comes in one round trip."""


class ExportHealth:
    """Logs the first failure of a signal's exports once, and the recovery after it."""

    def __init__(self, signal: str, destination: str) -> None:
        self._what = (signal, destination)
        self._failing = False
        self._lock = threading.Lock()

    def report(self, ok: bool) -> None:
        with self._lock:
            changed = ok == self._failing
            self._failing = not ok
        if not changed:
            if not ok:
                logger.debug("agent-latency: %s export to %s failed again", *self._what)
            return
        if ok:
            logger.info("agent-latency: %s export to %s works again", *self._what)
        else:
            logger.warning(
                "agent-latency: cannot export %s to %s; they are dropped until the collector "
                "answers (the application is not slowed down; further failures at DEBUG)",
                *self._what,
            )


class _Reporting:
    """Delegates to an exporter and reports each outcome to ``health`` (an
    :class:`ExportHealth`); ``url`` is where the exporter sends, for :func:`refuses_connections`."""

    def __init__(self, health: ExportHealth, url: str) -> None:
        self._health = health
        self.url = url
        self._dropping = threading.Event()

    def drop(self) -> None:
        """From now on fails every export at once, without sending or reporting it."""
        self._dropping.set()

    def _report(self, kind: str, send: Callable[[], _R], success: _R, failure: _R) -> _R:
        if self._dropping.is_set():
            return failure
        try:
            result = send()
        except Exception as error:
            # Not the traceback: the HTTP client's errors quote the URL, credentials and all.
            shown = mask(f"{type(error).__name__}: {error}", url_secrets(self.url))
            logger.debug("agent-latency: %s exporter raised %s", kind, shown)
            result = failure
        self._health.report(result is success)
        return result


class ReportingSpanExporter(_Reporting, SpanExporter):
    """A span exporter that reports to an :class:`ExportHealth` (see :class:`_Reporting`)."""

    def __init__(self, inner: SpanExporter, health: ExportHealth, url: str) -> None:
        super().__init__(health, url)
        self._inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ok, failed = SpanExportResult.SUCCESS, SpanExportResult.FAILURE
        return self._report("span", lambda: self._inner.export(spans), ok, failed)

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


class ReportingMetricExporter(_Reporting, MetricExporter):
    """A metric exporter that reports to an :class:`ExportHealth` (see :class:`_Reporting`)."""

    def __init__(self, inner: MetricExporter, health: ExportHealth, url: str) -> None:
        _Reporting.__init__(self, health, url)
        MetricExporter.__init__(
            self,
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        def send() -> MetricExportResult:
            return self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)

        ok, failed = MetricExportResult.SUCCESS, MetricExportResult.FAILURE
        return self._report("metric", send, ok, failed)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)


def refuses_connections(address: tuple[str, int], timeout_s: float) -> bool:
    """Whether ``address`` (host, port) refuses a TCP connection within ``timeout_s`` seconds.

    Anything else (a connection, a timeout, a name that does not resolve) is ``False``: only a
    refusal says for sure that nothing listens there.
    """
    try:
        with socket.create_connection(address, timeout=timeout_s):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


class MaskingFilter(logging.Filter):
    """Masks the endpoints' credentials in the log records of a logger that may quote them.

    Args:
        secrets: What to mask: the :func:`~agent_latency._redaction.url_secrets` of each URL.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = tuple(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            # The traceback would quote the URL again: keep the exception's type only.
            text = f"{text} ({type(record.exc_info[1]).__name__})"
            record.exc_info = None
            record.exc_text = None
        record.msg, record.args = mask(text, self._secrets), ()
        return True


class ExporterLogFilter(MaskingFilter):
    """A :class:`MaskingFilter` for an OTLP exporter's logger that also lets through only its
    first warning (``ExportHealth`` says the rest), or no record at all once muted.

    The OTLP exporters log every failed attempt, which floods the application's log while a
    collector is down, and quote the HTTP client's error, which quotes the URL with its query.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__(secrets)
        self._seen = False
        self._muted = False

    def mute(self) -> None:
        """Drops every record from now on (the caller says in one line what happened)."""
        self._muted = True

    def filter(self, record: logging.LogRecord) -> bool:
        if self._muted:
            return False
        if record.levelno >= logging.WARNING:
            if self._seen:
                return False
            self._seen = True
        return super().filter(record)


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` (longest first, as given) masked."""
    for secret in secrets:
        text = redact(text, secret)
    return text


def mask_header_variables() -> tuple[logging.Logger, MaskingFilter]:
    """Puts a :class:`MaskingFilter` masking each header of the :data:`HEADER_VARIABLES` on the
    logger of OpenTelemetry's header parser, which quotes a header it cannot read as written
    (``Authorization: Bearer ...`` with a colon, not ``=``), when an exporter is made."""
    headers = {
        header
        for variable in HEADER_VARIABLES
        for header in os.environ.get(variable, "").split(",")
        if header.strip()
    }
    log, log_filter = logging.getLogger("opentelemetry.util.re"), MaskingFilter(headers)
    log.addFilter(log_filter)
    return log, log_filter


def limit_exporter_warnings(
    *exporters: object, urls: Iterable[str] = ()
) -> tuple[tuple[logging.Logger, MaskingFilter], ...]:
    """Puts an :class:`ExporterLogFilter` masking the ``urls``' credentials on each OTLP exporter
    module's logger, and a :class:`MaskingFilter` on urllib3's, which logs each request's path
    and query at DEBUG."""
    modules = sorted(
        {
            cls.__module__
            for exporter in exporters
            for cls in type(exporter).__mro__
            if cls.__module__.startswith("opentelemetry.exporter.")
        }
    )
    secrets = sorted({secret for url in urls for secret in url_secrets(url)}, key=len, reverse=True)
    filters: list[tuple[logging.Logger, MaskingFilter]] = [
        (logging.getLogger(module), ExporterLogFilter(secrets)) for module in modules
    ]
    if secrets:
        filters.append((logging.getLogger("urllib3.connectionpool"), MaskingFilter(secrets)))
    for log, log_filter in filters:
        log.addFilter(log_filter)
    return tuple(filters)
