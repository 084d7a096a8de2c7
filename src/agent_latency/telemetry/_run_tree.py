"""The run tree: spans for LangChain's agents, chains and tools, nested by ``run_id``.

:class:`RunTree` starts each span under its parent's, passed explicitly (a context attached in
one callback and detached in another breaks under asyncio), ends every run exactly once, its
open children first, and carries a reported trim to the model call it prepared.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final
from uuid import UUID

from langchain_core.outputs import LLMResult
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency._chat_format import escape_surrogates
from agent_latency._trace_link import PendingTrim
from agent_latency.telemetry._content import to_json
from agent_latency.telemetry._langchain import closed_event_stream, context_run, is_agent, run_name
from agent_latency.telemetry._log import FailureLog
from agent_latency.telemetry._run_state import (
    ModelRunState,
    RunRegistry,
    RunState,
    current_task,
    running_in,
)

_INVOKE_AGENT: Final = gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
_EXECUTE_TOOL: Final = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
_HIDDEN_TAG: Final = "langsmith:hidden"
_LANGGRAPH: Final = "langgraph.errors"

EndModelCall = Callable[[ModelRunState, BaseException | None, LLMResult | None], None]
"""Ends a model call's span and records the call: its state, its error, its result."""


def error_type(error: BaseException) -> str:
    """The exception's fully qualified type name, as the SDK's exception events record it."""
    cls = type(error)
    module = cls.__module__
    return cls.__qualname__ if module in (None, "builtins") else f"{module}.{cls.__qualname__}"


def _langgraph_signal(error: BaseException) -> str | None:
    """The name of the LangGraph control-flow signal ``error`` is (a ``GraphBubbleUp``: an
    ``interrupt()``, a ``Command(graph=Command.PARENT)`` hand-off), else ``None``; by name, as
    LangGraph is an optional extra."""
    classes = type(error).__mro__
    if not any(c.__name__ == "GraphBubbleUp" and c.__module__ == _LANGGRAPH for c in classes):
        return None
    return next(c.__name__ for c in classes if c.__module__ == _LANGGRAPH)


def outcome(error: BaseException | None) -> str:
    """How a run ended: ``ok``, ``abandoned`` (GeneratorExit: the consumer stopped reading),
    ``cancelled`` (asyncio's cancellation, or Ctrl-C in sync code, which asyncio turns into
    one), ``interrupted`` (a LangGraph ``interrupt()``, waiting for a human to resume it) or
    ``error``. A LangGraph hand-off to the parent graph (``ParentCommand``) is ``ok``: control
    flow, as an interrupt is, not a failure."""
    if error is None:
        return "ok"
    if isinstance(error, GeneratorExit):
        return "abandoned"
    if isinstance(error, asyncio.CancelledError | KeyboardInterrupt):
        return "cancelled"
    signal = _langgraph_signal(error)
    if signal is not None:
        return "ok" if signal == "ParentCommand" else "interrupted"
    return "error"


def is_failure(result: str) -> bool:
    """Whether an :func:`outcome` is a failure: one with ``error.type`` and status ERROR."""
    return result in ("error", "cancelled")


def end_run_span(span: Span, error: BaseException | None) -> None:
    """Sets a span's outcome (and error type and status on failure) and ends it."""
    result = outcome(error)
    span.set_attribute(semconv.OUTCOME, result)
    if error is not None and is_failure(result):
        kind = error_type(error)
        span.set_attribute(error_attributes.ERROR_TYPE, kind)
        # The type only: exception messages may quote prompts or credentials.
        span.set_status(Status(StatusCode.ERROR, kind))
    span.end()


class RunTree:
    """The open runs of one handler, as nested spans.

    Args:
        tracer: Where the spans of agents, chains and tools go.
        capture_content: Whether tool arguments and results go on the tool spans.
        max_open_runs: Most runs tracked at once (see :class:`RunRegistry`).
        failures: Where failures while ending runs are reported.
        end_model_call: Ends a model call's span and records it, when its run ends.
    """

    def __init__(
        self,
        *,
        tracer: trace.Tracer,
        capture_content: bool,
        max_open_runs: int,
        failures: FailureLog,
        end_model_call: EndModelCall,
    ) -> None:
        self._tracer = tracer
        self._capture_content = capture_content
        self._failures = failures
        self._end_model_call = end_model_call
        self._runs = RunRegistry(max_open_runs, self._end_evicted)

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, run_id: UUID | None) -> RunState | None:
        """The open run ``run_id``, or ``None``."""
        return self._runs.get(run_id)

    def enclosing_run(self, parent_run_id: UUID | None) -> UUID | None:
        """The open run a starting run belongs under: ``parent_run_id`` when it is open, else the
        run LangChain's context says the caller runs in, when it is open (LangChain reports no
        parent for a run given a config of its own, such as a model called in a tool with
        ``config={"callbacks": [handler]}``), else ``parent_run_id``."""
        if parent_run_id is not None and parent_run_id in self._runs:
            return parent_run_id
        enclosing = context_run()
        return enclosing if enclosing is not None and enclosing in self._runs else parent_run_id

    def is_repeated_start(self, run_id: UUID, parent_run_id: UUID | None) -> bool:
        """Whether a run's start is delivered again (to a handler listed twice): it is open
        under the same parent and nothing has happened in it since."""
        state = self._runs.get(run_id)
        if state is None or state.parent_run_id != parent_run_id or state.children:
            return False
        return not isinstance(state, ModelRunState) or state.last_delivery is None

    def parent_context(self, parent_run_id: UUID | None) -> Context:
        """The context a run under ``parent_run_id`` starts in."""
        parent = self._runs.get(parent_run_id)
        # A run whose parent we do not trace (a root run, or a handler attached to the model
        # only) hangs under whatever span is current for the caller.
        return otel_context.get_current() if parent is None else parent.context

    # -- starting runs -------------------------------------------------------------------------

    def start_chain(
        self,
        serialized: Mapping[str, Any] | None,
        run_id: UUID,
        parent_run_id: UUID | None,
        tags: Sequence[str] | None,
        metadata: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
    ) -> None:
        """Opens a chain run: an ``invoke_agent`` span for an agent, else a ``chain`` span, and
        no span for a run tagged ``langsmith:hidden``."""
        if tags and _HIDDEN_TAG in tags:
            self.start_untraced(run_id, parent_run_id)
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

    def start_tool(
        self,
        serialized: Mapping[str, Any] | None,
        input_str: str,
        run_id: UUID,
        parent_run_id: UUID | None,
        inputs: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
    ) -> None:
        """Opens a tool run's ``execute_tool`` span."""
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
        if self._capture_content:
            attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = (
                to_json(inputs) if inputs is not None else escape_surrogates(input_str)
            )
        self._start_span(run_id, parent_run_id, f"{_EXECUTE_TOOL} {name}", attributes)

    def start_untraced(
        self, run_id: UUID, parent_run_id: UUID | None, *, ends_with_task: bool = False
    ) -> None:
        """Opens a run without a span, so that the runs under it still find their parent."""
        state = RunState(run_id, parent_run_id, None, self.parent_context(parent_run_id))
        self.add(state, ends_with_task=ends_with_task)

    def add(self, state: RunState, *, ends_with_task: bool = False) -> None:
        """Registers an open run (a model call's, or one started here).

        Args:
            state: The run.
            ends_with_task: Whether the run, when a root in asyncio, ends at the latest with the
                task it starts in: a chat-model call or a retriever, whose cancellation
                LangChain does not report. Chains, tools and completion models report every end
                and may start in a short-lived ``gather`` task.
        """
        task = state.task = current_task()
        if self._runs.add(state) is not None or task is None:
            return  # ended by its parent at the latest, or no task to end with
        if ends_with_task:
            watch = functools.partial(self._on_task_done, state.run_id)
            task.add_done_callback(watch)
            state.task_watch = watch

    # -- while runs are open -------------------------------------------------------------------

    def chunk_arrived(self, run_id: UUID) -> RunState | None:
        """The open run ``run_id`` a chunk arrived for (``None`` when none is open), noting the
        task that reads it while a watched root run (a model call) does not know it yet.

        When the task the run started in reads the chunk itself, it iterates a stream, whose
        every end LangChain reports (cancellation and walking away included), so that task's end
        no longer ends the run: later chunks may be read by other tasks (a per-chunk
        ``asyncio.wait_for``, ``asyncio.create_task(anext(stream))``). Chunks read by another
        task (an ``ainvoke``'s ``gather`` task, the producer of a ``version="v3"`` stream) name
        the task the run lives on in when the one it started in ends first.
        """
        state = self._runs.get(run_id)
        if state is None or state.reader is not None:
            return state
        watch = state.task_watch
        if watch is None or state.task is None:
            return state
        task = current_task()
        if task is state.task:
            state.task_watch = None
            task.remove_done_callback(watch)
        elif task is not None:
            state.reader = task
        return state

    def record_tool_result(self, run_id: UUID, output: Any) -> None:
        """Puts a tool's result on its span, when content is captured."""
        if not self._capture_content:
            return
        state = self._runs.get(run_id)
        if state is not None and state.span is not None:
            result = getattr(output, "content", output)
            state.span.set_attribute(
                gen_ai.GEN_AI_TOOL_CALL_RESULT,
                escape_surrogates(result) if isinstance(result, str) else to_json(result),
            )

    def keep_trim(self, run_id: UUID, data: object) -> None:
        """Keeps a reported trim's figures on its run, for the model call it prepared."""
        state = self._runs.get(run_id)
        pending = PendingTrim.from_event(data)
        if state is not None and pending is not None:
            # A model call inside this run takes it; one after it gets it when the run ends.
            state.pending_trim = pending

    def take_trim(self, parent_run_id: UUID | None) -> PendingTrim | None:
        """Hands a model call starting under ``parent_run_id`` the trim waiting nearest to it."""
        return self._runs.take_trim(parent_run_id)

    # -- ending runs ---------------------------------------------------------------------------

    def end(
        self, run_id: UUID, error: BaseException | None, response: LLMResult | None = None
    ) -> None:
        """Ends the open run ``run_id`` (nothing when it has ended already)."""
        state = self._runs.pop(run_id)
        if state is None:
            return
        walked_away = (
            self._stream_closed(state)
            if isinstance(error, asyncio.CancelledError)
            else error is None and bool(state.children) and self._left_streaming(state)
        )
        if walked_away:
            error = GeneratorExit()  # recorded like walking away from ``astream``
        self._finish(state, error, response)

    def _left_streaming(self, state: RunState) -> bool:
        """Whether a run reported ended left a model call under it streaming, read where the
        run ends (the same thread and task): its consumer stopped reading a sync ``stream``,
        which LangChain reports to the chains as a normal end (``astream`` reports it as
        ``GeneratorExit``); a run that finishes ends its model calls first. A stream read
        elsewhere (an ``astream_events`` of its own, which a chain may leave) is no sign."""
        pending, here = [state], running_in()
        while pending:
            for child_id in pending.pop().children:
                child = self._runs.get(child_id)
                if isinstance(child, ModelRunState) and child.streamed and child.read_in == here:
                    return True
                if child is not None:
                    pending.append(child)
        return False

    def _stream_closed(self, state: RunState) -> bool:
        """Whether a run, or one it runs in, started in an ``astream_events`` task its consumer
        walked away from (the stream of a whole run, or one a run reads inside another)."""
        run: RunState | None = state
        while run is not None:
            if run.task is not None and closed_event_stream(run.task):
                return True
            run = self._runs.get(run.parent_run_id)
        return False

    def _on_task_done(self, run_id: UUID, task: asyncio.Task[object]) -> None:
        try:
            state = self._runs.get(run_id)
            reader = None if state is None else state.reader
            if (
                state is not None
                and state.task_watch is not None
                and task is state.task
                and not task.cancelled()
                and reader is not None
                and not reader.done()
            ):
                # Its chunks are read on in another task: the run ends with that one at the
                # latest (a stream iterated a chunk per task, whose producer outlives each).
                reader.add_done_callback(state.task_watch)
                return
            error = asyncio.CancelledError() if task.cancelled() else GeneratorExit()
            self.end(run_id, error)
        except Exception as exc:
            self._failures.report("task watch", exc)

    def _end_evicted(self, state: RunState) -> None:
        try:
            self._finish(state, GeneratorExit(), None)
        except Exception as exc:
            self._failures.report("eviction", exc)

    def _finish(
        self, state: RunState, error: BaseException | None, response: LLMResult | None
    ) -> None:
        """Ends a run popped from the registry: its open children first, then its span."""
        for child_id in tuple(state.children):
            child = self._runs.pop(child_id)
            if child is not None:
                # Outlived its parent: cancelled with it, else left behind (a parent that failed
                # for another reason, a filter reading its stream, is no failure of the child).
                left = error if outcome(error) == "cancelled" else GeneratorExit()
                try:
                    self._finish(child, left, None)
                except Exception as exc:  # one child's failure must not leave the parent open
                    self._failures.report("ending a child run", exc)
        if error is None:
            # A run that failed hands nothing on: its trimmed messages reached no model.
            self._runs.hand_on_trim(state)
        if state.task_watch is not None:
            for task in (state.task, state.reader):
                if task is not None:
                    task.remove_done_callback(state.task_watch)
        if isinstance(state, ModelRunState):
            self._end_model_call(state, error, response)
        elif state.span is not None:
            end_run_span(state.span, error)

    def _start_span(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str,
        attributes: Mapping[str, AttributeValue],
    ) -> None:
        parent_context = self.parent_context(parent_run_id)
        span = self._tracer.start_span(
            name, context=parent_context, kind=SpanKind.INTERNAL, attributes=attributes
        )
        context = trace.set_span_in_context(span, parent_context)
        self.add(RunState(run_id, parent_run_id, span, context))
