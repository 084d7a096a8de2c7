"""A minimal OTLP/HTTP collector for tests: receives, decodes and keeps spans and metrics.

It listens on 127.0.0.1 on a free port, decodes the protobuf requests with
``opentelemetry-proto``, and can be told to answer slowly or with an error status, to play a
collector in trouble. Use it as a context manager; it stops by itself on exit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def any_value(value: AnyValue) -> Any:
    """The Python value of an OTLP ``AnyValue``."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return None if kind is None else getattr(value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    """OTLP key-value pairs as a dict."""
    return {pair.key: any_value(pair.value) for pair in pairs}


@dataclass(frozen=True)
class ReceivedSpan:
    """A span as it arrived: names and values decoded, ids as hex."""

    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int
    resource: dict[str, Any]
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class ReceivedPoint:
    """One metric data point: its metric's name and unit, attributes, and figures."""

    metric: str
    unit: str
    attributes: dict[str, Any]
    count: int | None = None
    sum: float | None = None
    value: float | None = None
    bucket_bounds: tuple[float, ...] = field(default=())


class OTLPReceiver:
    """An OTLP/HTTP endpoint on ``127.0.0.1``.

    Args:
        status: HTTP status to answer with (200, or e.g. 503 to refuse the data).
        delay_s: Seconds to wait before answering (a slow collector).
        base_path: The path before ``/v1/traces`` and ``/v1/metrics`` (a collector behind a
            proxy's path); any query is ignored. ``targets`` keeps each request's path and query.
    """

    def __init__(self, *, status: int = 200, delay_s: float = 0.0, base_path: str = "") -> None:
        self.status = status
        self.delay_s = delay_s
        self.base_path = base_path
        self.requests = 0
        self.targets: list[str] = []
        self._spans: list[ReceivedSpan] = []
        self._points: list[ReceivedPoint] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        """The base URL to give an OTLP/HTTP exporter (``/v1/traces`` etc. are added)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far."""
        with self._lock:
            return list(self._spans)

    def points(self, metric: str | None = None) -> list[ReceivedPoint]:
        """Every metric data point received so far, optionally of one metric only."""
        with self._lock:
            return [p for p in self._points if metric is None or p.metric == metric]

    def wait_for_spans(self, count: int, timeout_s: float = 5.0) -> list[ReceivedSpan]:
        """Waits until at least ``count`` spans arrived; returns them all."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            spans = self.spans()
            if len(spans) >= count:
                return spans
            time.sleep(0.01)
        return self.spans()

    def _receive(self, target: str, body: bytes) -> bytes:
        path = urlsplit(target).path.removeprefix(self.base_path)
        if path == "/v1/traces":
            trace_request = ExportTraceServiceRequest.FromString(body)
            spans = list(_decode_spans(trace_request))
            with self._lock:
                self._spans.extend(spans)
            return ExportTraceServiceResponse().SerializeToString()
        if path == "/v1/metrics":
            metric_request = ExportMetricsServiceRequest.FromString(body)
            points = list(_decode_points(metric_request))
            with self._lock:
                self._points.extend(points)
            return ExportMetricsServiceResponse().SerializeToString()
        raise LookupError(path)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests += 1
                receiver.targets.append(self.path)
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                if receiver.status != 200:
                    self._answer(receiver.status, b"")
                    return
                try:
                    payload = receiver._receive(self.path, body)
                except LookupError:
                    self._answer(404, b"")
                    return
                self._answer(200, payload)

            def _answer(self, status: int, payload: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the exporter gave up waiting (a slow-collector test): nobody listens

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        return Handler


def _decode_spans(request: ExportTraceServiceRequest) -> Iterator[ReceivedSpan]:
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    name=span.name,
                    kind=span.kind,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    attributes=attributes(span.attributes),
                    events=[(event.name, attributes(event.attributes)) for event in span.events],
                    status_code=span.status.code,
                    resource=resource,
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                )


def _decode_points(request: ExportMetricsServiceRequest) -> Iterator[ReceivedPoint]:
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind == "histogram":
                    for point in metric.histogram.data_points:
                        yield ReceivedPoint(
                            metric=metric.name,
                            unit=metric.unit,
                            attributes=attributes(point.attributes),
                            count=point.count,
                            sum=point.sum,
                            bucket_bounds=tuple(point.explicit_bounds),
                        )
                elif kind == "sum":
                    for number in metric.sum.data_points:
                        yield ReceivedPoint(
                            metric=metric.name,
                            unit=metric.unit,
                            attributes=attributes(number.attributes),
                            value=number.as_int or number.as_double,
                        )
