"""A LangChain callback handler that measures every model call and traces agent runs.

It only routes LangChain's callbacks: the run tree (:class:`RunTree`) keeps the open runs and
ends each exactly once; the model-call tracer (:class:`ModelCallTracer`) measures and records
the calls.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, ParamSpec, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from agent_latency import semconv
from agent_latency._trace_link import TRIM_EVENT
from agent_latency._validation import checked_bool, checked_int, checked_number
from agent_latency.telemetry._content import messages_json, prompts_json
from agent_latency.telemetry._langchain import blocks_carry_content, event_carries_content
from agent_latency.telemetry._log import FailureLog
from agent_latency.telemetry._model_call import CallOptions, ModelCallTracer, ModelStart
from agent_latency.telemetry._record import LatencyRecord
from agent_latency.telemetry._run_tree import RunTree

if TYPE_CHECKING:
    from agent_latency.config import Settings

__all__ = ["LatencyCallbackHandler", "LatencyRecord"]

_CHAT: Final = gen_ai.GenAiOperationNameValues.CHAT.value
_TEXT_COMPLETION: Final = gen_ai.GenAiOperationNameValues.TEXT_COMPLETION.value
_OWNER: Final = "LatencyCallbackHandler"

_P = ParamSpec("_P")


def guarded(method: Callable[_P, None]) -> Callable[_P, None]:
    """Makes a callback method swallow its own failures, reported to the handler's
    :class:`FailureLog`: telemetry never breaks the host."""
    name = method.__name__

    @functools.wraps(method)
    def guarded_method(*args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            method(*args, **kwargs)
        except Exception as exc:
            cast("LatencyCallbackHandler", args[0]).failures.report(name, exc)

    return guarded_method


def _option(name: str, doc: str) -> Any:
    """A read-only property of the handler: its option ``name``."""
    return property(lambda handler: getattr(handler._calls.options, name), doc=doc)


def _check_ms(option: str, value: object, *, maximum: float | None = None) -> float:
    return checked_number(
        _OWNER, option, value, minimum=0, above=True, maximum=maximum, hint="milliseconds"
    )


_A_DAY_MS: Final = 86_400_000
"""The longest chunk timeout, as ``streaming.chunk_timeout_ms`` allows (in nanoseconds, a far
longer one overflows the integer clock readings it is compared with)."""


def _check_provider(option: str, provider: object, method: str) -> None:
    """Refuses a provider without ``method`` (any object with it will do, as for OpenTelemetry's
    ``get_tracer``), which would fail unnamed when the handler asks it."""
    if provider is not None and not callable(getattr(provider, method, None)):
        raise TypeError(
            f"{_OWNER}: {option} must be an OpenTelemetry provider (with {method}()) or None, "
            f"got {provider!r}."
        )


class LatencyCallbackHandler(BaseCallbackHandler):
    """Measures each model call's latency and traces agent runs with OpenTelemetry.

    Attach it explicitly, e.g. ``agent.invoke(inputs, config={"callbacks": [handler]})``,
    ``runnable.with_config(callbacks=[handler])`` or ``ChatOpenAI(callbacks=[handler])``. One
    handler serves any number of concurrent runs, sync or async, from any thread.

    The GenAI names are those of the installed ``opentelemetry-semantic-conventions``; with
    ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` when the handler is made, the
    newest GenAI conventions' names where they were renamed (docs/telemetry.md lists both).

    Args:
        tracer_provider: Where spans go; the global provider when ``None``.
        meter_provider: Where metrics go; the global provider when ``None``.
        ttft_warn_ms: A time to first token above this logs a WARNING and marks the span
            ``agent_latency.ttft_level=warn``. A blocking call's first text comes with its whole
            answer: its total is measured against the thresholds, and its log hints at streaming.
        ttft_error_ms: Above this, an ERROR and ``ttft_level=error``. At least ``ttft_warn_ms``.
        chunk_timeout_ms: A wait between streamed chunks longer than this is a stall (at most
            a day).
        capture_content: Record prompts, answers and tool arguments and results on the spans
            (``gen_ai.input.messages`` and friends). Off by default: they may be confidential.
        log_every_request: Log one INFO line per model call (on by default, like
            ``metrics.log_every_request``; the lines show only when the ``agent_latency``
            logger passes INFO).
        record_ttft: Measure time to first token. When off, calls get durations, chunk and stall
            figures but no TTFT attributes, first-chunk event, TTFT metric or threshold logs.
        on_record: Called with a :class:`LatencyRecord` after each model call, in the callback:
            a plain function, not an ``async`` one (nothing would await it); its exceptions are
            logged and swallowed.
        max_open_runs: Most runs tracked at once; past it the oldest open run is ended (a run
            whose end never comes, such as a stream kept but never read, cannot leak memory).

    Raises:
        TypeError: When an option is of the wrong type; the message names it.
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
        warn_ms = _check_ms("ttft_warn_ms", ttft_warn_ms)
        error_ms = _check_ms("ttft_error_ms", ttft_error_ms)
        if error_ms < warn_ms:
            raise ValueError(
                f"{_OWNER}: ttft_error_ms ({ttft_error_ms}) must be at least "
                f"ttft_warn_ms ({ttft_warn_ms})."
            )
        if on_record is not None and not callable(on_record):
            raise TypeError(f"{_OWNER}: on_record must be callable or None, got {on_record!r}.")
        if on_record is not None and (
            inspect.iscoroutinefunction(on_record)
            or inspect.iscoroutinefunction(type(on_record).__call__)
        ):
            raise TypeError(
                f"{_OWNER}: on_record must be a plain function, got the async {on_record!r}: the "
                "handler calls it in the callback and would await nothing, so every record "
                "would be lost. Fix: pass a function that queues the record (e.g. "
                "queue.put_nowait) and await it elsewhere."
            )
        options = CallOptions(
            ttft_warn_ms=warn_ms,
            ttft_error_ms=error_ms,
            chunk_timeout_ms=_check_ms("chunk_timeout_ms", chunk_timeout_ms, maximum=_A_DAY_MS),
            capture_content=checked_bool(_OWNER, "capture_content", capture_content),
            log_every_request=checked_bool(_OWNER, "log_every_request", log_every_request),
            record_ttft=checked_bool(_OWNER, "record_ttft", record_ttft),
            on_record=on_record,
        )
        max_runs = checked_int(_OWNER, "max_open_runs", max_open_runs, minimum=1)
        _check_provider("tracer_provider", tracer_provider, "get_tracer")
        _check_provider("meter_provider", meter_provider, "get_meter")
        super().__init__()
        self.failures = FailureLog()
        self._tracer_provider = tracer_provider
        self._tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE,
            tracer_provider=tracer_provider,
            schema_url=semconv.SCHEMA_URL,
        )
        self._calls = ModelCallTracer(
            tracer=self._tracer,
            meter=metrics.get_meter(
                semconv.INSTRUMENTATION_SCOPE,
                meter_provider=meter_provider,
                schema_url=semconv.SCHEMA_URL,
            ),
            options=options,
            failures=self.failures,
        )
        self._tree = RunTree(
            tracer=self._tracer,
            capture_content=options.capture_content,
            max_open_runs=max_runs,
            failures=self.failures,
            end_model_call=self._calls.finish,
        )

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> LatencyCallbackHandler:
        """Builds a handler with the thresholds of ``settings``.

        Args:
            settings: Loaded settings: ``metrics.ttft_warn_ms``, ``metrics.ttft_error_ms``,
                ``metrics.log_every_request``, ``streaming.chunk_timeout_ms`` and
                ``streaming.record_ttft`` are used.
            **overrides: Any keyword of the constructor, winning over the settings.
        """
        options: dict[str, Any] = {
            "ttft_warn_ms": settings.metrics.ttft_warn_ms,
            "ttft_error_ms": settings.metrics.ttft_error_ms,
            "log_every_request": settings.metrics.log_every_request,
            "chunk_timeout_ms": settings.streaming.chunk_timeout_ms,
            "record_ttft": settings.streaming.record_ttft,
        }
        return cls(**(options | overrides))

    ttft_warn_ms: float = _option("ttft_warn_ms", "The TTFT above which a call is ``warn``.")
    ttft_error_ms: float = _option("ttft_error_ms", "The TTFT above which a call is ``error``.")
    chunk_timeout_ms: float = _option("chunk_timeout_ms", "A longer wait between chunks stalls.")
    capture_content: bool = _option("capture_content", "Whether content goes on the spans.")
    log_every_request: bool = _option("log_every_request", "Whether every call logs a line.")
    record_ttft: bool = _option("record_ttft", "Whether time to first token is measured.")

    @property
    def open_runs(self) -> int:
        """How many runs have started and not yet ended (0 when everything is finished)."""
        return len(self._tree)

    def __copy__(self) -> LatencyCallbackHandler:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> LatencyCallbackHandler:
        # A config copied per request (copy.deepcopy(config)) keeps the one handler, as
        # LangChain's own tracers do: its open runs are shared state, and its locks cannot be
        # copied (the copy raised in the application).
        return self

    def __repr__(self) -> str:
        return (
            f"LatencyCallbackHandler(ttft_warn_ms={self.ttft_warn_ms:g}, "
            f"ttft_error_ms={self.ttft_error_ms:g}, chunk_timeout_ms={self.chunk_timeout_ms:g}, "
            f"capture_content={self.capture_content}, "
            f"log_every_request={self.log_every_request}, record_ttft={self.record_ttft}, "
            f"open_runs={self.open_runs})"
        )

    # -- what the trimmer asks (agent_latency._trace_link) -------------------------------------

    def otel_context_for_run(self, run_id: UUID) -> Context | None:
        """Returns the context whose current span is the span of ``run_id``, if it is open.

        This makes the handler a ``RunContextProvider``: the trimmer starts its span under the
        run it works in.
        """
        try:
            state = self._tree.get(run_id)
            return None if state is None else state.context
        except Exception as exc:
            self.failures.report("otel_context_for_run", exc)
            return None

    def tracer_for_trims(self) -> trace.Tracer | None:
        """Returns the handler's tracer, so a trim run under it records its span into the
        handler's tracer provider, beside its parent (a ``TrimTracerProvider``); ``None`` when
        that provider records nothing (a no-op one, or the global one before it is set)."""
        provider = self._tracer_provider or trace.get_tracer_provider()
        if isinstance(provider, trace.NoOpTracerProvider | trace.ProxyTracerProvider):
            return None
        return self._tracer

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
            _CHAT, run_id, parent_run_id, serialized, metadata, kwargs, content, prompt
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
            _TEXT_COMPLETION, run_id, parent_run_id, serialized, metadata, kwargs, content, None
        )

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: Any = None,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        """Times a streamed chunk; the empty end-of-stream chunk and a reasoning model's thinking
        (``reasoning`` content blocks of a v1 message) do not count as content."""
        try:  # Inline rather than @guarded: this runs once per chunk.
            content = bool(
                (token if isinstance(token, str) else blocks_carry_content(token))
                or getattr(getattr(chunk, "message", None), "tool_call_chunks", None)
            )
            state = self._tree.chunk_arrived(run_id)
            self._calls.chunk(state, content=content, delivered=chunk)
        except Exception as exc:
            self.failures.report("on_llm_new_token", exc)

    def on_stream_event(self, event: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Times a chunk of LangChain's v2 streaming protocol (instead of new-token, or besides it
        for a model whose own ``_stream`` reports tokens: then the chunks are counted once); a
        reasoning delta is no content."""
        try:
            content = event_carries_content(event)
            state = self._tree.chunk_arrived(run_id)
            self._calls.chunk(state, content=content, delivered=event, by_event=True)
        except Exception as exc:
            self.failures.report("on_stream_event", exc)

    @guarded
    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        self._tree.end(run_id, None, response)

    @guarded
    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._tree.end(run_id, error)

    # -- agents, chains, tools, retrievers -----------------------------------------------------

    @guarded
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
        parent_run_id = self._tree.enclosing_run(parent_run_id)
        if not self._tree.is_repeated_start(run_id, parent_run_id):
            self._tree.start_chain(serialized, run_id, parent_run_id, tags, metadata, kwargs)

    @guarded
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._tree.end(run_id, None)

    @guarded
    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._tree.end(run_id, error)

    @guarded
    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        parent_run_id = self._tree.enclosing_run(parent_run_id)
        if not self._tree.is_repeated_start(run_id, parent_run_id):
            self._tree.start_tool(serialized, input_str, run_id, parent_run_id, inputs, kwargs)

    @guarded
    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            self._tree.record_tool_result(run_id, output)
        finally:  # a result that cannot be recorded must not leave the span open
            self._tree.end(run_id, None)

    @guarded
    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._tree.end(run_id, error)

    @guarded
    def on_retriever_start(
        self,
        serialized: dict[str, Any],
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        # Not traced, but registered so that runs under a retriever still find their parent.
        parent_run_id = self._tree.enclosing_run(parent_run_id)
        if not self._tree.is_repeated_start(run_id, parent_run_id):
            self._tree.start_untraced(run_id, parent_run_id, ends_with_task=True)

    @guarded
    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._tree.end(run_id, None)

    @guarded
    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._tree.end(run_id, error)

    @guarded
    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Keeps a trim's figures for the model call it prepared (see ``TRIM_EVENT``)."""
        if name == TRIM_EVENT:
            self._tree.keep_trim(run_id, data)

    # -- internals -----------------------------------------------------------------------------

    def _start_model(
        self,
        operation: str,
        run_id: UUID,
        parent_run_id: UUID | None,
        serialized: dict[str, Any],
        metadata: dict[str, Any] | None,
        kwargs: dict[str, Any],
        content: str | None,
        messages: list[BaseMessage] | None,
    ) -> None:
        parent_run_id = self._tree.enclosing_run(parent_run_id)
        if self._tree.is_repeated_start(run_id, parent_run_id):
            return
        call = ModelStart(
            operation=operation,
            run_id=run_id,
            parent_run_id=parent_run_id,
            serialized=serialized,
            metadata=metadata or {},
            params=kwargs.get("invocation_params") or {},
            content=content,
            messages=messages,
        )
        state = self._calls.start(
            call,
            parent_context=self._tree.parent_context(parent_run_id),
            trim=self._tree.take_trim(parent_run_id),
        )
        self._tree.add(state, ends_with_task=operation == _CHAT)
