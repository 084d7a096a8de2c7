"""The run tree: spans for LangChain's agents, chains and tools, nested by ``run_id``.

:class:`RunTracer` is the part of the callback handler that knows nothing about latency: it
keeps the open runs, starts each span under its parent's (passed explicitly: the handler never
makes its spans current, since attaching a context in one callback and detaching it in another
breaks under asyncio), ends every span exactly once, and carries a reported trim to the model
call it prepared. The model-call spans themselves are the subclass's.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, ParamSpec, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency._trace_link import TRIM_EVENT
from agent_latency.telemetry._content import to_json
from agent_latency.telemetry._langchain import is_agent, run_name
from agent_latency.telemetry._log import FailureLog
from agent_latency.telemetry._run_state import ModelRunState, PendingTrim, RunRegistry, RunState

_INVOKE_AGENT: Final = gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
_EXECUTE_TOOL: Final = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
_HIDDEN_TAG: Final = "langsmith:hidden"

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
            cast("RunTracer", args[0]).failures.report(name, exc)

    return guarded_method


def error_type(error: BaseException) -> str:
    """The exception's fully qualified type name, as the SDK's exception events record it."""
    cls = type(error)
    module = cls.__module__
    return cls.__qualname__ if module in (None, "builtins") else f"{module}.{cls.__qualname__}"


def outcome(error: BaseException | None) -> str:
    """How a run ended: ``ok``, ``abandoned`` (GeneratorExit), ``cancelled`` or ``error``."""
    if error is None:
        return "ok"
    if isinstance(error, GeneratorExit):
        return "abandoned"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    return "error"


def end_span(span: Span, error: BaseException | None) -> None:
    """Sets a span's outcome (and error type and status on failure) and ends it."""
    result = outcome(error)
    span.set_attribute(semconv.OUTCOME, result)
    if error is not None and result != "abandoned":
        kind = error_type(error)
        span.set_attribute(error_attributes.ERROR_TYPE, kind)
        # The type only: exception messages may quote prompts or credentials.
        span.set_status(Status(StatusCode.ERROR, kind))
    span.end()


class RunTracer(BaseCallbackHandler):
    """Traces LangChain's runs as nested spans; subclasses add the model calls.

    Args:
        tracer: Where spans go.
        capture_content: Whether tool arguments and results go on the tool spans.
        max_open_runs: Most runs tracked at once (see :class:`RunRegistry`).
    """

    run_inline = True  # Called in the caller's task, in order: no executor hop, exact timing.
    raise_error = False

    def __init__(self, *, tracer: trace.Tracer, capture_content: bool, max_open_runs: int) -> None:
        super().__init__()
        self.capture_content = capture_content
        self.failures = FailureLog()
        self._tracer = tracer
        self._runs = RunRegistry(max_open_runs, self._end_evicted)

    @property
    def open_runs(self) -> int:
        """How many runs have started and not yet ended (0 when everything is finished)."""
        return len(self._runs)

    def otel_context_for_run(self, run_id: UUID) -> Context | None:
        """Returns the context whose current span is the span of ``run_id``, if it is open.

        This makes the handler a ``RunContextProvider``: the trimmer starts its span under the
        run it works in.
        """
        try:
            state = self._runs.get(run_id)
            return None if state is None else state.context
        except Exception as exc:
            self.failures.report("otel_context_for_run", exc)
            return None

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
        parent_context = self._parent_context(parent_run_id)
        if tags and _HIDDEN_TAG in tags:
            self._register(RunState(run_id, parent_run_id, None, parent_context))
            return
        name = run_name(serialized, kwargs)
        attributes: dict[str, AttributeValue]
        if is_agent(name, metadata or {}):
            span_name = f"{_INVOKE_AGENT} {name}"
            attributes = {
                gen_ai.GEN_AI_OPERATION_NAME: _INVOKE_AGENT,
                gen_ai.GEN_AI_AGENT_NAME: name,
            }
        else:
            span_name, attributes = f"chain {name}", {semconv.RUN_NAME: name}
        self._start_span(run_id, parent_run_id, span_name, attributes)

    @guarded
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_run(run_id, None)

    @guarded
    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_run(run_id, error)

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
        name = run_name(serialized, kwargs)
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
                to_json(inputs) if inputs is not None else input_str
            )
        self._start_span(run_id, parent_run_id, f"{_EXECUTE_TOOL} {name}", attributes)

    @guarded
    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if self.capture_content:
            state = self._runs.get(run_id)
            if state is not None and state.span is not None:
                result = getattr(output, "content", output)
                state.span.set_attribute(
                    gen_ai.GEN_AI_TOOL_CALL_RESULT,
                    result if isinstance(result, str) else to_json(result),
                )
        self._end_run(run_id, None)

    @guarded
    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_run(run_id, error)

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
        self._register(RunState(run_id, parent_run_id, None, self._parent_context(parent_run_id)))

    @guarded
    def on_retriever_end(self, documents: Sequence[Any], *, run_id: UUID, **kwargs: Any) -> None:
        self._end_run(run_id, None)

    @guarded
    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_run(run_id, error)

    @guarded
    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Keeps a trim's figures for the model call it prepared (see ``TRIM_EVENT``)."""
        if name != TRIM_EVENT:
            return
        state = self._runs.get(run_id)
        pending = PendingTrim.from_event(data)
        if state is not None and pending is not None:
            # A model call inside this run takes it; one after it is served by _finish.
            state.pending_trim = pending

    # -- internals -----------------------------------------------------------------------------

    def _parent_context(self, parent_run_id: UUID | None) -> Context:
        parent = self._runs.get(parent_run_id)
        # A run whose parent we do not trace (a root run, or a handler attached to the model
        # only) hangs under whatever span is current for the caller.
        return otel_context.get_current() if parent is None else parent.context

    def _start_span(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str,
        attributes: Mapping[str, AttributeValue],
    ) -> None:
        parent_context = self._parent_context(parent_run_id)
        span = self._tracer.start_span(
            name, context=parent_context, kind=SpanKind.INTERNAL, attributes=attributes
        )
        context = trace.set_span_in_context(span, parent_context)
        self._register(RunState(run_id, parent_run_id, span, context))

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
            self.failures.report("task watch", exc)

    def _end_evicted(self, state: RunState) -> None:
        try:
            self._finish(state, GeneratorExit())
        except Exception as exc:
            self.failures.report("eviction", exc)

    def _end_run(self, run_id: UUID, error: BaseException | None) -> None:
        state = self._runs.pop(run_id)
        if state is not None:
            self._finish(state, error)

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
                    self.failures.report("ending a child run", exc)
        if error is None:
            # A run that failed hands nothing on: its trimmed messages reached no model.
            self._runs.hand_on_trim(state)
        if state.task_watch is not None:
            task, watch = state.task_watch
            task.remove_done_callback(watch)
        if isinstance(state, ModelRunState):
            self._finish_model(state, error, response)
        elif state.span is not None:
            end_span(state.span, error)

    def _finish_model(
        self, state: ModelRunState, error: BaseException | None, response: LLMResult | None
    ) -> None:
        """Ends a model call's span and records it; the subclass's part."""
        raise NotImplementedError
