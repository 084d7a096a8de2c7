"""The trim span and the run it belongs to, guarded: telemetry never fails a trim.

A trim inside a LangChain run records its span under the run's span, with the tracer of a handler
that offers one (:class:`~agent_latency._trace_link.TrimTracerProvider`, so the span lands in
the handler's tracer provider beside its parent), and reports its result to the run's handlers
as the :data:`~agent_latency._trace_link.TRIM_EVENT` custom event. A failing tracer, span
processor or handler is logged and the trim goes on without its span; the caller's own errors
are recorded on the span and propagate unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from langchain_core.callbacks.manager import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
)
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Tracer
from opentelemetry.util.types import AttributeValue

from agent_latency._trace_link import TRIM_EVENT, compaction, find_run_context, find_trim_tracer
from agent_latency.semconv import TRIM_SPAN_NAME

logger = logging.getLogger("agent_latency.trimming")

RunManager = CallbackManagerForChainRun | AsyncCallbackManagerForChainRun
Attributes = Mapping[str, AttributeValue]
_Default = TypeVar("_Default", Tracer, None)


class HasHandlers(Protocol):
    """A run manager or callback manager: what holds a run's callback handlers."""

    @property
    def handlers(self) -> Sequence[object]:
        """The run's callback handlers."""
        ...


def start_trim_span(tracer: Tracer, context: Context | None) -> Span:
    """Starts the trim span; a failing tracer or span processor gives one that records nothing."""
    try:
        return tracer.start_span(TRIM_SPAN_NAME, context=context)
    except Exception:
        logger.warning("agent-latency: starting the trim span failed", exc_info=True)
        return trace.INVALID_SPAN


def end_trim_span(
    span: Span,
    error: BaseException | None,
    attributes: Attributes | Callable[[], Attributes] | None = None,
) -> None:
    """Records the trim's attributes (and :func:`compaction`'s) or its error and ends the span;
    telemetry errors are logged. Attributes given as a function are asked for only when the span
    records."""
    try:
        if callable(attributes):
            attributes = attributes() if span.is_recording() else None
        if attributes is not None:
            span.set_attributes({**attributes, **compaction(attributes)})
        if error is not None:
            span.record_exception(error)
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
        span.end()
    except Exception:
        logger.warning("agent-latency: ending the trim span failed", exc_info=True)


def run_context(run_manager: RunManager) -> Context | None:
    """Returns the OpenTelemetry context of the trim's run, or of its parent run."""
    return find_run_context(run_manager.handlers, run_manager.run_id) or find_run_context(
        run_manager.handlers, run_manager.parent_run_id
    )


def run_tracer(callbacks: HasHandlers, default: _Default) -> Tracer | _Default:
    """The tracer of the first of the run's handlers that offers one, else ``default``.

    Args:
        callbacks: The run manager (or a callback manager) of the run the trim is part of.
        default: What to use when no handler offers a tracer, or one fails to.
    """
    try:
        return find_trim_tracer(callbacks.handlers) or default
    except Exception:  # a handler's failure must not fail the trim
        logger.warning("agent-latency: a handler's tracer_for_trims() failed", exc_info=True)
        return default


def report_trim(run_manager: CallbackManagerForChainRun, result: object) -> None:
    """Reports the trim to the run's handlers as the custom event they link to the model call."""
    try:
        run_manager.get_child().on_custom_event(TRIM_EVENT, result, run_id=run_manager.run_id)
    except Exception:  # a handler with raise_error=True must not fail the trim
        logger.debug("Reporting the trim event failed", exc_info=True)


async def areport_trim(run_manager: AsyncCallbackManagerForChainRun, result: object) -> None:
    """Reports the trim to the run's handlers (async runs); see :func:`report_trim`."""
    try:
        await run_manager.get_child().on_custom_event(TRIM_EVENT, result, run_id=run_manager.run_id)
    except Exception:  # a handler with raise_error=True must not fail the trim
        logger.debug("Reporting the trim event failed", exc_info=True)


class _Trimmed(Protocol):
    @property
    def messages(self) -> list[BaseMessage]: ...


class TrimRunnable(Runnable[Any, list[BaseMessage]]):
    """A trimmer as a LangChain ``Runnable``: ``invoke`` and ``ainvoke`` trim inside the run,
    record the trim span in the run's trace and report the result to the run's handlers.

    Subclasses give :meth:`trim` (``trim(input, *, context, tracer) -> TrimResult``) and a
    ``_tracer`` for trims outside a traced run.
    """

    _tracer: Tracer
    trim: Callable[..., _Trimmed]

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Returns the trimmed messages of ``input`` (see :meth:`trim`)."""
        return self._call_with_config(self._trim_in_run, input, config)

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Returns the trimmed messages of ``input`` (see :meth:`trim`).

        The trim itself is synchronous: it is CPU-only and takes about a millisecond.
        """
        return await self._acall_with_config(self._atrim_in_run, input, config)

    def _trim_in_run(
        self, input_: Any, run_manager: CallbackManagerForChainRun
    ) -> list[BaseMessage]:
        tracer = run_tracer(run_manager, self._tracer)
        result = self.trim(input_, context=run_context(run_manager), tracer=tracer)
        report_trim(run_manager, result)
        return result.messages

    async def _atrim_in_run(
        self, input_: Any, run_manager: AsyncCallbackManagerForChainRun
    ) -> list[BaseMessage]:
        tracer = run_tracer(run_manager, self._tracer)
        result = self.trim(input_, context=run_context(run_manager), tracer=tracer)
        await areport_trim(run_manager, result)
        return result.messages
