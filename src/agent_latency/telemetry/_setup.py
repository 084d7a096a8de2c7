"""OpenTelemetry setup: tracer and meter providers whose exports, in background threads with
bounded queues and short timeouts, cost the application nothing when the collector is down."""

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
from typing import Any, Final, TextIO, cast
from urllib.parse import urlsplit, urlunsplit

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

from agent_latency._redaction import display_url, host_and_port
from agent_latency.config import Settings, is_http_url
from agent_latency.telemetry._console import GuardedOutput, LocalRoots, TreeSpanExporter
from agent_latency.telemetry._export import (
    PROBE_TIMEOUT_S,
    ExporterLogFilter,
    ExportHealth,
    MaskingFilter,
    ReportingMetricExporter,
    ReportingSpanExporter,
    limit_exporter_warnings,
    mask_header_variables,
    refuses_connections,
)
from agent_latency.telemetry._handler import LatencyCallbackHandler
from agent_latency.telemetry._log import WarningLineHandler, logger

EXPORTERS: Final = ("otlp", "otlp-http", "otlp-grpc", "console", "console-json", "none")
"""The accepted values of ``configure_telemetry(exporter=...)``."""

_PROTOCOL_ENV: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
_ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
_TRACES_ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
_METRICS_ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
_METRICS_EXPORTER_ENV: Final = "OTEL_METRICS_EXPORTER"
_SIGNAL_PATHS: Final = ("/v1/traces", "/v1/metrics")
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
        exporter: The exporter in use: ``otlp-http``, ``otlp-grpc``, ``console``,
            ``console-json`` or ``none``.
        endpoint: Where OTLP spans go (the traces URL, without any credentials), or ``None``.
    """

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    settings: Settings
    exporter: str
    endpoint: str | None
    _log_filters: tuple[tuple[logging.Logger, MaskingFilter], ...] = field(default=(), repr=False)
    _exporters: tuple[ReportingSpanExporter | ReportingMetricExporter, ...] = field(
        default=(), repr=False
    )
    _export_timeout_s: float = field(default=_EXPORT_TIMEOUT_S, repr=False)
    _shut_down: threading.Event = field(default_factory=threading.Event, repr=False)

    def handler(self, **overrides: Any) -> LatencyCallbackHandler:
        """Returns a :class:`LatencyCallbackHandler` reporting to these providers.

        Args:
            **overrides: Constructor keywords winning over the settings' thresholds.
        """
        providers = {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}
        return LatencyCallbackHandler.from_settings(self.settings, **(providers | overrides))

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Flushes and stops both providers at once, waiting at most ``timeout_s`` seconds.

        Spans and metrics a slow or hung collector has not taken by then are dropped (a WARNING
        says so); a collector whose port refuses connections is not waited for. Telemetry from
        :func:`configure_telemetry` is shut down this way at interpreter exit too; a second call
        does nothing.

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
        # Asked within the wait: a quarter of it at most, so the flush keeps the rest.
        refused = self._drop_where_refused(min(PROBE_TIMEOUT_S, timeout_s / 4))
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
            if refused:
                logger.warning(
                    "agent-latency: nothing listens at %s (connection refused); the spans and "
                    "metrics not yet sent are dropped",
                    ", ".join(refused),
                )
            elif any(worker.is_alive() for worker in workers):
                logger.warning(
                    "agent-latency: telemetry shutdown gave up after %.1f s (the collector at %s "
                    "does not answer); the spans and metrics not yet sent are dropped",
                    timeout_s,
                    self.endpoint or self.exporter,
                )
        finally:
            for log, log_filter in self._log_filters:
                log.removeFilter(log_filter)

    def _drop_where_refused(self, timeout_s: float) -> list[str]:
        """Makes the exporters whose collector refuses connections drop what is left and be
        quiet; returns those ``host:port`` addresses, each asked once for at most ``timeout_s``."""
        addresses = {a for e in self._exporters if (a := host_and_port(e.url)) is not None}
        refusing: set[tuple[str, int]] = set()

        def probe() -> None:
            for address in addresses:
                if refuses_connections(address, timeout_s):
                    refusing.add(address)

        # In a thread of its own: resolving a host name knows no timeout.
        prober = threading.Thread(target=probe, name="agent-latency probe", daemon=True)
        prober.start()
        prober.join(timeout_s * max(1, len(addresses)))
        refused = set(refusing)  # what was known in time
        dropping = [e for e in self._exporters if host_and_port(e.url) in refused]
        for exporter in dropping:
            exporter.drop()
        if dropping:
            for _, log_filter in self._log_filters:
                if isinstance(log_filter, ExporterLogFilter):
                    log_filter.mute()
        return sorted(f"{host}:{port}" for host, port in refused)

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
    traces_endpoint: str | None = None,
    metrics_endpoint: str | None = None,
    set_global: bool = True,
) -> Telemetry:
    """Sets up OpenTelemetry tracing and metrics for agent-latency.

    Standard environment variables apply: ``OTEL_EXPORTER_OTLP_ENDPOINT`` and the per-signal
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` and ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` (each
    when its argument is not given), ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf`` or
    ``grpc``, for ``exporter="otlp"``), ``OTEL_EXPORTER_OTLP_TIMEOUT``,
    ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (a
    service name set there wins over ``service_name``), ``OTEL_METRICS_EXPORTER=none`` (OTLP
    spans only, for a trace UI that takes no metrics), and the ``OTEL_BSP_*`` batch and
    ``OTEL_METRIC_EXPORT_INTERVAL`` options.

    Args:
        settings: Settings for the handlers made by :meth:`Telemetry.handler`; the defaults when
            ``None``.
        service_name: The ``service.name`` resource attribute.
        exporter: ``"otlp"`` (OTLP, protocol from the environment, HTTP/protobuf by default),
            ``"otlp-http"``, ``"otlp-grpc"``, ``"console"`` (each trace printed to stdout as a
            tree, a line per span; no metrics), ``"console-json"`` (every span and metric
            printed to stdout as OpenTelemetry's JSON) or ``"none"`` (spans and metrics are
            made, for ``on_record`` and in-process readers, but not exported). ``None`` means
            ``"otlp"``.
        endpoint: The collector's base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT``: e.g.
            ``http://localhost:4318`` for HTTP, which gets ``v1/traces`` and ``v1/metrics``
            appended to its path (a query is kept), or ``http://localhost:4317`` for gRPC.
        traces_endpoint: The URL spans go to, used as given, as
            ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``: e.g. ``http://localhost:4318/v1/traces``.
        metrics_endpoint: The URL metrics go to, used as given, as
            ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``.
        set_global: Also install the providers as OpenTelemetry's global ones, so handlers made
            without explicit providers (and other instrumentations) use them. OpenTelemetry
            allows that once per process; later calls keep the first global providers.

    Returns:
        The providers and their shutdown.

    Raises:
        ValueError: When ``exporter``, an endpoint, ``service_name`` or the OTLP protocol from
            the environment is not one that works (a base ``endpoint`` ending in ``/v1/traces``
            is refused: that path would be doubled); the message names it.
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
    for name, value in (
        ("endpoint", endpoint),
        ("traces_endpoint", traces_endpoint),
        ("metrics_endpoint", metrics_endpoint),
    ):
        if value is not None and not is_http_url(value):
            raise _not_a_url(name, value)
    if endpoint is not None and kind != "otlp-grpc":
        _check_base_endpoint(endpoint)

    WarningLineHandler.install()
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are the operator's word: they win.
    from_environment = OTELResourceDetector().detect().attributes.get(SERVICE_NAME)
    resource = Resource.create({} if from_environment else {SERVICE_NAME: service_name})
    # Shut down by Telemetry.shutdown, at exit too: the SDK's own exit hooks wait unbounded.
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    readers: list[MetricReader] = []
    log_filters: tuple[tuple[logging.Logger, MaskingFilter], ...] = ()
    exporters: tuple[ReportingSpanExporter | ReportingMetricExporter, ...] = ()
    used_endpoint: str | None = None
    timeout_s = None if os.environ.get(_TIMEOUT_ENV) else _EXPORT_TIMEOUT_S
    interval = None if os.environ.get("OTEL_METRIC_EXPORT_INTERVAL") else _METRIC_INTERVAL_MS

    if kind == "console":
        roots = LocalRoots()  # a run under the application's own span is a tree of its own
        tracer_provider.add_span_processor(roots)
        tracer_provider.add_span_processor(
            BatchSpanProcessor(TreeSpanExporter(out=_console_output(), roots=roots))
        )
    elif kind == "console-json":
        out = _console_output()
        tracer_provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=out)))
        readers.append(
            PeriodicExportingMetricReader(
                ConsoleMetricExporter(out=out), export_interval_millis=interval
            )
        )
    elif kind in ("otlp-http", "otlp-grpc"):
        traces_url, metrics_url = _signal_urls(kind, endpoint, traces_endpoint, metrics_endpoint)
        headers_log, headers_filter = mask_header_variables()
        try:
            span_exporter, metric_exporter = _otlp_exporters(
                kind, traces_url, metrics_url, timeout_s
            )
        except BaseException:
            headers_log.removeFilter(headers_filter)
            raise
        used_endpoint = display_url(traces_url)
        log_filters = (
            (headers_log, headers_filter),
            *limit_exporter_warnings(
                span_exporter, metric_exporter, urls=(traces_url, metrics_url)
            ),
        )
        spans = ReportingSpanExporter(
            span_exporter, ExportHealth("spans", used_endpoint), traces_url
        )
        # Bounded queue (OTEL_BSP_MAX_QUEUE_SIZE, 2048 spans): when the collector cannot keep
        # up, spans are dropped rather than memory growing.
        tracer_provider.add_span_processor(BatchSpanProcessor(spans))
        exporters = (spans,)
        if os.environ.get(_METRICS_EXPORTER_ENV, "").strip() != "none":  # a trace-only UI
            metric_health = ExportHealth("metrics", display_url(metrics_url))
            exporters += (ReportingMetricExporter(metric_exporter, metric_health, metrics_url),)
            readers.append(
                PeriodicExportingMetricReader(exporters[-1], export_interval_millis=interval)
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
        _exporters=exporters,
        _export_timeout_s=_timeout_from_environment() if timeout_s is None else timeout_s,
    )
    atexit.register(telemetry.shutdown)
    return telemetry


def _console_output() -> TextIO:
    """``sys.stdout`` as it is now (the exporters' default is the one at import time), guarded."""
    return cast("TextIO", GuardedOutput(sys.stdout))


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


def _check_base_endpoint(endpoint: str, *, variable: bool = False) -> None:
    """Refuses an OTLP/HTTP base URL that ends in a signal's path, which would be doubled: the
    ``endpoint`` argument, or with ``variable`` :data:`_ENDPOINT_ENV`."""
    parts = urlsplit(endpoint)
    path = parts.path.rstrip("/")
    suffix = next((suffix for suffix in _SIGNAL_PATHS if path.endswith(suffix)), None)
    if suffix is None:
        return
    base = display_url(urlunsplit(parts._replace(path=path.removesuffix(suffix))))
    name, fix, per_signal = (
        (
            _ENDPOINT_ENV,
            f"{_ENDPOINT_ENV}={base}",
            f"{_TRACES_ENDPOINT_ENV} and {_METRICS_ENDPOINT_ENV}",
        )
        if variable
        else (
            f"endpoint (as {_ENDPOINT_ENV})",
            f"endpoint={base!r}",
            "traces_endpoint= and metrics_endpoint=",
        )
    )
    raise ValueError(
        f"configure_telemetry: {name} is the collector's base URL and gets /v1/traces and "
        f"/v1/metrics appended; {display_url(endpoint)} would send to {suffix}{suffix}. Fix: "
        f"{fix} (any query is kept), or {per_signal} for URLs used as given."
    )


def _not_a_url(name: str, value: object) -> ValueError:
    """The error for an endpoint option or variable ``name`` that is no http(s) URL."""
    shown = display_url(value) if isinstance(value, str) else repr(value)
    return ValueError(
        f"configure_telemetry: {name} must be a URL such as http://localhost:4318, got {shown}."
    )


def _url_from_environment(variable: str) -> str:
    """An endpoint variable's URL (empty when unset), refused by name when it is no http(s) URL:
    the exporters would take ``127.0.0.1:4318`` as it is and send nothing to it."""
    value = os.environ.get(variable, "").strip()
    if value and not is_http_url(value):
        raise _not_a_url(variable, value)
    return value


def _signal_urls(
    kind: str, endpoint: str | None, traces_endpoint: str | None, metrics_endpoint: str | None
) -> tuple[str, str]:
    """Where the spans and the metrics go, by OpenTelemetry's rules (an argument wins over its
    environment variable; see :func:`configure_telemetry`), localhost by default."""
    grpc = kind == "otlp-grpc"

    def base() -> str:  # read only for a signal without a URL of its own
        from_environment = "" if endpoint else _url_from_environment(_ENDPOINT_ENV)
        if from_environment and not grpc:
            _check_base_endpoint(from_environment, variable=True)
        return (
            endpoint
            or from_environment
            or (_DEFAULT_GRPC_ENDPOINT if grpc else _DEFAULT_HTTP_ENDPOINT)
        )

    def url(given: str | None, variable: str, signal: str) -> str:
        chosen = given or _url_from_environment(variable)
        if chosen:
            return chosen
        return base() if grpc else _with_signal_path(base(), signal)

    return (
        url(traces_endpoint, _TRACES_ENDPOINT_ENV, "traces"),
        url(metrics_endpoint, _METRICS_ENDPOINT_ENV, "metrics"),
    )


def _with_signal_path(base: str, signal: str) -> str:
    """``base`` with ``v1/{signal}`` appended to its path (OTLP/HTTP), query and fragment kept."""
    parts = urlsplit(base)
    path = parts.path if parts.path.endswith("/") else f"{parts.path}/"
    return urlunsplit(parts._replace(path=f"{path}v1/{signal}"))


def _otlp_exporters(
    kind: str, traces_url: str, metrics_url: str, timeout_s: float | None
) -> tuple[SpanExporter, MetricExporter]:
    """The OTLP exporters of ``kind``, sending to the given URLs as they are."""
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

        return (
            GrpcSpanExporter(
                endpoint=traces_url, insecure=_grpc_insecure(traces_url), timeout=timeout_s
            ),
            GrpcMetricExporter(
                endpoint=metrics_url, insecure=_grpc_insecure(metrics_url), timeout=timeout_s
            ),
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return (
        HttpSpanExporter(endpoint=traces_url, timeout=timeout_s),
        HttpMetricExporter(endpoint=metrics_url, timeout=timeout_s),
    )


def _grpc_insecure(url: str) -> bool | None:
    """``http://`` means no TLS; an address without a scheme leaves it to the environment."""
    scheme = urlsplit(url).scheme
    return scheme == "http" if scheme in ("http", "https") else None
