"""The trim span and the run it belongs to, guarded: telemetry never fails a trim.

A failing tracer or span processor is logged and the trim goes on without its span; the caller's
own errors are recorded on the span and propagate unchanged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from langchain_core.callbacks.manager import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
)
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from agent_latency._trace_link import TRIM_EVENT, find_run_context
from agent_latency.semconv import TRIM_SPAN_NAME

if TYPE_CHECKING:
    from agent_latency.trimming._result import TrimResult

logger = logging.getLogger("agent_latency.trimming")


def start_span(tracer: trace.Tracer, context: Context | None) -> Span:
    """Starts the trim span; a failing tracer or span processor gives one that records nothing."""
    try:
        return tracer.start_span(TRIM_SPAN_NAME, context=context)
    except Exception:
        logger.warning("agent-latency: starting the trim span failed", exc_info=True)
        return trace.INVALID_SPAN


def end_span(span: Span, error: BaseException | None, result: TrimResult | None = None) -> None:
    """Records the trim's figures or its error and ends the span; telemetry errors are logged."""
    try:
        if result is not None:
            span.set_attributes(result.span_attributes())
        if error is not None:
            span.record_exception(error)
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
        span.end()
    except Exception:
        logger.warning("agent-latency: ending the trim span failed", exc_info=True)


def run_context(
    run_manager: CallbackManagerForChainRun | AsyncCallbackManagerForChainRun,
) -> Context | None:
    """Returns the OpenTelemetry context of the trim's run, or of its parent run."""
    return find_run_context(run_manager.handlers, run_manager.run_id) or find_run_context(
        run_manager.handlers, run_manager.parent_run_id
    )


def report_trim(run_manager: CallbackManagerForChainRun, result: TrimResult) -> None:
    """Reports the trim to the run's handlers as the custom event they link to the model call."""
    try:
        run_manager.get_child().on_custom_event(TRIM_EVENT, result, run_id=run_manager.run_id)
    except Exception:  # a handler with raise_error=True must not fail the trim
        logger.debug("Reporting the trim event failed", exc_info=True)


async def areport_trim(run_manager: AsyncCallbackManagerForChainRun, result: TrimResult) -> None:
    """Reports the trim to the run's handlers (async runs); see :func:`report_trim`."""
    try:
        await run_manager.get_child().on_custom_event(TRIM_EVENT, result, run_id=run_manager.run_id)
    except Exception:  # a handler with raise_error=True must not fail the trim
        logger.debug("Reporting the trim event failed", exc_info=True)
