"""A LangChain callback handler that measures every model call and traces agent runs.

Each chat-model call becomes a ``chat {model}`` span (GenAI semantic conventions) with its time
to first chunk, total duration, stalls between chunks, its prompt-cache figures and the trim
that prepared it; completion-model calls become ``text_completion {model}`` spans with the same
figures. Agents, chains and tools become the spans around them (see :class:`RunTracer`), nested
by LangChain's ``run_id`` and ``parent_run_id``; a root run takes the caller's current context,
so a web request span becomes the parent of the agent run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult
from opentelemetry import metrics, trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes, server_attributes
from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency._latency_model import LATENCY_MODELS
from agent_latency._validation import checked_number
from agent_latency.telemetry._content import messages_json, output_json, prompts_json
from agent_latency.telemetry._instruments import Instruments
from agent_latency.telemetry._langchain import (
    Response,
    first_int,
    provider_name,
    requested_model,
    response_details,
    server,
)
from agent_latency.telemetry._log import logger
from agent_latency.telemetry._record import LatencyRecord, end_attributes, log_record
from agent_latency.telemetry._run_state import ModelRunState
from agent_latency.telemetry._timing import call_timing
from agent_latency.telemetry._tracing import RunTracer, end_span, error_type, guarded, outcome
from agent_latency.tokens import TokenCounter

if TYPE_CHECKING:
    from agent_latency.config import Settings

__all__ = ["LatencyCallbackHandler", "LatencyRecord"]

_now_ns: Callable[[], int] = time.perf_counter_ns
"""The clock of every duration the handler measures (tests replace it)."""

_CHAT: Final = gen_ai.GenAiOperationNameValues.CHAT.value
_TEXT_COMPLETION: Final = gen_ai.GenAiOperationNameValues.TEXT_COMPLETION.value


def _check_ms(option: str, value: object) -> float:
    return checked_number(
        "LatencyCallbackHandler", option, value, minimum=0, above=True, hint="milliseconds"
    )


class LatencyCallbackHandler(RunTracer):
    """Measures each model call's latency and traces agent runs with OpenTelemetry.

    Attach it explicitly, e.g. ``agent.invoke(inputs, config={"callbacks": [handler]})``,
    ``runnable.with_config(callbacks=[handler])`` or ``ChatOpenAI(callbacks=[handler])``. One
    handler serves any number of concurrent runs, sync or async, from any thread.

    Args:
        tracer_provider: Where spans go; the global provider when ``None``.
        meter_provider: Where metrics go; the global provider when ``None``.
        ttft_warn_ms: A time to first token above this logs a WARNING and marks the span
            ``agent_latency.ttft_level=warn``. A blocking call's first text comes with its whole
            answer: its total is measured against the thresholds, and its log hints at streaming.
        ttft_error_ms: Above this, an ERROR and ``ttft_level=error``. At least ``ttft_warn_ms``.
        chunk_timeout_ms: A wait between streamed chunks longer than this is a stall.
        capture_content: Record prompts, answers and tool arguments and results on the spans
            (``gen_ai.input.messages`` and friends). Off by default: they may be confidential.
        log_every_request: Log one INFO line per model call (on by default, like
            ``metrics.log_every_request``; the lines show only when the ``agent_latency``
            logger passes INFO).
        record_ttft: Measure time to first token. When off, calls get durations, chunk and stall
            figures but no TTFT attributes, first-chunk event, TTFT metric or threshold logs.
        on_record: Called with a :class:`LatencyRecord` after each model call; its exceptions
            are logged and swallowed.
        max_open_runs: Most runs tracked at once; past it the oldest open run is ended (a run
            whose end never comes, such as a stream kept but never read, cannot leak memory).

    Raises:
        ValueError: When an option is out of range; the message names it.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        ttft_warn_ms: float = 1200,
        ttft_error_ms: float = 2500,
        chunk_timeout_ms: float = 800,
        capture_content: bool = False,
        log_every_request: bool = True,
        record_ttft: bool = True,
        on_record: Callable[[LatencyRecord], object] | None = None,
        max_open_runs: int = 10_000,
    ) -> None:
        self.ttft_warn_ms = _check_ms("ttft_warn_ms", ttft_warn_ms)
        self.ttft_error_ms = _check_ms("ttft_error_ms", ttft_error_ms)
        if self.ttft_error_ms < self.ttft_warn_ms:
            raise ValueError(
                f"LatencyCallbackHandler: ttft_error_ms ({ttft_error_ms}) must be at least "
                f"ttft_warn_ms ({ttft_warn_ms})."
            )
        self.chunk_timeout_ms = _check_ms("chunk_timeout_ms", chunk_timeout_ms)
        for option, flag in (
            ("capture_content", capture_content),
            ("log_every_request", log_every_request),
            ("record_ttft", record_ttft),
        ):
            if not isinstance(flag, bool):
                raise ValueError(
                    f"LatencyCallbackHandler: {option} must be True or False, got {flag!r}."
                )
        if on_record is not None and not callable(on_record):
            raise ValueError(
                f"LatencyCallbackHandler: on_record must be callable or None, got {on_record!r}."
            )
        if isinstance(max_open_runs, bool) or not isinstance(max_open_runs, int):
            raise ValueError(
                f"LatencyCallbackHandler: max_open_runs must be an integer, got {max_open_runs!r}."
            )
        if max_open_runs < 1:
            raise ValueError(
                f"LatencyCallbackHandler: max_open_runs must be >= 1, got {max_open_runs!r}."
            )
        super().__init__(
            tracer=trace.get_tracer("agent_latency", tracer_provider=tracer_provider),
            capture_content=capture_content,
            max_open_runs=max_open_runs,
        )
        self.log_every_request = log_every_request
        self.record_ttft = record_ttft
        self._on_record = on_record
        self._stall_ns = int(self.chunk_timeout_ms * 1_000_000)
        self._instruments = Instruments(
            metrics.get_meter("agent_latency", meter_provider=meter_provider)
        )
        self._token_counter: TokenCounter | None = None
        self._token_counter_failed = False

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> LatencyCallbackHandler:
        """Builds a handler with the thresholds of ``settings``.

        Args:
            settings: Loaded settings: ``metrics.ttft_warn_ms``, ``metrics.ttft_error_ms``,
                ``metrics.log_every_request``, ``streaming.chunk_timeout_ms`` and
                ``streaming.record_ttft`` are used.
            **overrides: Any keyword of the constructor, winning over the settings.

        Returns:
            The handler.
        """
        options: dict[str, Any] = {
            "ttft_warn_ms": settings.metrics.ttft_warn_ms,
            "ttft_error_ms": settings.metrics.ttft_error_ms,
            "log_every_request": settings.metrics.log_every_request,
            "chunk_timeout_ms": settings.streaming.chunk_timeout_ms,
            "record_ttft": settings.streaming.record_ttft,
        }
        options.update(overrides)
        return cls(**options)

    def __repr__(self) -> str:
        return (
            f"LatencyCallbackHandler(ttft_warn_ms={self.ttft_warn_ms:g}, "
            f"ttft_error_ms={self.ttft_error_ms:g}, chunk_timeout_ms={self.chunk_timeout_ms:g}, "
            f"capture_content={self.capture_content}, "
            f"log_every_request={self.log_every_request}, record_ttft={self.record_ttft}, "
            f"open_runs={self.open_runs})"
        )

    # -- model calls ---------------------------------------------------------------------------

    @guarded
    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        prompt = messages[0] if messages else []
        content = messages_json(prompt) if self.capture_content else None
        self._start_model(
            _CHAT, serialized, run_id, parent_run_id, metadata, kwargs, content, prompt
        )

    @guarded
    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Traces a completion-model (text in, text out) call like a chat call."""
        content = prompts_json(prompts) if self.capture_content else None
        self._start_model(
            _TEXT_COMPLETION, serialized, run_id, parent_run_id, metadata, kwargs, content, None
        )

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: Any = None,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        """Times a streamed chunk; the empty end-of-stream chunk does not count."""
        now_ns = _now_ns()
        try:  # Inline rather than @guarded: this runs once per chunk.
            state = self._runs.get(run_id)
            if not isinstance(state, ModelRunState):
                return
            state.streamed = True
            if token or getattr(getattr(chunk, "message", None), "tool_call_chunks", None):
                self._add_chunk(state, now_ns)
        except Exception as exc:
            self.failures.report("on_llm_new_token", exc)

    def on_stream_event(self, event: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Times a chunk of LangChain's v2 streaming protocol (used instead of new-token)."""
        now_ns = _now_ns()
        try:
            state = self._runs.get(run_id)
            if not isinstance(state, ModelRunState):
                return
            state.streamed = True
            if isinstance(event, Mapping) and event.get("event") == "content-block-delta":
                self._add_chunk(state, now_ns)
        except Exception as exc:
            self.failures.report("on_stream_event", exc)

    @guarded
    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        state = self._runs.pop(run_id)
        if state is not None:
            self._finish(state, None, response)

    @guarded
    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        state = self._runs.pop(run_id)
        if state is not None:
            self._finish(state, error)

    # -- internals -----------------------------------------------------------------------------

    def _start_model(
        self,
        operation: str,
        serialized: Mapping[str, Any] | None,
        run_id: UUID,
        parent_run_id: UUID | None,
        metadata: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
        content: str | None,
        messages: Sequence[BaseMessage] | None,
    ) -> None:
        """Opens the span and state of a model call (``chat`` or ``text_completion``).

        ``content`` is the prompt as ``gen_ai.input.messages`` (``None`` unless captured);
        ``messages`` the chat prompt, kept for the local token count.
        """
        started_ns = _now_ns()
        params: Mapping[str, Any] = kwargs.get("invocation_params") or {}
        meta: Mapping[str, Any] = metadata or {}
        model = requested_model(meta, params)
        metric_attributes: dict[str, AttributeValue] = {
            gen_ai.GEN_AI_OPERATION_NAME: operation,
            gen_ai.GEN_AI_PROVIDER_NAME: provider_name(meta),
        }
        if model is not None:
            metric_attributes[gen_ai.GEN_AI_REQUEST_MODEL] = model
        endpoint = server(serialized)
        if endpoint is not None:
            metric_attributes[server_attributes.SERVER_ADDRESS] = endpoint[0]
            metric_attributes[server_attributes.SERVER_PORT] = endpoint[1]
        attributes = dict(metric_attributes)
        temperature = params.get("temperature", meta.get("ls_temperature"))
        if isinstance(temperature, int | float) and not isinstance(temperature, bool):
            attributes[gen_ai.GEN_AI_REQUEST_TEMPERATURE] = float(temperature)
        max_tokens = first_int(
            params.get("max_tokens"), params.get("max_completion_tokens"), meta.get("ls_max_tokens")
        )
        if max_tokens is not None:
            attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] = max_tokens
        if content is not None:
            attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = content
        parent_context = self._parent_context(parent_run_id)
        span = self._tracer.start_span(
            f"{operation} {model}" if model else operation,
            context=parent_context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        trim = self._runs.take_trim(parent_run_id)
        if trim is not None:
            span.set_attributes(trim.attributes)
        state = ModelRunState(
            run_id=run_id,
            parent_run_id=parent_run_id,
            span=span,
            context=trace.set_span_in_context(span, parent_context),
            model=model,
            started_ns=started_ns,
            stall_ns=self._stall_ns,
            messages=messages,
            metric_attributes=metric_attributes,
            streamed=params.get("stream") is True,
            trim=trim,
            server=endpoint,
        )
        self._register(state)

    def _add_chunk(self, state: ModelRunState, now_ns: int) -> None:
        first = state.first_chunk_ns is None
        stall_ns = state.add_chunk(now_ns)
        span = state.span
        if span is None:
            return
        if first and self.record_ttft:
            span.add_event(semconv.FIRST_CHUNK_EVENT)
        elif stall_ns:
            self._add_stall_event(span, stall_ns, state.chunks - 1)

    @staticmethod
    def _add_stall_event(span: Span, gap_ns: int, after_chunks: int) -> None:
        span.add_event(
            semconv.STALL_EVENT,
            {semconv.STALL_GAP_MS: gap_ns / 1e6, semconv.STALL_AFTER_CHUNKS: after_chunks},
        )

    def _finish_model(
        self, state: ModelRunState, error: BaseException | None, response: LLMResult | None
    ) -> None:
        end_ns = _now_ns()
        span = state.span
        assert span is not None  # model runs always have a span
        # Ends the span even when measuring fails: the run is already out of the registry,
        # so nothing else would.
        try:
            trailing_stall = state.close_stream(end_ns)
            if trailing_stall:
                self._add_stall_event(span, trailing_stall, state.chunks)
            timing = call_timing(
                started_ns=state.started_ns,
                end_ns=end_ns,
                first_chunk_ns=state.first_chunk_ns,
                last_chunk_ns=state.last_chunk_ns,
                chunks=state.chunks,
                failed=error is not None,
                record_ttft=self.record_ttft,
                warn_ms=self.ttft_warn_ms,
                error_ms=self.ttft_error_ms,
            )
            usage = response_details(response)
            # Our count of the request: the trim's (the whole request) when a trim prepared it.
            estimated = (
                state.trim.tokens_after if state.trim else self._estimate_tokens(state.messages)
            )
            span.set_attributes(end_attributes(state, timing, usage, estimated))
            if self.capture_content and response is not None:
                span.set_attribute(gen_ai.GEN_AI_OUTPUT_MESSAGES, output_json(response))
        finally:
            end_span(span, error)

        result = outcome(error)
        failure = error_type(error) if error is not None and result != "abandoned" else None
        metric_attributes = state.metric_attributes
        if usage.model is not None:
            metric_attributes[gen_ai.GEN_AI_RESPONSE_MODEL] = usage.model
        if failure is not None:
            metric_attributes[error_attributes.ERROR_TYPE] = failure
        self._instruments.record_call(
            metric_attributes,
            state.context,
            timing=timing,
            usage=usage,
            stalls=state.stalls,
            streamed=state.streamed,
            question_retention=(
                state.trim.attributes.get(semconv.TRIM_QUESTION_RETENTION) if state.trim else None
            ),
        )
        # A blocking call's first text waits for the whole answer: it has no time to first token.
        first_token_ms = timing.ttft_ms if state.streamed else None
        self._calibrate(state, first_token_ms, usage)
        self._learn_latency(state, first_token_ms, usage)
        record = LatencyRecord(
            run_id=state.run_id,
            model=state.model or "unknown",
            streaming=state.streamed,
            ttft_ms=timing.ttft_ms,
            total_ms=timing.total_ms,
            chunks=state.chunks,
            stalls=state.stalls,
            max_chunk_gap_ms=state.max_gap_ns / 1e6,
            input_tokens=usage.input_tokens,
            estimated_input_tokens=estimated,
            output_tokens=usage.output_tokens,
            ttft_level=timing.ttft_level,
            error_type=failure,
            outcome=result,
            cache_read_tokens=usage.cache_read_tokens,
        )
        log_record(
            record,
            state.trim,
            threshold_ms=self.ttft_error_ms if timing.ttft_level == "error" else self.ttft_warn_ms,
            every_request=self.log_every_request,
        )
        if self._on_record is not None:
            try:
                self._on_record(record)
            except Exception as exc:
                self.failures.report("on_record", exc)

    def _calibrate(
        self, state: ModelRunState, first_token_ms: float | None, usage: Response
    ) -> None:
        """Tells the trim that prepared the request how it went: its calibration the server's
        prompt tokens, its ``on_usage`` those, the cached ones and the time to first token."""
        trim = state.trim
        if trim is None:
            return
        if trim.calibration is not None and usage.input_tokens is not None:
            try:
                trim.calibration.observe(trim.tokens_after, usage.input_tokens)
            except Exception as exc:
                self.failures.report("calibration", exc)
        if trim.on_usage is not None:
            try:
                trim.on_usage(usage.input_tokens, usage.cache_read_tokens, first_token_ms)
            except Exception as exc:
                self.failures.report("trim usage", exc)

    def _learn_latency(
        self, state: ModelRunState, first_token_ms: float | None, usage: Response
    ) -> None:
        """Feeds the endpoint's latency model the call's TTFT and prompt tokens."""
        if first_token_ms is None or usage.input_tokens is None:
            return
        try:
            LATENCY_MODELS.model_for(state.server, state.model).observe(
                first_token_ms, usage.input_tokens, usage.cache_read_tokens
            )
        except Exception as exc:
            self.failures.report("latency_model", exc)

    def _estimate_tokens(self, messages: Sequence[BaseMessage] | None) -> int | None:
        """The prompt counted locally (cl100k), or ``None`` without messages or a counter."""
        if not messages or self._token_counter_failed:
            return None
        if self._token_counter is None:
            try:
                self._token_counter = TokenCounter()
            except ValueError as exc:
                self._token_counter_failed = True
                logger.warning("agent-latency: no local token estimate: %s", exc)
                return None
        return self._token_counter.count_messages(messages)
