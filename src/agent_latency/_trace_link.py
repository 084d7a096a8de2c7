"""The contract between the trimmer and the callback handler: one trace for a trim and its call.

The two never import each other. The trimmer starts its span under the run context a handler
hands out (:class:`RunContextProvider`), with the tracer it offers (:class:`TrimTracerProvider`),
and reports the ``TrimResult`` as a custom event (:data:`TRIM_EVENT`); the handler keeps its
figures as a :class:`PendingTrim` for the next chat-model span and feeds the trim's
:class:`Calibration` the server's count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Protocol, runtime_checkable
from uuid import UUID

from opentelemetry.context import Context
from opentelemetry.trace import Tracer, get_current_span
from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency._validation import is_integer

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
span and on the chat-model span it prepared (``over_budget`` a flag, the rest counts)."""


def compaction(attributes: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
    """``gen_ai.conversation.compacted = true`` when a trim's attributes say it dropped or
    shortened messages; nothing otherwise (the conventions set it only to ``true``)."""
    cut = any(
        is_integer(count) and count > 0
        for count in (
            attributes.get(semconv.TRIM_DROPPED_MESSAGES),
            attributes.get(semconv.TRIM_SHORTENED_MESSAGES),
        )
    )
    return {semconv.GEN_AI_CONVERSATION_COMPACTED: True} if cut else {}


@runtime_checkable
class RunContextProvider(Protocol):
    """A callback handler that knows the OpenTelemetry context of the runs it traces."""

    def otel_context_for_run(self, run_id: UUID) -> Context | None:
        """Returns the context whose current span is the span of ``run_id``, if traced."""
        ...


@runtime_checkable
class TrimTracerProvider(Protocol):
    """A callback handler whose tracer records the trims run under it, so the trim span lands in
    the handler's tracer provider beside its parent, not in the global one."""

    def tracer_for_trims(self) -> Tracer | None:
        """Returns the tracer the trim span is started with; ``None`` when the handler's spans
        go nowhere (a no-op provider), so that another handler's tracer records it."""
        ...


def find_trim_tracer(handlers: Iterable[object]) -> Tracer | None:
    """The tracer of the first handler among ``handlers`` that offers one, if any."""
    for handler in handlers:
        if isinstance(handler, TrimTracerProvider):
            tracer = handler.tracer_for_trims()
            if tracer is not None:
                return tracer
    return None


def find_run_context(handlers: Iterable[object], run_id: UUID | None) -> Context | None:
    """The first OpenTelemetry context of ``run_id`` a handler among ``handlers`` provides whose
    span is a real one (not a no-op provider's), or ``None``."""
    if run_id is None:
        return None
    for handler in handlers:
        if isinstance(handler, RunContextProvider):
            context = handler.otel_context_for_run(run_id)
            if context is not None and get_current_span(context).get_span_context().is_valid:
                return context
    return None


class Calibration(Protocol):
    """What a trim's ``calibration`` offers: learning from the server's count of a request."""

    def observe(self, estimated: int, actual: int) -> object:
        """Takes our count of a request sent and the server's count of the same request."""
        ...


@dataclass(slots=True, eq=False)
class PendingTrim:
    """The figures of a trim, waiting for the model call it prepared.

    One run holds it at a time: the run that reported the trim, then, once that run has ended
    without consuming it, each enclosing run in turn, until a model call under it takes it.

    Attributes:
        attributes: The trim's span attributes, which the model-call span repeats, and
            :func:`compaction`'s.
        budget: The trim's prompt token budget.
        tokens_after: Our count of the whole request sent.
        calibration: Where the server's count of that request goes, or ``None``.
        model: The model the trim was made for, when the event says (a trim result's
            ``model``); a call to another model (a fallback) teaches the calibration nothing.
        messages: The messages the trim returned, until a model call takes it; ``None`` when
            the event did not say (a trim of another kind).
        schema_count: How many tool definitions and response formats the trim counted;
            ``None`` when not said.
        as_sent: Whether the model call that took it sent what the trim returned (see
            :meth:`taken_by`).
        messages_changed: Whether that call sent other messages than the trim returned.
    """

    attributes: Mapping[str, AttributeValue]
    budget: int
    tokens_after: int
    calibration: Calibration | None = None
    model: str | None = None
    messages: tuple[object, ...] | None = None
    schema_count: int | None = None
    as_sent: bool = True
    messages_changed: bool = False

    def taken_by(
        self, sent: Sequence[object] | None, schemas: int, model: str | None
    ) -> PendingTrim:
        """The trim as the model call to ``model`` that sends the messages ``sent`` and
        ``schemas`` tool definitions and response formats carries it.

        A call to another model than the one the trim names (a fallback that
        ``ModelFallbackMiddleware`` swapped in) sends what the trim returned, but its server
        counts in another model's tokens: its count must not teach the calibration, which
        learns the trim's model.

        When ``sent`` is not the trim's messages (the same objects, or equal ones: LangGraph
        sends ``create_react_agent``'s ``prompt=`` as a message of its own), or the call sends
        another number of schemas, something changed the request after the trim, such as a
        middleware after ``TrimmingMiddleware`` clearing old tool results or choosing the tools
        of this call: the server's count is then no count of the request the trim counted, and
        must neither teach the calibration nor be compared with ``tokens_after``. Either way the
        messages are let go.
        """
        mine = self.messages
        changed = mine is not None and sent is not None and not _same_messages(mine, sent)
        if changed or self.schema_count not in (None, schemas):
            return replace(
                self, messages=None, calibration=None, as_sent=False, messages_changed=changed
            )
        if self.model is not None and model != self.model:
            return replace(self, messages=None, calibration=None)
        return replace(self, messages=None)

    @classmethod
    def from_event(cls, data: object) -> PendingTrim | None:
        """The figures of a ``TrimResult`` (read by duck typing), or ``None`` for anything else.

        The attributes are those the trim reports for its own span (``span_attributes()``),
        else its ``TRIM_FIELDS``; each must be a span attribute value (``None`` ones are left
        out). ``tokens_after`` and ``budget`` must be counts and ``over_budget`` a flag.
        """
        tokens_after, budget = getattr(data, "tokens_after", None), getattr(data, "budget", None)
        over_budget = getattr(data, "over_budget", None)
        if not (is_integer(tokens_after) and is_integer(budget) and isinstance(over_budget, bool)):
            return None
        span_attributes = getattr(data, "span_attributes", None)
        reported = (
            span_attributes()
            if callable(span_attributes)
            else {attribute: getattr(data, name, None) for name, attribute in TRIM_FIELDS.items()}
        )
        if not isinstance(reported, Mapping):
            return None
        attributes: dict[str, AttributeValue] = {}
        for key, value in reported.items():
            if value is None:
                continue
            if not isinstance(key, str) or not _is_attribute_value(value):
                return None
            attributes[key] = value
        attributes.update(compaction(attributes))
        calibration = getattr(data, "calibration", None)
        if not callable(getattr(calibration, "observe", None)):
            calibration = None
        messages = getattr(data, "messages", None)
        sent = (
            None
            if isinstance(messages, str | bytes) or not isinstance(messages, Sequence)
            else tuple(messages)
        )
        schema_count = getattr(data, "schema_count", None)
        model = getattr(data, "model", None)
        return cls(
            attributes,
            budget,
            tokens_after,
            calibration,
            model if isinstance(model, str) else None,
            sent,
            schema_count if is_integer(schema_count) else None,
        )


def _same_messages(mine: Sequence[object], sent: Sequence[object]) -> bool:
    # Identity first: in an agent or a chain the very objects the trim returned are sent.
    return len(mine) == len(sent) and all(a is b or a == b for a, b in zip(mine, sent, strict=True))


def _is_attribute_value(value: object) -> bool:
    if isinstance(value, str | bool | int | float):
        return True
    return isinstance(value, tuple | list) and all(isinstance(item, str) for item in value)
