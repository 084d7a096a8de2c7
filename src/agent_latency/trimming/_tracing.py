"""Transitional: the old names of ``_span`` for ``_cost_aware`` until it imports ``_span``.

To be deleted once ``_cost_aware`` imports :mod:`agent_latency.trimming._span` (the trimmer's
request to its owner is in the team notes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from agent_latency.trimming._span import areport_trim, report_trim, run_context, start_span
from agent_latency.trimming._span import end_span as _end_span

__all__ = ["areport_trim", "end_span", "report_trim", "run_context", "start_span"]


class _Described(Protocol):
    def span_attributes(self) -> Mapping[str, AttributeValue]: ...


def end_span(span: Span, error: BaseException | None, result: _Described | None = None) -> None:
    """``_span.end_span`` with the attributes of ``result``."""
    _end_span(span, error, None if result is None else result.span_attributes())
