"""The contract between the trimmer and the callback handler: one trace for a trim and its call.

The trimmer and the callback handler never import each other. When the trimmer runs inside a
LangChain run, it looks among that run's callback handlers for one that can hand out the
OpenTelemetry context of a run (``LatencyCallbackHandler`` does), starts its trim span under it,
and then reports the :class:`~agent_latency.TrimResult` as a LangChain custom event named
:data:`TRIM_EVENT`. The handler attaches the trim figures to the next chat-model span in the
same scope, under the attribute names of :data:`TRIM_FIELDS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, Protocol, runtime_checkable
from uuid import UUID

from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from agent_latency import semconv

TRIM_EVENT: Final = semconv.TRIM_SPAN_NAME
"""Name of the LangChain custom event that carries a ``TrimResult``: that of the trim span."""

TRIM_FIELDS: Final[Mapping[str, str]] = {
    "tokens_before": semconv.TRIM_TOKENS_BEFORE,
    "tokens_after": semconv.TRIM_TOKENS_AFTER,
    "budget": semconv.TRIM_BUDGET,
    "dropped_messages": semconv.TRIM_DROPPED_MESSAGES,
    "shortened_messages": semconv.TRIM_SHORTENED_MESSAGES,
    "over_budget": semconv.TRIM_OVER_BUDGET,
    "effective_budget": semconv.TRIM_EFFECTIVE_BUDGET,
    "tool_tokens": semconv.TRIM_TOOL_TOKENS,
    "response_format_tokens": semconv.TRIM_RESPONSE_FORMAT_TOKENS,
    "framing_tokens": semconv.TRIM_FRAMING_TOKENS,
    "must_keep_tokens": semconv.TRIM_MUST_KEEP_TOKENS,
    "fixed_tokens": semconv.TRIM_FIXED_TOKENS,
}
"""The ``TrimResult`` fields that describe a trim, each with the attribute it becomes on the trim
span and on the chat-model span it prepared.

``over_budget`` is a flag; every other field is a count of tokens or messages.
"""


@runtime_checkable
class RunContextProvider(Protocol):
    """A callback handler that knows the OpenTelemetry context of the runs it traces."""

    def otel_context_for_run(self, run_id: UUID) -> Context | None:
        """Returns the context whose current span is the span of ``run_id``, if traced."""
        ...


@runtime_checkable
class TrimTracerProvider(Protocol):
    """A callback handler whose tracer should record the trims run under it.

    A trim inside a run traced by such a handler records its span with this tracer, so the
    span lands in the handler's tracer provider beside its parent, not in the global one.
    """

    def tracer_for_trims(self) -> Tracer:
        """Returns the tracer the trim span is started with."""
        ...


def find_trim_tracer(handlers: Iterable[object]) -> Tracer | None:
    """The tracer of the first handler among ``handlers`` that offers one, if any."""
    for handler in handlers:
        if isinstance(handler, TrimTracerProvider):
            return handler.tracer_for_trims()
    return None


def find_run_context(handlers: Iterable[object], run_id: UUID | None) -> Context | None:
    """Finds the OpenTelemetry context of ``run_id`` among a run's callback handlers.

    Args:
        handlers: The callback handlers of the current LangChain run.
        run_id: The run whose span should become the parent.

    Returns:
        The first context a handler provides, or ``None`` when no handler traces the run.
    """
    if run_id is None:
        return None
    for handler in handlers:
        if isinstance(handler, RunContextProvider):
            context = handler.otel_context_for_run(run_id)
            if context is not None:
                return context
    return None
