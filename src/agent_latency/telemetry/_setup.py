"""OpenTelemetry setup for agent-latency: tracer and meter providers with sane exporters.

Exports run in background threads (a batch span processor and a periodic metric reader) with
bounded queues and short timeouts, so a collector that is down or slow costs the application
nothing but the telemetry it drops. Export failures are logged once, then at DEBUG until the
collector is back.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final
from urllib.parse import urlsplit

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)

from agent_latency._redaction import display_url
from agent_latency.config import Settings, is_http_url
from agent_latency.telemetry._export import (
    ExportHealth,
    ReportingMetricExporter,
    ReportingSpanExporter,
    limit_exporter_warnings,
)
from agent_latency.telemetry._handler import LatencyCallbackHandler
from agent_latency.telemetry._log import logger

EXPORTERS: Final = ("otlp", "otlp-http", "otlp-grpc", "console", "none")
"""The accepted values of ``configure_telemetry(exporter=...)``."""

_PROTOCOL_ENV: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
_ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
_TIMEOUT_ENV: Final = "OTEL_EXPORTER_OTLP_TIMEOUT"
_DEFAULT_HTTP_ENDPOINT: Final = "http://localhost:4318"
_DEFAULT_GRPC_ENDPOINT: Final = "http://localhost:4317"
_EXPORT_TIMEOUT_S: Final = 3.0
"""Per-request export timeout unless ``OTEL_EXPORTER_OTLP_TIMEOUT`` says otherwise (OTel: 10 s)."""
_METRIC_INTERVAL_MS: Final = 15_000


@dataclass(frozen=True, eq=False)
class Telemetry:
    """The providers :func:`configure_telemetry` set up, and their shutdown.

    Use it as a context manager, or call :meth:`shutdown` before the process exits so the last
    spans and metrics are sent.

    Attributes:
        tracer_provider: Where spans go.
        meter_provider: Where metrics go.
        settings: The settings :meth:`handler` takes its thresholds from.
        exporter: The exporter in use: ``otlp-http``, ``otlp-grpc``, ``console`` or ``none``.
        endpoint: Where OTLP data goes (without any credentials in the URL), or ``None``.
    """

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    settings: Settings
    exporter: str
    endpoint: str | None
    _log_filters: tuple[tuple[logging.Logger, logging.Filter], ...] = field(default=(), repr=False)
    _export_timeout_s: float = field(default=_EXPORT_TIMEOUT_S, repr=False)
    _shut_down: threading.Event = field(default_factory=threading.Event, repr=False)

    def handler(self, **overrides: Any) -> LatencyCallbackHandler:
        """Returns a :class:`LatencyCallbackHandler` reporting to these providers.

        Args:
            **overrides: Constructor keywords winning over the settings' thresholds.
        """
        options: dict[str, Any] = {
            "tracer_provider": self.tracer_provider,
            "meter_provider": self.meter_provider,
            **overrides,
        }
        return LatencyCallbackHandler.from_settings(self.settings, **options)

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Flushes and stops both providers at once, waiting at most ``timeout_s`` seconds.

        Spans and metrics a slow or hung collector has not taken by then are dropped (a WARNING
        says so) and the call returns; the exports finish or fail in the background. Telemetry
        from :func:`configure_telemetry` is shut down this way at interpreter exit too; a second
        call does nothing.

        Args:
            timeout_s: The longest wait; the export timeout by default (3 s, or
                ``OTEL_EXPORTER_OTLP_TIMEOUT``).

        Raises:
            ValueError: When ``timeout_s`` is not a finite number >= 0.
        """
        if timeout_s is None:
            timeout_s = self._export_timeout_s
        elif (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not math.isfinite(timeout_s)
            or timeout_s < 0
        ):
            raise ValueError(
                "Telemetry.shutdown: timeout_s must be a number of seconds >= 0, "
                f"got {timeout_s!r}."
            )
        if self._shut_down.is_set():
            return
        self._shut_down.set()
        atexit.unregister(self.shutdown)
        deadline = time.monotonic() + timeout_s
        try:
            workers = [
                _start_quietly("tracer provider", self.tracer_provider.shutdown),
                _start_quietly(
                    "meter provider",
                    lambda: self.meter_provider.shutdown(timeout_millis=timeout_s * 1000),
                ),
            ]
            for worker in workers:
                worker.join(max(0.0, deadline - time.monotonic()))
            if any(worker.is_alive() for worker in workers):
                logger.warning(
                    "agent-latency: telemetry shutdown gave up after %.1f s (the collector at %s "
                    "does not answer); the spans and metrics not yet sent are dropped",
                    timeout_s,
                    self.endpoint or self.exporter,
                )
        finally:
            for log, log_filter in self._log_filters:
                log.removeFilter(log_filter)

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.shutdown()


def configure_telemetry(
    settings: Settings | None = None,
    *,
    service_name: str = "agent-latency",
    exporter: str | None = None,
    endpoint: str | None = None,
    set_global: bool = True,
) -> Telemetry:
    """Sets up OpenTelemetry tracing and metrics for agent-latency.

    Standard environment variables apply: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (when ``endpoint``
    is not given), ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf`` or ``grpc``, for
    ``exporter="otlp"``), ``OTEL_EXPORTER_OTLP_TIMEOUT``, ``OTEL_EXPORTER_OTLP_HEADERS``,
    ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (a service name set there wins over
    ``service_name``), and the ``OTEL_BSP_*`` batch and ``OTEL_METRIC_EXPORT_INTERVAL`` options.

    Args:
        settings: Settings for the handlers made by :meth:`Telemetry.handler`; the defaults when
            ``None``.
        service_name: The ``service.name`` resource attribute.
        exporter: ``"otlp"`` (OTLP, protocol from the environment, HTTP/protobuf by default),
            ``"otlp-http"``, ``"otlp-grpc"``, ``"console"`` (print to stdout) or ``"none"``
            (spans and metrics are made, for ``on_record`` and in-process readers, but not
            exported). ``None`` means ``"otlp"``.
        endpoint: The collector's base URL, e.g. ``http://localhost:4318`` for HTTP or
            ``http://localhost:4317`` for gRPC; the ``/v1/traces`` and ``/v1/metrics`` paths are
            added for HTTP.
        set_global: Also install the providers as OpenTelemetry's global ones, so handlers made
            without explicit providers (and other instrumentations) use them. OpenTelemetry
            allows that once per process; later calls keep the first global providers.

    Returns:
        The providers and their shutdown.

    Raises:
        ValueError: When ``exporter``, ``endpoint``, ``service_name`` or the OTLP protocol from
            the environment is not one that works; the message names it.
    """
    if not isinstance(service_name, str) or not service_name.strip():
        raise ValueError(
            f"configure_telemetry: service_name must be a non-empty string, got {service_name!r}."
        )
    if not isinstance(set_global, bool):
        raise ValueError(
            f"configure_telemetry: set_global must be True or False, got {set_global!r}."
        )
    if settings is not None and not isinstance(settings, Settings):
        raise ValueError(
            "configure_telemetry: settings must be a Settings (from load_settings()) or None, "
            f"got {type(settings).__name__}."
        )
    kind = _exporter_kind(exporter)
    if endpoint is not None:
        _check_endpoint(endpoint)

    resource = _resource(service_name)
    # Shut down by Telemetry.shutdown, at exit too: the SDK's own exit hooks wait unbounded.
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    readers: list[MetricReader] = []
    log_filters: tuple[tuple[logging.Logger, logging.Filter], ...] = ()
    used_endpoint: str | None = None
    timeout_s = None if os.environ.get(_TIMEOUT_ENV) else _EXPORT_TIMEOUT_S
    interval = None if os.environ.get("OTEL_METRIC_EXPORT_INTERVAL") else _METRIC_INTERVAL_MS

    if kind == "console":
        # sys.stdout as it is now (the exporters' default is the one at import time).
        tracer_provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stdout)))
        readers.append(
            PeriodicExportingMetricReader(
                ConsoleMetricExporter(out=sys.stdout), export_interval_millis=interval
            )
        )
    elif kind in ("otlp-http", "otlp-grpc"):
        span_exporter, metric_exporter, destination = _otlp_exporters(kind, endpoint, timeout_s)
        used_endpoint = display_url(destination)
        log_filters = limit_exporter_warnings(span_exporter, metric_exporter)
        tracer_provider.add_span_processor(
            BatchSpanProcessor(
                # Bounded queue (OTEL_BSP_MAX_QUEUE_SIZE, 2048 spans): when the collector
                # cannot keep up, spans are dropped rather than memory growing.
                ReportingSpanExporter(span_exporter, ExportHealth("spans", used_endpoint))
            )
        )
        readers.append(
            PeriodicExportingMetricReader(
                ReportingMetricExporter(metric_exporter, ExportHealth("metrics", used_endpoint)),
                export_interval_millis=interval,
            )
        )
    meter_provider = MeterProvider(
        resource=resource, metric_readers=readers, shutdown_on_exit=False
    )
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    telemetry = Telemetry(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        settings=settings if settings is not None else Settings(),
        exporter=kind,
        endpoint=used_endpoint,
        _log_filters=log_filters,
        _export_timeout_s=_timeout_from_environment() if timeout_s is None else timeout_s,
    )
    atexit.register(telemetry.shutdown)
    return telemetry


def _timeout_from_environment() -> float:
    """``OTEL_EXPORTER_OTLP_TIMEOUT`` in seconds, as the Python exporters read it."""
    try:
        value = float(os.environ.get(_TIMEOUT_ENV, ""))
    except ValueError:
        return _EXPORT_TIMEOUT_S
    return value if math.isfinite(value) and value >= 0 else _EXPORT_TIMEOUT_S


def _start_quietly(what: str, stop: Callable[[], object]) -> threading.Thread:
    """Runs ``stop`` in a daemon thread (a hung export must not keep the process alive)."""

    def run() -> None:
        try:
            stop()
        except Exception:
            logger.debug("agent-latency: shutting down the %s failed", what, exc_info=True)

    worker = threading.Thread(target=run, name=f"agent-latency shutdown: {what}", daemon=True)
    worker.start()
    return worker


def _exporter_kind(exporter: str | None) -> str:
    if exporter is not None and exporter not in EXPORTERS:
        raise ValueError(
            f"configure_telemetry: exporter must be one of {', '.join(EXPORTERS)}, "
            f"got {exporter!r}."
        )
    if exporter not in (None, "otlp"):
        return exporter
    protocol = os.environ.get(_PROTOCOL_ENV, "http/protobuf").strip()
    if protocol == "grpc":
        return "otlp-grpc"
    if protocol == "http/protobuf":
        return "otlp-http"
    raise ValueError(
        f"configure_telemetry: {_PROTOCOL_ENV}={protocol!r} is not supported; use "
        "'http/protobuf' or 'grpc'."
    )


def _check_endpoint(endpoint: object) -> None:
    if not is_http_url(endpoint):
        raise ValueError(
            "configure_telemetry: endpoint must be a URL such as http://localhost:4318, "
            f"got {endpoint!r}."
        )


def _resource(service_name: str) -> Resource:
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are the operator's word: they win.
    from_environment = OTELResourceDetector().detect().attributes.get(SERVICE_NAME)
    return Resource.create({} if from_environment else {SERVICE_NAME: service_name})


def _otlp_exporters(
    kind: str, endpoint: str | None, timeout_s: float | None
) -> tuple[SpanExporter, MetricExporter, str]:
    """The OTLP exporters of ``kind``, and where they send (for log messages).

    Without an explicit endpoint the exporters read the standard environment variables
    themselves, the per-signal ones included.
    """
    configured = endpoint or os.environ.get(_ENDPOINT_ENV)
    if kind == "otlp-grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcMetricExporter,
            )
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )
        except ImportError:
            raise ImportError(
                "configure_telemetry: OTLP over gRPC (exporter='otlp-grpc' or "
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc) needs the grpc extra. Fix: pip install "
                "'agent-latency[grpc]', or send OTLP over HTTP (exporter='otlp-http')."
            ) from None

        insecure = None if endpoint is None else urlsplit(endpoint).scheme == "http"
        return (
            GrpcSpanExporter(endpoint=endpoint, insecure=insecure, timeout=timeout_s),
            GrpcMetricExporter(endpoint=endpoint, insecure=insecure, timeout=timeout_s),
            configured or _DEFAULT_GRPC_ENDPOINT,
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    root = None if endpoint is None else endpoint.rstrip("/")
    return (
        HttpSpanExporter(endpoint=None if root is None else f"{root}/v1/traces", timeout=timeout_s),
        HttpMetricExporter(
            endpoint=None if root is None else f"{root}/v1/metrics", timeout=timeout_s
        ),
        (configured or _DEFAULT_HTTP_ENDPOINT).rstrip("/"),
    )
