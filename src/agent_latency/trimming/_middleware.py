"""Trimming every model call of a ``langchain.agents.create_agent`` agent.

With a :class:`CostAwareTrimmer`, the middleware keeps the conversation's record (its latest
call as sent, and the server's report of its cache) in the agent's state, under
:data:`STATE_KEY`: the user's checkpointer (``InMemorySaver``, Postgres, Redis) stores it with
the conversation, so a restarted process or another replica in front of the same model server
decides as the first one would have, with no key to pass. Where the state has no record yet
(the thread's first call, or no checkpointer), the run's ``thread_id`` keys it in memory. The
server's report comes from the callback handler, or else from the model's answer itself.

By default the middleware keeps what it cuts readable (docs/trimming.md, "Nothing lost for
good"): it sends an elision marker where history was cut and registers the ``recall`` tool,
which reads the left-out messages back from the agent's state. Each model answer carries, in
its ``response_metadata`` under :data:`LEFT_OUT_KEY`, the ids that bound what its call left out
(a few ids, not the messages), so the tool finds them in the state whichever replica runs it.

This module needs the optional ``agents`` extra (``langchain``); ``agent_latency`` imports it
only when ``TrimmingMiddleware`` is first used, so the core package works without it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Final, NotRequired, cast

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langchain_core.runnables.config import ensure_config
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.types import Command
from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from agent_latency._trace_link import TRIM_EVENT, find_run_context, find_trim_tracer
from agent_latency._validation import checked_bool
from agent_latency._wire import usage_of_message
from agent_latency.config import Settings
from agent_latency.trimming._cost_aware import CostAwareTrimmer, thread_id_of
from agent_latency.trimming._from_settings import trimmer_from_settings
from agent_latency.trimming._hook import NO_RECALL, PreModelHook
from agent_latency.trimming._latest_call import LatestCall
from agent_latency.trimming._recall import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    RecallingTrimmer,
    calling_message,
    in_runs,
    left_out_runs,
)
from agent_latency.trimming._trimmer import PriorityTrimmer, TrimResult

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
    from langchain.agents.middleware.types import PrivateStateAttr
    from langchain.agents.structured_output import (
        AutoStrategy,
        OutputToolBinding,
        ProviderStrategy,
        ToolStrategy,
    )
    from langchain.tools import ToolRuntime
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "TrimmingMiddleware needs langchain's agents: pip install 'agent-latency[agents]'."
    ) from exc

logger = logging.getLogger("agent_latency.trimming")

ModelCallResult = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]

STATE_KEY: Final = "agent_latency_latest_call"
"""The agent state's field holding a cost-aware conversation's record
(:meth:`~agent_latency.trimming._latest_call.LatestCall.to_state`: a plain JSON value)."""

LEFT_OUT_KEY: Final = "agent_latency_left_out"
"""The ``response_metadata`` field of a model answer that says what its call left out: the ids
of the first and last message of each run of left-out messages (the recall tool reads it)."""

Reader = Callable[[list[BaseMessage], str | None, str], str]
"""Answers the recall tool from the state's messages, its call's id and the query."""


class CostAwareState(AgentState[Any]):
    """The agent state with the cost-aware record, which only this middleware reads and writes."""

    agent_latency_latest_call: NotRequired[Annotated[dict[str, Any] | None, PrivateStateAttr]]


class TrimmingMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Trims the messages of each model call an agent makes; the agent's state is untouched.

    Use with ``langchain.agents.create_agent(model, tools, middleware=[TrimmingMiddleware(t)])``.
    Everything the request sends counts against the budget: its system message (never dropped
    while the trimmer keeps system messages), its tools and its structured-output schema. The
    stored conversation keeps every message: only what is sent to the model is trimmed. With a
    :class:`CostAwareTrimmer` the state also carries the conversation's record
    (:data:`STATE_KEY`, see the module docstring). A trim that fails unexpectedly is logged and
    the request is sent untrimmed rather than failing the agent.

    With recall (the default with a :class:`PriorityTrimmer`), what a trim leaves out stays
    readable: the messages are trimmed to the budget less the elision marker's tokens, the
    marker is sent after the system message(s) when messages were dropped, and the ``recall``
    tool (in :attr:`tools` from the first call on, so the tool block never changes; its
    definition counts against the budget) reads the left-out messages back from the state.

    Args:
        trimmer: The trimmer to apply.
        recall: Keep what is cut readable (see above). Default: on with a
            :class:`PriorityTrimmer`, off with a :class:`CostAwareTrimmer` (which has none).

    Raises:
        TypeError: When ``trimmer`` is neither a :class:`PriorityTrimmer` nor a
            :class:`CostAwareTrimmer`.
        ValueError: When ``recall`` is not a bool, or is ``True`` with a
            :class:`CostAwareTrimmer`.
    """

    def __init__(
        self, trimmer: PriorityTrimmer | CostAwareTrimmer, *, recall: bool | None = None
    ) -> None:
        if not isinstance(trimmer, PriorityTrimmer | CostAwareTrimmer):
            raise TypeError(
                f"TrimmingMiddleware: trimmer must be a PriorityTrimmer or a CostAwareTrimmer, "
                f"got {type(trimmer).__name__}; e.g. TrimmingMiddleware(PriorityTrimmer(6000))."
            )
        if recall is not None:
            checked_bool("TrimmingMiddleware", "recall", recall)
        if recall and isinstance(trimmer, CostAwareTrimmer):
            raise ValueError(
                "TrimmingMiddleware: recall needs a PriorityTrimmer, not a CostAwareTrimmer; "
                "drop recall=True or pass a PriorityTrimmer."
            )
        self.trimmer = trimmer
        self.recalling: RecallingTrimmer | None = None
        self.tools: list[BaseTool] = []
        if isinstance(trimmer, CostAwareTrimmer):
            self.state_schema = CostAwareState
        elif recall is not False:
            self.recalling = RecallingTrimmer(trimmer)
            self.tools = [_recall_tool(self._read_back)]

    @classmethod
    def from_settings(cls, settings: Settings, **options: Any) -> TrimmingMiddleware:
        """The middleware with the trimmer of ``settings.prompt.mode``.

        Args:
            settings: Loaded settings.
            **options: Keyword options of the trimmer (see :func:`trimmer_from_settings`).
        """
        return cls(trimmer_from_settings(settings, **options))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult:
        """Sends the model a trimmed request and reports the trim to the run's handlers."""
        trimmed, result, record, runs = self._trim(request)
        if result is not None:
            try:
                dispatch_custom_event(TRIM_EVENT, result)
            except Exception:  # no parent run (called outside a graph) or a failing handler
                logger.debug("Reporting the trim event failed", exc_info=True)
        return _with_record(_with_left_out(handler(trimmed), runs), record)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult:
        """Sends the model a trimmed request and reports the trim to the run's handlers."""
        trimmed, result, record, runs = self._trim(request)
        if result is not None:
            try:
                await adispatch_custom_event(TRIM_EVENT, result)
            except Exception:  # no parent run (called outside a graph) or a failing handler
                logger.debug("Reporting the trim event failed", exc_info=True)
        return _with_record(_with_left_out(await handler(trimmed), runs), record)

    def _read_back(self, messages: list[BaseMessage], call_id: str | None, query: str) -> str:
        """The recall tool's answer: what the model call that called it left out, as asked."""
        assert self.recalling is not None  # the tool exists only with recall
        calling = calling_message(messages, call_id)
        runs = None if calling is None else messages[calling].response_metadata.get(LEFT_OUT_KEY)
        left_out = in_runs(messages[:calling], runs) if isinstance(runs, list) else []
        return self.recalling.read(left_out, query)

    def _trim(
        self, request: ModelRequest[Any]
    ) -> tuple[ModelRequest[Any], TrimResult | None, LatestCall | None, list[list[str]]]:
        system = request.system_message
        messages = [system, *request.messages] if system is not None else list(request.messages)
        record = None
        runs: list[list[str]] = []
        try:
            output_tools, response_format, strict = _structured_output(request)
            context, tracer = _current_run()
            options: dict[str, Any] = {
                "context": context,
                "tracer": tracer,
                "tools": request.tools,
                "response_format": response_format,
                "strict_tools": strict,
                "output_tools": output_tools,
            }
            if isinstance(self.trimmer, CostAwareTrimmer):
                state = request.state if isinstance(request.state, Mapping) else {}
                choice = self.trimmer.trim_after(
                    messages,
                    LatestCall.from_state(state.get(STATE_KEY)),
                    key=thread_id_of(ensure_config()),
                    **options,
                )
                result, record = choice.result, choice.record
            elif self.recalling is not None:
                result = self.recalling.trim(messages, **options)
                runs = left_out_runs(messages, result) if result.changed else []
            else:
                result = self.trimmer.trim(messages, **options)
        except Exception:
            logger.exception("Trimming failed; the model call is sent untrimmed")
            return request, None, None, []
        if result.dropped_tools:  # a tool budget left some tools out
            sent = {id(tool) for tool in result.tools or ()}
            request = request.override(tools=[t for t in request.tools if id(t) in sent])
        if not result.changed:
            return request, result, record, runs
        # The kept messages are the request's own (or same-typed shortened copies of them),
        # and the recall marker.
        kept = cast("list[AnyMessage]", result.messages)
        if system is not None and kept and kept[0] is system:
            return request.override(messages=kept[1:]), result, record, runs
        return request.override(system_message=None, messages=kept), result, record, runs


def recall_tool(hook: PreModelHook) -> BaseTool:
    """The ``recall`` tool of a pre-model hook, to give ``create_react_agent`` with the hook.

    ``hook = trimmer.as_pre_model_hook(prompt=PROMPT, tools=tools)``, then
    ``create_react_agent(model, [*tools, recall_tool(hook)], prompt=PROMPT, pre_model_hook=hook)``:
    the model can call it to read back what the hook cut (docs/trimming.md).

    Args:
        hook: A hook from ``PriorityTrimmer.as_pre_model_hook`` (with ``recall``, the default).

    Raises:
        TypeError: When ``hook`` is not such a hook.
        ValueError: When it was made with ``recall=False``.
    """
    if not isinstance(hook, PreModelHook):
        raise TypeError(
            f"recall_tool: hook must come from trimmer.as_pre_model_hook(), got "
            f"{type(hook).__name__}."
        )
    if hook.recalling is None:
        raise ValueError(NO_RECALL)
    return _recall_tool(hook.read_back)


def _recall_tool(read: Reader) -> BaseTool:
    """The ``recall`` tool (:data:`~agent_latency.trimming._recall.TOOL_DEFINITION`).

    Args:
        read: Answers from the agent state's messages, the tool call's id and the words or
            message ids asked for.
    """

    def recall(query: str, runtime: ToolRuntime) -> str:
        return read(list(runtime.state["messages"]), runtime.tool_call_id, query)

    return StructuredTool.from_function(recall, name=TOOL_NAME, description=TOOL_DESCRIPTION)


def _structured_output(
    request: ModelRequest[Any],
) -> tuple[list[Any], object | None, bool | None]:
    """The output tools, response format and tool strictness structured output adds.

    As ``create_agent`` binds them after every middleware: a ``ToolStrategy`` adds one tool per
    output schema; a ``ProviderStrategy`` sends the schema as ``response_format`` and the tools
    with ``strict: true``. An ``AutoStrategy`` (or a bare schema) picks one of the two by the
    model's profile; it is counted as tools, which costs about the same.
    """
    strategy = request.response_format
    if strategy is None:
        return [], None, None
    if isinstance(strategy, ProviderStrategy):
        return [], strategy.to_model_kwargs()["response_format"], True
    if isinstance(strategy, AutoStrategy):
        strategy = ToolStrategy(strategy.schema)
    elif not isinstance(strategy, ToolStrategy):
        strategy = ToolStrategy(strategy)
    return [OutputToolBinding.from_schema_spec(s).tool for s in strategy.schema_specs], None, None


def _with_left_out(response: ModelResponse[Any], runs: list[list[str]]) -> ModelResponse[Any]:
    """The response, its answers saying what their call left out (:data:`LEFT_OUT_KEY`)."""
    if not runs or not isinstance(response, ModelResponse):
        return response
    answers = [
        m.model_copy(update={"response_metadata": {**m.response_metadata, LEFT_OUT_KEY: runs}})
        if isinstance(m, AIMessage)
        else m
        for m in response.result
    ]
    return dataclasses.replace(response, result=answers)


def _with_record(response: ModelResponse[Any], record: LatestCall | None) -> ModelCallResult:
    """The model's response, with the cost-aware record of its call as an update of the state.

    The server's cached tokens come from the callback handler (``on_usage``) or else from the
    answer's own usage.
    """
    if record is None:
        return response
    try:
        if record.reported_cached is None:
            answers = [m for m in response.result if isinstance(m, AIMessage)]
            if answers:
                usage = usage_of_message(answers[-1])
                record.report_usage(usage.prompt_tokens, usage.cached_tokens, None)
        update: Command[Any] = Command(update={STATE_KEY: record.to_state()})
    except Exception:
        logger.warning("agent-latency: keeping the cost-aware record failed", exc_info=True)
        return response
    return ExtendedModelResponse(model_response=response, command=update)


def _current_run() -> tuple[Context | None, Tracer | None]:
    """The OpenTelemetry context of the LangChain run this call happens in, if traced, and the
    tracer its handler records trims with, if it offers one."""
    callbacks = ensure_config().get("callbacks")
    if not isinstance(callbacks, BaseCallbackManager):
        return None, None
    context = find_run_context(callbacks.handlers, callbacks.parent_run_id)
    try:
        return context, find_trim_tracer(callbacks.handlers)
    except Exception:  # a handler's failure must not fail the trim
        logger.warning("agent-latency: a handler's tracer_for_trims() failed", exc_info=True)
        return context, None
