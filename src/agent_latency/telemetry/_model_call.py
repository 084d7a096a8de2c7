"""Model calls: their spans, chunk timing, and what each records when it ends (a
:class:`CallOutcome`, worked out once for the span, the metrics, the learners, the record and
the log)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import Meter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import server_attributes
from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency._caches import FirstTimes
from agent_latency._trace_link import PendingTrim
from agent_latency._validation import is_number
from agent_latency.telemetry._content import output_json
from agent_latency.telemetry._feedback import learn_from_call
from agent_latency.telemetry._instruments import Instruments, latest_genai_names
from agent_latency.telemetry._langchain import (
    first_int,
    provider_name,
    raised_while_streaming,
    requested_model,
    response_details,
    server,
)
from agent_latency.telemetry._log import FailureLog, logger
from agent_latency.telemetry._record import (
    CallOutcome,
    LatencyRecord,
    end_attributes,
    latency_record,
    log_record,
)
from agent_latency.telemetry._run_state import ModelRunState, RunState, running_in
from agent_latency.telemetry._run_tree import end_run_span, error_type, is_failure, outcome
from agent_latency.telemetry._split import held_back_ms, is_buffered, slow_cause, split_ttft
from agent_latency.telemetry._timing import call_timing
from agent_latency.tokens import TokenCounter

_now_ns: Callable[[], int] = time.perf_counter_ns
"""The clock of every duration the handler measures (tests replace it)."""
_WARNING_KINDS = 16
"""How many kinds of once-per-handler warning are remembered (a few are given)."""


@dataclass(frozen=True, slots=True)
class CallOptions:
    """The options of :class:`LatencyCallbackHandler` (documented there) a model call reads."""

    ttft_warn_ms: float
    ttft_error_ms: float
    chunk_timeout_ms: float
    capture_content: bool
    log_every_request: bool
    record_ttft: bool
    on_record: Callable[[LatencyRecord], object] | None


@dataclass(frozen=True, slots=True)
class ModelStart:
    """What LangChain says when a model call starts.

    Attributes:
        operation: ``chat`` or ``text_completion``.
        run_id: The call's run.
        parent_run_id: The run it is in, if any.
        serialized: LangChain's serialised model (its endpoint).
        metadata: LangChain's run metadata (the model and provider).
        params: The invocation parameters.
        content: The prompt as ``gen_ai.input.messages``; ``None`` unless captured.
        messages: The chat prompt, kept for the local token count.
    """

    operation: str
    run_id: UUID
    parent_run_id: UUID | None
    serialized: Mapping[str, Any] | None
    metadata: Mapping[str, Any]
    params: Mapping[str, Any]
    content: str | None
    messages: Sequence[BaseMessage] | None


class ModelCallTracer:
    """Traces and measures model calls for one handler: spans to ``tracer``, metrics to
    ``meter``, as ``options`` say; the handler's own failures to ``failures``."""

    def __init__(
        self, *, tracer: trace.Tracer, meter: Meter, options: CallOptions, failures: FailureLog
    ) -> None:
        self.options = options
        self._tracer = tracer
        self._latest_names = latest_genai_names()
        self._instruments = Instruments(meter, latest_names=self._latest_names)
        self._failures = failures
        self._stall_ns = int(options.chunk_timeout_ms * 1_000_000)
        self._token_counter: TokenCounter | None = None
        self._token_counter_failed = False
        self._warned = FirstTimes(_WARNING_KINDS)  # the once-per-handler warnings given

    def start(
        self, call: ModelStart, *, parent_context: Context, trim: PendingTrim | None
    ) -> ModelRunState:
        """Opens the span of a model call under ``parent_context``, with the ``trim`` that
        prepared it, and returns its state for the run tree to register."""
        started_ns = _now_ns()
        model = requested_model(call.metadata, call.params)
        endpoint = server(call.serialized, call.metadata)
        metric_attributes = _metric_attributes(call, model, endpoint)
        span = self._tracer.start_span(
            f"{call.operation} {model}" if model else call.operation,
            context=parent_context,
            kind=SpanKind.CLIENT,
            attributes={**metric_attributes, **_request_attributes(call)},
        )
        tools = _tools_sent(call.params)
        if trim is not None:
            span.set_attributes(trim.attributes)
            schemas = len(tools) + (call.params.get("response_format") is not None)
            trim = trim.taken_by(call.messages, schemas, model)
            if trim.messages_changed:
                self._report_changed_request(model)
        return ModelRunState(
            run_id=call.run_id,
            parent_run_id=call.parent_run_id,
            span=span,
            context=trace.set_span_in_context(span, parent_context),
            model=model,
            started_ns=started_ns,
            stall_ns=self._stall_ns,
            messages=call.messages,
            tools=tools,
            metric_attributes=metric_attributes,
            streamed=call.params.get("stream") is True,
            trim=trim,
            server=endpoint,
        )

    def chunk(
        self,
        state: RunState | None,
        *,
        content: bool,
        delivered: object = None,
        by_event: bool = False,
    ) -> None:
        """Times a streamed chunk of the open run ``state`` (ignored unless a model call's).

        Args:
            content: Whether the chunk carries text or a tool-call fragment; the empty
                end-of-stream chunk and a role-only first delta mark the call streamed only.
            delivered: The chunk object LangChain passed, if any: the same one again is the
                handler listed twice, and not a second chunk.
            by_event: Whether a streaming-protocol event reports the chunk, rather than a token
                callback: a call counts the chunks of whichever reported first.
        """
        now_ns = _now_ns()
        if not isinstance(state, ModelRunState):
            return
        if state.by_events is None:  # its first delivery
            state.by_events = by_event
            state.read_in = running_in()
        elif state.by_events is not by_event:
            return  # the same chunk, reported the other way too
        if delivered is not None:
            if delivered is state.last_delivery:
                return
            state.last_delivery = delivered
        state.streamed = True
        if not content:
            return
        first = state.first_chunk_ns is None
        stall_ns = state.add_chunk(now_ns)
        span = state.span
        if span is None:
            return
        if first and self.options.record_ttft:
            span.add_event(semconv.FIRST_CHUNK_EVENT)
        elif stall_ns:
            _add_stall_event(span, stall_ns, state.chunks - 1)

    def finish(
        self, state: ModelRunState, error: BaseException | None, response: LLMResult | None
    ) -> None:
        """Ends a model call's span and records the call (its run has left the tree)."""
        end_ns = _now_ns()
        span = state.span
        assert span is not None  # model runs always have a span
        # Ends the span even when measuring fails: the run is already out of the tree, so
        # nothing else would.
        try:
            if error is not None and not state.streamed:
                state.streamed = raised_while_streaming(error)
            # The wait after the last chunk of a stream nobody reads any more is the consumer's
            # (or the eviction's), not the server's: only a call that ended otherwise counts it.
            if outcome(error) != "abandoned" and (trailing_stall := state.close_stream(end_ns)):
                _add_stall_event(span, trailing_stall, state.chunks)
            result = self._outcome(state, end_ns, error, response)
            span.set_attributes(end_attributes(state, result, latest_names=self._latest_names))
            if self.options.capture_content and response is not None:
                span.set_attribute(gen_ai.GEN_AI_OUTPUT_MESSAGES, output_json(response))
        finally:
            end_run_span(span, error)
        self._instruments.record_call(state, result)
        if result.usage.invalid:
            self._report_impossible_usage(state.model, result.usage.invalid)
        learn_from_call(state, result, self._failures)
        record = latency_record(state, result)
        log_record(record, state.trim, result, every_request=self.options.log_every_request)
        self._hand_on(record)

    def _outcome(
        self,
        state: ModelRunState,
        end_ns: int,
        error: BaseException | None,
        response: LLMResult | None,
    ) -> CallOutcome:
        options = self.options
        status = outcome(error)
        timing = call_timing(
            started_ns=state.started_ns,
            end_ns=end_ns,
            first_chunk_ns=state.first_chunk_ns,
            last_chunk_ns=state.last_chunk_ns,
            chunks=state.chunks,
            failed=error is not None,
            gave_up=is_failure(status),
            record_ttft=options.record_ttft,
            warn_ms=options.ttft_warn_ms,
            error_ms=options.ttft_error_ms,
        )
        details = response_details(response)
        usage = details.usage
        split = split_ttft(
            timing.ttft_ms,
            prefill_ms=usage.prefill_ms,
            decode_ms=usage.decode_ms,
            prefilled_tokens=usage.prefilled_tokens,
            streamed=state.streamed,
        )
        decode_ms = usage.decode_ms if state.streamed else None
        held_ms = held_back_ms(split, state.chunk_spread_ms, decode_ms)
        return CallOutcome(
            timing=timing,
            response=details,
            split=split,
            # Our count of the request: the trim's (the whole request) when a trim prepared
            # what was sent.
            estimated_tokens=(
                state.trim.tokens_after
                if state.trim and state.trim.as_sent
                else self._estimate_tokens(state.messages, state.tools)
            ),
            status=status,
            error_type=error_type(error) if error is not None and is_failure(status) else None,
            # A blocking call's first text waits for the whole answer: no time to first token.
            first_token_ms=timing.ttft_ms if state.streamed else None,
            cause=slow_cause(
                split, buffered=is_buffered(state.chunks, timing.mean_chunk_gap_s), held_ms=held_ms
            ),
            held_ms=held_ms,
            threshold_ms=(
                options.ttft_error_ms if timing.ttft_level == "error" else options.ttft_warn_ms
            ),
        )

    def _hand_on(self, record: LatencyRecord) -> None:
        """Calls ``on_record`` with the record, if given; its failure is reported, not raised."""
        if self.options.on_record is None:
            return
        try:
            self.options.on_record(record)
        except Exception as exc:
            self._failures.report("on_record", exc)

    def _report_impossible_usage(self, model: str | None, fields: Sequence[str]) -> None:
        self._warn_once(
            "impossible usage",
            "agent-latency: the server answering %s reported impossible usage (%s); those "
            "figures are left out of the span (agent_latency.usage.invalid names them), the "
            "metrics, the calibration and the latency model",
            model or "unknown",
            ", ".join(fields),
        )

    def _report_changed_request(self, model: str | None) -> None:
        self._warn_once(
            "changed request",
            "agent-latency: a call to %s sent other messages than the trim that prepared it "
            "returned: something changed the request after the trim (in "
            "create_agent, a middleware listed after TrimmingMiddleware), so the budget does "
            "not bound what is sent and the calibration leaves such calls out. Fix: list "
            "TrimmingMiddleware last in middleware=[...]",
            model or "an unknown model",
        )

    def _warn_once(self, kind: str, message: str, *args: object) -> None:
        """Logs ``message`` at WARNING the first time this handler meets ``kind``, DEBUG after."""
        first = self._warned.first(kind)
        logger.log(logging.WARNING if first else logging.DEBUG, message, *args)

    def _estimate_tokens(
        self, messages: Sequence[BaseMessage] | None, tools: Sequence[Any]
    ) -> int | None:
        """The request counted locally (cl100k): its messages and the tool definitions sent
        with them; ``None`` without messages or a counter."""
        if not messages or self._token_counter_failed:
            return None
        if self._token_counter is None:
            try:
                self._token_counter = TokenCounter()
            except ValueError as exc:
                self._token_counter_failed = True
                logger.warning("agent-latency: no local token estimate: %s", exc)
                return None
        return self._token_counter.count_request(messages, tools)


def _metric_attributes(
    call: ModelStart, model: str | None, endpoint: tuple[str, int] | None
) -> dict[str, AttributeValue]:
    """The call's low-cardinality attributes, on its metrics and its span."""
    attributes: dict[str, AttributeValue] = {
        gen_ai.GEN_AI_OPERATION_NAME: call.operation,
        gen_ai.GEN_AI_PROVIDER_NAME: provider_name(call.metadata),
    }
    if model is not None:
        attributes[gen_ai.GEN_AI_REQUEST_MODEL] = model
    if endpoint is not None:
        attributes[server_attributes.SERVER_ADDRESS] = endpoint[0]
        attributes[server_attributes.SERVER_PORT] = endpoint[1]
    return attributes


def _request_attributes(call: ModelStart) -> dict[str, AttributeValue]:
    """The span's further request attributes: temperature, output limit, captured prompt."""
    params, meta = call.params, call.metadata
    attributes: dict[str, AttributeValue] = {}
    temperature = params.get("temperature", meta.get("ls_temperature"))
    if is_number(temperature):
        attributes[gen_ai.GEN_AI_REQUEST_TEMPERATURE] = float(temperature)
    max_tokens = first_int(
        params.get("max_tokens"), params.get("max_completion_tokens"), meta.get("ls_max_tokens")
    )
    if max_tokens is not None:
        attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] = max_tokens
    if call.content is not None:
        attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = call.content
    return attributes


def _tools_sent(params: Mapping[str, Any]) -> Sequence[Any]:
    """The tool definitions a call sends: LangChain passes a model's bound tools to the handler
    in the invocation parameters (OpenAI wire dicts for ``ChatOpenAI.bind_tools``)."""
    tools = params.get("tools")
    return tuple(tools) if isinstance(tools, list | tuple) else ()


def _add_stall_event(span: Span, gap_ns: int, after_chunks: int) -> None:
    span.add_event(
        semconv.STALL_EVENT,
        {semconv.STALL_GAP_MS: gap_ns / 1e6, semconv.STALL_AFTER_CHUNKS: after_chunks},
    )
