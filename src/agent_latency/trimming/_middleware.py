"""Trimming every model call of a ``langchain.agents.create_agent`` agent.

This module needs the optional ``agents`` extra (``langchain``); ``agent_latency`` imports it
only when ``TrimmingMiddleware`` is first used, so the core package works without it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables.config import ensure_config
from opentelemetry.context import Context

from agent_latency._trace_link import TRIM_EVENT, find_run_context
from agent_latency.trimming._cost_aware import CostAwareTrimmer
from agent_latency.trimming._trimmer import PriorityTrimmer, TrimResult

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
    from langchain.agents.structured_output import (
        AutoStrategy,
        OutputToolBinding,
        ProviderStrategy,
        ToolStrategy,
    )
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "TrimmingMiddleware needs langchain's agents: pip install 'agent-latency[agents]'."
    ) from exc

logger = logging.getLogger("agent_latency.trimming")

ModelCallResult = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]


class TrimmingMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Trims the messages of each model call an agent makes; the agent's state is untouched.

    Use with ``langchain.agents.create_agent(model, tools, middleware=[TrimmingMiddleware(t)])``.
    Everything the request sends counts against the budget: its system message (never dropped
    while the trimmer keeps system messages), its tools and its structured-output schema. The
    stored conversation keeps every message: only what is sent to the model is trimmed. A trim
    that fails unexpectedly is logged and the request is sent untrimmed rather than failing the
    agent.

    Args:
        trimmer: The trimmer to apply.

    Raises:
        TypeError: When ``trimmer`` is neither a :class:`PriorityTrimmer` nor a
            :class:`CostAwareTrimmer`.
    """

    def __init__(self, trimmer: PriorityTrimmer | CostAwareTrimmer) -> None:
        if not isinstance(trimmer, PriorityTrimmer | CostAwareTrimmer):
            raise TypeError(
                f"TrimmingMiddleware: trimmer must be a PriorityTrimmer or a CostAwareTrimmer, "
                f"got {type(trimmer).__name__}; e.g. TrimmingMiddleware(PriorityTrimmer(6000))."
            )
        self.trimmer = trimmer

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult:
        """Sends the model a trimmed request and reports the trim to the run's handlers."""
        trimmed, result = self._trim(request)
        if result is not None:
            try:
                dispatch_custom_event(TRIM_EVENT, result)
            except Exception:  # no parent run (called outside a graph) or a failing handler
                logger.debug("Reporting the trim event failed", exc_info=True)
        return handler(trimmed)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult:
        """Sends the model a trimmed request and reports the trim to the run's handlers."""
        trimmed, result = self._trim(request)
        if result is not None:
            try:
                await adispatch_custom_event(TRIM_EVENT, result)
            except Exception:  # no parent run (called outside a graph) or a failing handler
                logger.debug("Reporting the trim event failed", exc_info=True)
        return await handler(trimmed)

    def _trim(self, request: ModelRequest[Any]) -> tuple[ModelRequest[Any], TrimResult | None]:
        system = request.system_message
        messages = [system, *request.messages] if system is not None else list(request.messages)
        try:
            output_tools, response_format, strict = _structured_output(request)
            result = self.trimmer.trim(
                messages,
                context=_current_run_context(),
                tools=request.tools,
                response_format=response_format,
                strict_tools=strict,
                output_tools=output_tools,
            )
        except Exception:
            logger.exception("Trimming failed; the model call is sent untrimmed")
            return request, None
        if result.dropped_tools:  # a tool budget left some tools out
            sent = {id(tool) for tool in result.tools or ()}
            request = request.override(tools=[t for t in request.tools if id(t) in sent])
        if not result.changed:
            return request, result
        # The kept messages are the request's own (or same-typed shortened copies of them).
        kept = cast("list[AnyMessage]", result.messages)
        if system is not None and kept and kept[0] is system:
            return request.override(messages=kept[1:]), result
        return request.override(system_message=None, messages=kept), result


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


def _current_run_context() -> Context | None:
    """Returns the OpenTelemetry context of the LangChain run this call happens in, if traced."""
    callbacks = ensure_config().get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        return find_run_context(callbacks.handlers, callbacks.parent_run_id)
    return None
