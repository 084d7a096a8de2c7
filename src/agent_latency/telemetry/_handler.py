"""A LangChain callback handler that measures every model call and traces agent runs.

Each chat-model call becomes a ``chat {model}`` span (GenAI semantic conventions) with its time
to first chunk, total duration, stalls between chunks and the trim that prepared it; agents,
chains and tools become the spans around it, nested by LangChain's ``run_id`` and
``parent_run_id``. The handler never makes its spans current (attaching an OpenTelemetry context
in one callback and detaching it in another breaks under asyncio): each span is started with its
parent's context passed explicitly, and a root run takes the caller's current context, so a web
request span becomes the parent of the agent run.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, ParamSpec
from urllib.parse import urlsplit
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import error_attributes, server_attributes
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency._tokens import TokenCounter, role_of
from agent_latency._trace_link import TRIM_EVENT, TRIM_FIELDS
from agent_latency.telemetry._run_state import ModelRunState, PendingTrim, RunRegistry, RunState

if TYPE_CHECKING:
    from agent_latency._config import Settings

logger = logging.getLogger("agent_latency")

_now_ns: Callable[[], int] = time.perf_counter_ns
"""The clock of every duration the handler measures (tests replace it)."""

_CHAT: Final = gen_ai.GenAiOperationNameValues.CHAT.value
_INVOKE_AGENT: Final = gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
_EXECUTE_TOOL: Final = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value

# LangChain's ``ls_provider`` values mapped to ``gen_ai.provider.name`` where they differ.
_PROVIDERS: Final = {
    "azure": gen_ai.GenAiProviderNameValues.AZURE_AI_OPENAI.value,
    "amazon_bedrock": gen_ai.GenAiProviderNameValues.AWS_BEDROCK.value,
    "bedrock": gen_ai.GenAiProviderNameValues.AWS_BEDROCK.value,
    "google_genai": gen_ai.GenAiProviderNameValues.GCP_GEN_AI.value,
    "google_vertexai": gen_ai.GenAiProviderNameValues.GCP_VERTEX_AI.value,
    "mistralai": gen_ai.GenAiProviderNameValues.MISTRAL_AI.value,
    "xai": gen_ai.GenAiProviderNameValues.X_AI.value,
}
# Constructor fields under which LangChain integrations serialise their endpoint.
_ENDPOINT_FIELDS: Final = ("openai_api_base", "base_url", "azure_endpoint", "api_base", "endpoint")
_DEFAULT_PORTS: Final = {"https": 443, "http": 80}
_HIDDEN_TAG: Final = "langsmith:hidden"
_CREATE_AGENT: Final = "langchain_create_agent"


@dataclass(frozen=True, slots=True)
class LatencyRecord:
    """What one model call measured, handed to ``on_record`` when the call ends.

    Attributes:
        run_id: LangChain's id of the call.
        model: The requested model (``"unknown"`` when the integration does not say).
        streaming: Whether the call streamed.
        ttft_ms: Milliseconds to the first content chunk; the total for a blocking call;
            ``None`` when the call failed before any content arrived, and always ``None`` when
            the handler's ``record_ttft`` is off.
        total_ms: Milliseconds from start to end.
        chunks: Content chunks received.
        stalls: Waits between chunks longer than ``chunk_timeout_ms``.
        max_chunk_gap_ms: The longest wait between chunks (or from the last one to the end).
        input_tokens: Prompt tokens the server reported, if it did.
        estimated_input_tokens: Prompt tokens counted locally, if they could be.
        output_tokens: Completion tokens the server reported, if it did.
        ttft_level: ``"ok"``, ``"warn"`` or ``"error"``; ``None`` without a TTFT.
        error_type: The exception type when the call failed or was cancelled.
        outcome: ``"ok"``, ``"error"``, ``"cancelled"`` or ``"abandoned"`` (the consumer stopped
            reading the stream).
    """

    run_id: UUID
    model: str
    streaming: bool
    ttft_ms: float | None
    total_ms: float
    chunks: int
    stalls: int
    max_chunk_gap_ms: float
    input_tokens: int | None
    estimated_input_tokens: int | None
    output_tokens: int | None
    ttft_level: str | None
    error_type: str | None
    outcome: str


@dataclass(frozen=True, slots=True)
class _Response:
    """The fields of an ``LLMResult`` the span and metrics record."""

    model: str | None = None
    id: str | None = None
    finish_reasons: tuple[str, ...] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None


_P = ParamSpec("_P")


def _guarded(method: Callable[_P, None]) -> Callable[_P, None]:
    """Makes a callback swallow (and log) its own failures: telemetry never breaks the host."""
    name = method.__name__

    @functools.wraps(method)
    def guarded(*args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            method(*args, **kwargs)
        except Exception as exc:
            _log_failure(name, exc)

    return guarded


_reported_failures: set[tuple[str, str]] = set()


def _log_failure(callback: str, exc: Exception) -> None:
    # The message of an unexpected exception may quote data; only its type is logged loudly.
    key = (callback, type(exc).__name__)
    if key not in _reported_failures:
        _reported_failures.add(key)
        logger.warning(
            "agent-latency: %s failed with %s; the run goes on without this telemetry "
            "(details at DEBUG level)",
            callback,
            type(exc).__name__,
        )
    logger.debug("agent-latency: %s failed", callback, exc_info=exc)


def _error_type(error: BaseException) -> str:
    """The exception's fully qualified type name, as the SDK's exception events record it."""
    cls = type(error)
    module = cls.__module__
    return cls.__qualname__ if module in (None, "builtins") else f"{module}.{cls.__qualname__}"


def _outcome(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    if isinstance(error, GeneratorExit):
        return "abandoned"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    return "error"


def _check_ms(option: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(
            f"LatencyCallbackHandler: {option} must be a number of milliseconds, got {value!r}."
        )
    if value <= 0:
        raise ValueError(f"LatencyCallbackHandler: {option} must be > 0, got {value!r}.")
    return float(value)


class LatencyCallbackHandler(BaseCallbackHandler):
    """Measures each model call's latency and traces agent runs with OpenTelemetry.

    Attach it explicitly, e.g. ``agent.invoke(inputs, config={"callbacks": [handler]})``,
    ``runnable.with_config(callbacks=[handler])`` or ``ChatOpenAI(callbacks=[handler])``. One
    handler serves any number of concurrent runs, sync or async, from any thread.

    Args:
        tracer_provider: Where spans go; the global provider when ``None``.
        meter_provider: Where metrics go; the global provider when ``None``.
        ttft_warn_ms: A time to first token above this logs a WARNING and marks the span
            ``agent_latency.ttft_level=warn``.
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

    run_inline = True  # Called in the caller's task, in order: no executor hop, exact timing.
    raise_error = False

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
        super().__init__()
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
        self.capture_content = capture_content
        self.log_every_request = log_every_request
        self.record_ttft = record_ttft
        self._on_record = on_record
        self._stall_ns = int(self.chunk_timeout_ms * 1_000_000)
        self._tracer = trace.get_tracer("agent_latency", tracer_provider=tracer_provider)
        meter = metrics.get_meter("agent_latency", meter_provider=meter_provider)
        self._duration = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=semconv.DURATION_BUCKETS_S,
        )
        self._time_to_first_chunk = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time from the request to the first content chunk of a streamed call.",
            explicit_bucket_boundaries_advisory=semconv.DURATION_BUCKETS_S,
        )
        self._time_per_chunk = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK,
            unit="s",
            description="Mean time between content chunks after the first, once per call.",
            explicit_bucket_boundaries_advisory=semconv.DURATION_BUCKETS_S,
        )
        self._token_usage = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=semconv.TOKEN_USAGE_BUCKETS,
        )
        self._stall_counter = meter.create_counter(
            semconv.STALLS_METRIC,
            unit="{stall}",
            description="Waits between streamed chunks longer than chunk_timeout_ms.",
        )
        self._breach_counter = meter.create_counter(
            semconv.TTFT_BREACHES_METRIC,
            unit="{call}",
            description="Model calls whose time to first token crossed a threshold.",
        )
        self._runs = RunRegistry(max_open_runs, self._end_evicted)
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

    @property
    def open_runs(self) -> int:
        """How many runs have started and not yet ended (0 when everything is finished)."""
        return len(self._runs)

    def otel_context_for_run(self, run_id: UUID) -> Context | None:
        """Returns the context whose current span is the span of ``run_id``, if it is open.

        This makes the handler a :class:`~agent_latency._trace_link.RunContextProvider`: the
        trimmer starts its span under the run it works in.
        """
        try:
            state = self._runs.get(run_id)
            return None if state is None else state.context
        except Exception as exc:
            _log_failure("otel_context_for_run", exc)
            return None

    # -- model calls ---------------------------------------------------------------------------

    @_guarded
    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        started_ns = _now_ns()
        params: Mapping[str, Any] = kwargs.get("invocation_params") or {}
        meta: Mapping[str, Any] = metadata or {}
        prompt = messages[0] if messages else []
        model = _first_str(
            meta.get("ls_model_name"),
            params.get("model"),
            params.get("model_name"),
            params.get("model_id"),
        )
        provider = meta.get("ls_provider")
        provider = _PROVIDERS.get(provider, provider) if isinstance(provider, str) else "unknown"
        metric_attributes: dict[str, AttributeValue] = {
            gen_ai.GEN_AI_OPERATION_NAME: _CHAT,
            gen_ai.GEN_AI_PROVIDER_NAME: provider,
        }
        if model is not None:
            metric_attributes[gen_ai.GEN_AI_REQUEST_MODEL] = model
        server = _server(serialized)
        if server is not None:
            metric_attributes[server_attributes.SERVER_ADDRESS] = server[0]
            metric_attributes[server_attributes.SERVER_PORT] = server[1]
        attributes = dict(metric_attributes)
        temperature = params.get("temperature", meta.get("ls_temperature"))
        if isinstance(temperature, int | float) and not isinstance(temperature, bool):
            attributes[gen_ai.GEN_AI_REQUEST_TEMPERATURE] = float(temperature)
        max_tokens = _first_int(
            params.get("max_tokens"),
            params.get("max_completion_tokens"),
            meta.get("ls_max_tokens"),
        )
        if max_tokens is not None:
            attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] = max_tokens
        if self.capture_content:
            attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = _messages_json(prompt)
        parent_context = self._parent_context(parent_run_id)
        span = self._tracer.start_span(
            f"{_CHAT} {model}" if model else _CHAT,
            context=parent_context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        state = ModelRunState(
            run_id=run_id,
            parent_run_id=parent_run_id,
            span=span,
            context=trace.set_span_in_context(span, parent_context),
            model=model,
            started_ns=started_ns,
            stall_ns=self._stall_ns,
            messages=prompt,
            metric_attributes=metric_attributes,
            streamed=params.get("stream") is True,
            trim=self._take_trim(parent_run_id),
        )
        if state.trim is not None:
            span.set_attributes(state.trim.attributes)
        self._register(state)

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: Any = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Times a streamed chunk; the empty end-of-stream chunk does not count."""
        now_ns = _now_ns()
        try:  # Inline rather than @_guarded: this runs once per chunk.
            state = self._runs.get(run_id)
            if not isinstance(state, ModelRunState):
                return
            state.streamed = True
            if token or getattr(getattr(chunk, "message", None), "tool_call_chunks", None):
                self._add_chunk(state, now_ns)
        except Exception as exc:
            _log_failure("on_llm_new_token", exc)

    def on_stream_event(
        self,
        event: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
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
            _log_failure("on_stream_event", exc)

    @_guarded
    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        state = self._runs.pop(run_id)
        if state is not None:
            self._finish(state, None, response)

    @_guarded
    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        state = self._runs.pop(run_id)
        if state is not None:
            self._finish(state, error)

    # -- agents, chains, tools, retrievers -----------------------------------------------------

    @_guarded
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: dict[str, Any] | Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        parent_context = self._parent_context(parent_run_id)
        if tags and _HIDDEN_TAG in tags:
            self._register(RunState(run_id, parent_run_id, None, parent_context))
            return
        name = _run_name(serialized, kwargs)
        meta: Mapping[str, Any] = metadata or {}
        if _is_agent(name, meta):
            span = self._tracer.start_span(
                f"{_INVOKE_AGENT} {name}",
                context=parent_context,
                kind=SpanKind.INTERNAL,
                attributes={
                    gen_ai.GEN_AI_OPERATION_NAME: _INVOKE_AGENT,
                    gen_ai.GEN_AI_AGENT_NAME: name,
                },
            )
        else:
            span = self._tracer.start_span(
                f"chain {name}",
                context=parent_context,
                kind=SpanKind.INTERNAL,
                attributes={semconv.RUN_NAME: name},
            )
        self._register(
            RunState(run_id, parent_run_id, span, trace.set_span_in_context(span, parent_context))
        )

    @_guarded
    def on_chain_end(
        self,
        outputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._end_run(run_id, None)

    @_guarded
    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._end_run(run_id, error)

    @_guarded
    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = _run_name(serialized, kwargs)
        attributes: dict[str, AttributeValue] = {
            gen_ai.GEN_AI_OPERATION_NAME: _EXECUTE_TOOL,
            gen_ai.GEN_AI_TOOL_NAME: name,
            gen_ai.GEN_AI_TOOL_TYPE: "function",
        }
        tool_call_id = kwargs.get("tool_call_id")
        if isinstance(tool_call_id, str):
            attributes[gen_ai.GEN_AI_TOOL_CALL_ID] = tool_call_id
        description = (serialized or {}).get("description")
        if isinstance(description, str) and description:
            attributes[gen_ai.GEN_AI_TOOL_DESCRIPTION] = description
        if self.capture_content:
            attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = (
                _json(inputs) if inputs is not None else input_str
            )
        parent_context = self._parent_context(parent_run_id)
        span = self._tracer.start_span(
            f"{_EXECUTE_TOOL} {name}",
            context=parent_context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._register(
            RunState(run_id, parent_run_id, span, trace.set_span_in_context(span, parent_context))
        )

    @_guarded
    def on_tool_end(
        self,
        output: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        if self.capture_content:
            state = self._runs.get(run_id)
            if state is not None and state.span is not None:
                result = getattr(output, "content", output)
                state.span.set_attribute(
                    gen_ai.GEN_AI_TOOL_CALL_RESULT,
                    result if isinstance(result, str) else _json(result),
                )
        self._end_run(run_id, None)

    @_guarded
    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._end_run(run_id, error)

    @_guarded
    def on_retriever_start(
        self,
        serialized: dict[str, Any],
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # Not traced, but registered so that runs under a retriever still find their parent.
        self._register(RunState(run_id, parent_run_id, None, self._parent_context(parent_run_id)))

    @_guarded
    def on_retriever_end(
        self,
        documents: Sequence[Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._end_run(run_id, None)

    @_guarded
    def on_retriever_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._end_run(run_id, error)

    @_guarded
    def on_custom_event(
        self,
        name: str,
        data: Any,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Keeps a trim's figures for the model call it prepared (see ``_trace_link``)."""
        if name != TRIM_EVENT:
            return
        state = self._runs.get(run_id)
        pending = _pending_trim(data)
        if state is not None and pending is not None:
            # A model call inside this run takes it; one after it is served by _finish.
            state.pending_trim = pending

    # -- internals -----------------------------------------------------------------------------

    def _parent_context(self, parent_run_id: UUID | None) -> Context:
        parent = self._runs.get(parent_run_id)
        # A run whose parent we do not trace (a root run, or a handler attached to the model
        # only) hangs under whatever span is current for the caller.
        return otel_context.get_current() if parent is None else parent.context

    def _register(self, state: RunState) -> None:
        if self._runs.add(state) is not None:
            return  # ended by its parent at the latest
        # LangChain reports no end for a model call (or tool) cancelled while awaited directly:
        # a root run in asyncio ends at the latest with its task.
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no event loop in this thread
            return
        if task is not None:
            watch = functools.partial(self._on_task_done, state.run_id)
            task.add_done_callback(watch)
            state.task_watch = (task, watch)

    def _on_task_done(self, run_id: UUID, task: asyncio.Task[object]) -> None:
        try:
            state = self._runs.pop(run_id)
            if state is not None:
                self._finish(
                    state, asyncio.CancelledError() if task.cancelled() else GeneratorExit()
                )
        except Exception as exc:
            _log_failure("task watch", exc)

    def _end_evicted(self, state: RunState) -> None:
        try:
            self._finish(state, GeneratorExit())
        except Exception as exc:
            _log_failure("eviction", exc)

    def _end_run(self, run_id: UUID, error: BaseException | None) -> None:
        state = self._runs.pop(run_id)
        if state is not None:
            self._finish(state, error)

    def _take_trim(self, parent_run_id: UUID | None) -> PendingTrim | None:
        run = self._runs.get(parent_run_id)
        while run is not None:
            pending = run.pending_trim
            if pending is not None:
                run.pending_trim = None
                return pending
            run = self._runs.get(run.parent_run_id)
        return None

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
            {
                semconv.STALL_GAP_MS: gap_ns / 1e6,
                semconv.STALL_AFTER_CHUNKS: after_chunks,
            },
        )

    def _finish(
        self,
        state: RunState,
        error: BaseException | None,
        response: LLMResult | None = None,
    ) -> None:
        """Ends a run popped from the registry: its open children first, then its span."""
        for child_id in tuple(state.children):
            child = self._runs.pop(child_id)
            if child is not None:
                # Outlived its parent: cancelled with it, or left behind by a finished parent.
                try:
                    self._finish(child, error if error is not None else GeneratorExit())
                except Exception as exc:  # one child's failure must not leave the parent open
                    _log_failure("ending a child run", exc)
        if state.pending_trim is not None and error is None:
            # A trim whose run ended before any model call used it prepared a later call: the
            # next step of a sequence, or the sibling ``agent`` node of a LangGraph
            # ``pre_model_hook``. The enclosing run keeps it, and a newer trim replaces it.
            parent = self._runs.get(state.parent_run_id)
            if parent is not None:
                parent.pending_trim = state.pending_trim
        if state.task_watch is not None:
            task, watch = state.task_watch
            task.remove_done_callback(watch)
        if isinstance(state, ModelRunState):
            self._finish_model(state, error, response)
        elif state.span is not None:
            _end_span(state.span, error)

    def _finish_model(
        self,
        state: ModelRunState,
        error: BaseException | None,
        response: LLMResult | None,
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
            total_ms = (end_ns - state.started_ns) / 1e6
            first_chunk_ns = state.first_chunk_ns
            # Seconds to the first chunk, for the semantic-convention attribute and metric, which
            # exist for streamed calls only.
            first_chunk_s: float | None = (
                None if first_chunk_ns is None else (first_chunk_ns - state.started_ns) / 1e9
            )
            ttft_ms: float | None
            if not self.record_ttft:
                first_chunk_s = ttft_ms = None
            elif first_chunk_s is not None:
                ttft_ms = first_chunk_s * 1e3
            else:
                ttft_ms = total_ms if error is None else None
            level = self._ttft_level(ttft_ms)
            details = _response_details(response)
            estimated = self._estimate_tokens(state.messages)
            outcome = _outcome(error)
            error_type = (
                _error_type(error) if error is not None and outcome != "abandoned" else None
            )

            attributes: dict[str, AttributeValue] = {
                gen_ai.GEN_AI_REQUEST_STREAM: state.streamed,
                semconv.TOTAL_MS: total_ms,
                semconv.CHUNKS: state.chunks,
                semconv.MAX_CHUNK_GAP_MS: state.max_gap_ns / 1e6,
                semconv.STALLS: state.stalls,
            }
            if ttft_ms is not None:
                attributes[semconv.TTFT_MS] = ttft_ms
            if level is not None:
                attributes[semconv.TTFT_LEVEL] = level
            if first_chunk_s is not None:
                attributes[gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = first_chunk_s
            if estimated is not None:
                attributes[semconv.ESTIMATED_INPUT_TOKENS] = estimated
            if details.model is not None:
                attributes[gen_ai.GEN_AI_RESPONSE_MODEL] = details.model
            if details.id is not None:
                attributes[gen_ai.GEN_AI_RESPONSE_ID] = details.id
            if details.finish_reasons:
                attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] = details.finish_reasons
            if details.input_tokens is not None:
                attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] = details.input_tokens
            if details.output_tokens is not None:
                attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] = details.output_tokens
            if self.capture_content and response is not None:
                attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES] = _output_json(response)
            span.set_attributes(attributes)
        finally:
            _end_span(span, error)

        metric_attributes = state.metric_attributes
        if details.model is not None:
            metric_attributes[gen_ai.GEN_AI_RESPONSE_MODEL] = details.model
        if error_type is not None:
            metric_attributes[error_attributes.ERROR_TYPE] = error_type
        context = state.context
        self._duration.record(total_ms / 1e3, metric_attributes, context)
        if first_chunk_s is not None:
            self._time_to_first_chunk.record(first_chunk_s, metric_attributes, context)
        if first_chunk_ns is not None and state.chunks > 1:
            # Once per call (the mean gap), not once per chunk: an SDK histogram record costs
            # several microseconds, more than the whole per-chunk budget of this handler.
            mean_gap_ns = (state.last_chunk_ns - first_chunk_ns) / (state.chunks - 1)
            self._time_per_chunk.record(mean_gap_ns / 1e9, metric_attributes, context)
        for token_type, tokens in (
            (gen_ai.GenAiTokenTypeValues.INPUT.value, details.input_tokens),
            (gen_ai.GenAiTokenTypeValues.OUTPUT.value, details.output_tokens),
        ):
            if tokens is not None:
                self._token_usage.record(
                    tokens, {**metric_attributes, gen_ai.GEN_AI_TOKEN_TYPE: token_type}, context
                )
        if state.stalls:
            self._stall_counter.add(state.stalls, metric_attributes, context)
        if level is not None and level != "ok":
            self._breach_counter.add(1, {**metric_attributes, semconv.TTFT_LEVEL: level}, context)

        record = LatencyRecord(
            run_id=state.run_id,
            model=state.model or "unknown",
            streaming=state.streamed,
            ttft_ms=ttft_ms,
            total_ms=total_ms,
            chunks=state.chunks,
            stalls=state.stalls,
            max_chunk_gap_ms=state.max_gap_ns / 1e6,
            input_tokens=details.input_tokens,
            estimated_input_tokens=estimated,
            output_tokens=details.output_tokens,
            ttft_level=level,
            error_type=error_type,
            outcome=outcome,
        )
        self._log(record, state.trim)
        if self._on_record is not None:
            try:
                self._on_record(record)
            except Exception as exc:
                _log_failure("on_record", exc)

    def _ttft_level(self, ttft_ms: float | None) -> str | None:
        if ttft_ms is None:
            return None
        if ttft_ms > self.ttft_error_ms:
            return "error"
        if ttft_ms > self.ttft_warn_ms:
            return "warn"
        return "ok"

    def _estimate_tokens(self, messages: Sequence[BaseMessage] | None) -> int | None:
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

    def _log(self, record: LatencyRecord, trim: PendingTrim | None) -> None:
        tokens = (
            record.input_tokens
            if record.input_tokens is not None
            else (record.estimated_input_tokens)
        )
        if record.ttft_level in ("warn", "error") and record.ttft_ms is not None:
            threshold = self.ttft_error_ms if record.ttft_level == "error" else self.ttft_warn_ms
            budget = f"trim budget {trim.budget}" if trim is not None else "no trim before it"
            logger.log(
                logging.ERROR if record.ttft_level == "error" else logging.WARNING,
                "slow first token: %s took %.0f ms (threshold %.0f ms) with %s input tokens, "
                "%s. Hint: lower prompt.token_budget or trim history so the server prefills "
                "less; if the prompt is already small, the server is queueing.",
                record.model,
                record.ttft_ms,
                threshold,
                tokens if tokens is not None else "unknown",
                budget,
            )
        if self.log_every_request:
            logger.info(
                "model call: %s ttft=%s total=%.0f ms input_tokens=%s output_tokens=%s "
                "chunks=%d stalls=%d outcome=%s",
                record.model,
                f"{record.ttft_ms:.0f} ms" if record.ttft_ms is not None else "none",
                record.total_ms,
                tokens if tokens is not None else "unknown",
                record.output_tokens if record.output_tokens is not None else "unknown",
                record.chunks,
                record.stalls,
                record.outcome,
            )


def _end_span(span: Span, error: BaseException | None) -> None:
    outcome = _outcome(error)
    span.set_attribute(semconv.OUTCOME, outcome)
    if error is not None and outcome != "abandoned":
        error_type = _error_type(error)
        span.set_attribute(error_attributes.ERROR_TYPE, error_type)
        # The type only: exception messages may quote prompts or credentials.
        span.set_status(Status(StatusCode.ERROR, error_type))
    span.end()


def _first_str(*values: object) -> str | None:
    for value in values:
        if isinstance(value, str) and value:
            return value
    return None


def _first_int(*values: object) -> int | None:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _run_name(serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> str:
    name = _first_str(kwargs.get("name"), (serialized or {}).get("name"))
    if name is None:
        ids = (serialized or {}).get("id")
        name = _first_str(ids[-1]) if isinstance(ids, list) and ids else None
    return name or "unnamed"


def _is_agent(name: str, metadata: Mapping[str, Any]) -> bool:
    """Whether a chain run is the graph of a ``langchain.agents.create_agent`` agent."""
    if metadata.get("ls_integration") != _CREATE_AGENT:
        return False
    agent_name = metadata.get("lc_agent_name")
    # Nodes inherit the agent's metadata; the graph itself carries its own name (or, unnamed,
    # is the run outside any node).
    return name == agent_name if agent_name else "langgraph_node" not in metadata


@functools.lru_cache(maxsize=64)
def _parse_server(url: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(url if "//" in url else f"//{url}")
        host = parts.hostname
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 443)
    except ValueError:
        return None
    return (host, port) if host else None


def _server(serialized: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """The endpoint's host and port, from the model's serialised constructor arguments."""
    fields = (serialized or {}).get("kwargs")
    if not isinstance(fields, Mapping):
        return None
    url = _first_str(*(fields.get(name) for name in _ENDPOINT_FIELDS))
    return None if url is None else _parse_server(url)


def _pending_trim(data: object) -> PendingTrim | None:
    """The figures of a ``TrimResult`` (read by duck typing), or ``None`` for anything else."""
    figures: dict[str, int] = {}
    for field in TRIM_FIELDS:
        value = getattr(data, field, None)
        # ``over_budget`` is the one flag; the other fields are counts.
        if not isinstance(value, int) or isinstance(value, bool) != (field == "over_budget"):
            return None
        figures[field] = value
    attributes = {TRIM_FIELDS[field]: value for field, value in figures.items()}
    return PendingTrim(attributes=attributes, budget=figures["budget"])


def _response_details(response: LLMResult | None) -> _Response:
    if response is None:
        return _Response()
    llm_output: Mapping[str, Any] = response.llm_output or {}
    model = _first_str(llm_output.get("model_name"), llm_output.get("model"))
    response_id = _first_str(llm_output.get("id"))
    finish_reasons: list[str] = []
    input_tokens = output_tokens = None
    for generation in response.generations[0] if response.generations else ():
        info: Mapping[str, Any] = generation.generation_info or {}
        metadata: Mapping[str, Any] = {}
        if isinstance(generation, ChatGeneration):
            message = generation.message
            metadata = message.response_metadata or {}
            usage = getattr(message, "usage_metadata", None)
            if usage:
                input_tokens = _first_int(usage.get("input_tokens"))
                output_tokens = _first_int(usage.get("output_tokens"))
            message_id = message.id if not (message.id or "").startswith("lc_") else None
            response_id = response_id or _first_str(metadata.get("id"), message_id)
        model = model or _first_str(metadata.get("model_name"), metadata.get("model"))
        reason = _first_str(info.get("finish_reason"), metadata.get("finish_reason"))
        if reason is not None:
            finish_reasons.append(reason)
    if input_tokens is None and output_tokens is None:
        usage = llm_output.get("token_usage")
        if isinstance(usage, Mapping):
            input_tokens = _first_int(usage.get("prompt_tokens"))
            output_tokens = _first_int(usage.get("completion_tokens"))
    return _Response(model, response_id, tuple(finish_reasons), input_tokens, output_tokens)


# -- content capture (only with capture_content=True) ---------------------------------------------


def _json(value: object) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def _parts(message: BaseMessage) -> list[dict[str, Any]]:
    """A message's parts in the GenAI conventions' message format."""
    if isinstance(message, ToolMessage):
        return [
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
        ]
    content = message.content
    blocks: list[Any] = [content] if isinstance(content, str) else list(content)
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, str):
            if block:
                parts.append({"type": "text", "content": block})
        elif isinstance(block, Mapping) and block.get("type") == "text":
            parts.append({"type": "text", "content": block.get("text", "")})
        elif isinstance(block, Mapping):
            parts.append({"type": str(block.get("type", "unknown"))})
    for call in getattr(message, "tool_calls", None) or ():
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": call.get("name"),
                "arguments": call.get("args"),
            }
        )
    return parts


def _messages_json(messages: Sequence[BaseMessage]) -> str:
    return _json([{"role": role_of(message), "parts": _parts(message)} for message in messages])


def _output_json(response: LLMResult) -> str:
    outputs = []
    for generation in response.generations[0] if response.generations else ():
        if isinstance(generation, ChatGeneration):
            info = generation.generation_info or {}
            metadata = generation.message.response_metadata or {}
            outputs.append(
                {
                    "role": "assistant",
                    "parts": _parts(generation.message),
                    "finish_reason": _first_str(
                        info.get("finish_reason"), metadata.get("finish_reason")
                    )
                    or "stop",
                }
            )
    return _json(outputs)
