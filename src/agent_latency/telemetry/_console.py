"""The ``console`` exporter: each trace printed as a tree, one short line per span (a model
call's two more: TTFT and tokens), once its root span ends (or at shutdown). Its root is the
span that started under no span of the provider: the first of a trace, or a child of the
application's own span from another provider (a traced web request)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final, TextIO

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import StatusCode

from agent_latency import semconv
from agent_latency.telemetry._log import logger

_INDENT: Final = "  "
_MAX_HELD_TRACES: Final = 1000
"""Traces waiting for their root at most; past it the oldest is printed as it is."""


class GuardedOutput:
    """What the console exporters print to: ``out`` (``sys.stdout`` as the caller found it)
    until a write or flush fails (a pipe ``head`` closed, a closed file), then nothing, after one
    WARNING: the SDK would log the error's traceback on every export. Only ``write`` and
    ``flush``, which is all they call (no ``io`` base class: its finaliser flushes, which would
    warn about a file long closed, such as a test's captured stdout)."""

    def __init__(self, out: TextIO) -> None:
        self._out: TextIO | None = out

    def write(self, text: str) -> int:
        if self._out is not None:
            try:
                self._out.write(text)
            except (OSError, ValueError) as exc:  # ValueError: a closed file
                self._give_up(exc)
        return len(text)

    def flush(self) -> None:
        if self._out is not None:
            try:
                self._out.flush()
            except (OSError, ValueError) as exc:
                self._give_up(exc)

    def _give_up(self, exc: Exception) -> None:
        self._out = None
        logger.warning(
            "agent-latency: the console exporter cannot write to stdout (%s); it prints nothing "
            "more",
            type(exc).__name__,
        )


class LocalRoots(SpanProcessor):
    """Notes the spans that start under no open span of their provider: the roots of the trees
    :class:`TreeSpanExporter` prints, whether their parent is another provider's or none.

    Add it to the provider before the exporter's processor. It keeps the ids of the open spans
    and of at most ``_MAX_HELD_TRACES`` roots not yet exported (one dropped by a full export
    queue is forgotten in time).
    """

    def __init__(self) -> None:
        self._open: set[int] = set()
        self._roots: dict[int, None] = {}
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        span_id = span.get_span_context().span_id
        parent = span.parent
        with self._lock:
            if parent is None or parent.is_remote or parent.span_id not in self._open:
                self._roots[span_id] = None
                if len(self._roots) > _MAX_HELD_TRACES:
                    del self._roots[next(iter(self._roots))]
            self._open.add(span_id)

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None:
            with self._lock:
                self._open.discard(span.context.span_id)

    def take(self, span: ReadableSpan) -> bool:
        """Whether ``span`` is a root (asked once per span, as it is exported)."""
        if span.context is None:
            return False
        with self._lock:
            return self._roots.pop(span.context.span_id, 0) is None


class TreeSpanExporter(SpanExporter):
    """Prints each finished trace to ``out`` (``sys.stdout`` as the caller found it) as an
    indented tree of one-line spans, once its root ends: a span without a parent or with a
    remote one, or one ``roots`` noted (their processor on the same provider)."""

    def __init__(self, out: TextIO, roots: LocalRoots | None = None) -> None:
        self._out = out
        self._roots = roots
        self._held: dict[int, list[ReadableSpan]] = {}
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ready: list[list[ReadableSpan]] = []
        with self._lock:
            for span in spans:
                trace_id = span.context.trace_id if span.context else 0
                self._held.setdefault(trace_id, []).append(span)
                noted = self._roots is not None and self._roots.take(span)
                if noted or _is_root(span):
                    ready.append(self._held.pop(trace_id))
            while len(self._held) > _MAX_HELD_TRACES:
                ready.append(self._held.pop(next(iter(self._held))))
        self._print(ready)
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        with self._lock:
            left, self._held = list(self._held.values()), {}
        self._print(left)

    def _print(self, traces: list[list[ReadableSpan]]) -> None:
        # An empty line before each trace: it sets the trees apart, and ends a line the
        # application left open (a streamed answer printed without its newline).
        lines = [line for spans in traces for line in ["", *trace_lines(spans)]]
        if lines:
            self._out.write("\n".join(lines) + "\n")
            self._out.flush()


def trace_lines(spans: Sequence[ReadableSpan]) -> list[str]:
    """The lines of one trace: a header, then each span under its parent, oldest first."""
    ids = {span.context.span_id for span in spans if span.context}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent and span.parent.span_id in ids else None
        children.setdefault(parent, []).append(span)
    trace_id = spans[0].context.trace_id if spans[0].context else 0
    lines = [f"trace {trace_id:032x}"]
    # A model call repeats its trim's figures: shown there only when the trim span is not here
    # (recorded by another tracer provider).
    trim_span_here = any(span.name == semconv.TRIM_SPAN_NAME for span in spans)

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda span: span.start_time or 0):
            shown = span_lines(
                span, trim_figures=span.name == semconv.TRIM_SPAN_NAME or not trim_span_here
            )
            lines.extend(_INDENT * depth + line for line in shown)
            if span.context:
                walk(span.context.span_id, depth + 1)

    walk(None, 1)
    return lines


def span_lines(span: ReadableSpan, *, trim_figures: bool = True) -> list[str]:
    """One line for a span (name, duration, what it did, outcome; the trim's figures if it
    carries them and ``trim_figures``); a model call's two more."""
    attributes: Mapping[str, Any] = span.attributes or {}
    duration_ms = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
    trim = _trim_summary(attributes) if trim_figures else []
    head = [span.name, _ms(duration_ms), *trim, _outcome(span)]
    lines = [_join(head)]
    if semconv.TOTAL_MS in attributes:  # a model call
        lines += [
            f"{_INDENT}{text}"
            for text in (_ttft_line(attributes), _tokens_line(attributes))
            if text
        ]
    return lines


def _trim_summary(attributes: Mapping[str, Any]) -> list[str]:
    if semconv.TRIM_BUDGET not in attributes:
        return []
    return [
        f"sent {_count(attributes.get(semconv.TRIM_TOKENS_AFTER))} of "
        f"{_count(attributes.get(semconv.TRIM_BUDGET))} tokens "
        f"(from {_count(attributes.get(semconv.TRIM_TOKENS_BEFORE))})",
        f"{_count(attributes.get(semconv.TRIM_DROPPED_MESSAGES))} dropped",
        f"{_count(attributes.get(semconv.TRIM_SHORTENED_MESSAGES))} shortened",
        *(["over budget"] if attributes.get(semconv.TRIM_OVER_BUDGET) else []),
    ]


def _ttft_line(attributes: Mapping[str, Any]) -> str:
    ttft = attributes.get(semconv.TTFT_MS)
    if ttft is None:
        return ""
    parts = [f"TTFT {_ms(ttft)}"]
    prefill = attributes.get(semconv.TTFT_SERVER_PREFILL_MS)
    remainder = attributes.get(semconv.TTFT_REMAINDER_MS)
    if prefill is not None and remainder is not None:
        parts[0] += f" = server prefill {_ms(prefill)} + remainder {_ms(remainder)}"
    level = attributes.get(semconv.TTFT_LEVEL)
    if level not in (None, "ok"):
        parts.append(f"slow ({level})")
    stalls = attributes.get(semconv.STALLS) or 0
    if stalls:
        gap = attributes.get(semconv.MAX_CHUNK_GAP_MS, 0)
        parts.append(f"{stalls} stalls, longest gap {_ms(gap)}")
    return _join(parts)


def _tokens_line(attributes: Mapping[str, Any]) -> str:
    sent = attributes.get(gen_ai.GEN_AI_USAGE_INPUT_TOKENS)
    ours = attributes.get(semconv.ESTIMATED_INPUT_TOKENS)
    parts: list[str] = []
    if sent is not None:
        cached = attributes.get(gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)
        parts.append(
            f"tokens sent {_count(sent)}"
            + ("" if cached is None else f" ({_count(cached)} cached)")
        )
    elif ours is not None:
        parts.append(f"tokens sent ≈{_count(ours)} (our count)")
    received = attributes.get(gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS)
    if received is not None:
        parts.append(f"received {_count(received)}")
    return _join(parts)


def _outcome(span: ReadableSpan) -> str:
    attributes: Mapping[str, Any] = span.attributes or {}
    outcome = attributes.get(semconv.OUTCOME)
    if span.status.status_code is StatusCode.ERROR:
        error = str(attributes.get(error_attributes.ERROR_TYPE) or "")
        kind = error.rpartition(".")[2]  # the class, without its module
        return f"{outcome or 'error'}: {kind}" if kind else str(outcome or "error")
    return str(outcome or "ok")


def _is_root(span: ReadableSpan) -> bool:
    return span.parent is None or span.parent.is_remote


def _join(parts: Sequence[str]) -> str:
    return "  ".join(part for part in parts if part)


def _ms(value: object) -> str:
    ms = float(value) if isinstance(value, int | float) else 0.0
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"
