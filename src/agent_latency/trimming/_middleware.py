"""Trimming every model call of a ``langchain.agents.create_agent`` agent.

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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, cast

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langchain_core.runnables.config import ensure_config
from langchain_core.tools import BaseTool, StructuredTool
from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from agent_latency._caches import FirstTimes, LRUCache
from agent_latency._trace_link import TRIM_EVENT, find_run_context, find_trim_tracer
from agent_latency._validation import checked_bool
from agent_latency.config import Settings
from agent_latency.trimming._cache_key import (
    CACHE_KEY_SETTING,
    KeyedModels,
    builds_per_call,
    chat_model_of,
    checked_session_header,
    conversation_cache_key,
    gives_cache_key,
    takes_cache_key,
    with_session_header,
)
from agent_latency.trimming._from_settings import trimmer_from_settings
from agent_latency.trimming._hook import PreModelHook
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
        ModelRequest,
        ModelResponse,
    )
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

LEFT_OUT_KEY: Final = "agent_latency_left_out"
"""The ``response_metadata`` field of a model answer that says what its call left out: the ids
of the first and last message of each run of left-out messages (the recall tool reads it)."""

_STRATEGIES: Final = 16
"""How many structured-output strategies a middleware remembers what they add for."""
_NAMES: Final = 16
"""How many model names the warning of another name than the calibration's remembers."""

Reader = Callable[[list[BaseMessage], str | None, str], str]
"""Answers the recall tool from the state's messages, its call's id and the query."""


class TrimmingMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Trims the messages of each model call an agent makes; the agent's state is untouched.

    Use with ``langchain.agents.create_agent(model, tools, middleware=[TrimmingMiddleware(t)])``.
    Everything the request sends counts against the budget: its system message (never dropped
    while the trimmer keeps system messages), its tools and its structured-output schema. The
    stored conversation keeps every message: only what is sent to the model is trimmed. A trim
    that fails unexpectedly is logged and the request is sent untrimmed rather than failing the
    agent. Each trim names the model it is made for (``TrimResult.model``): its calibration's
    (``from_settings`` names the settings' model), else the agent's own, the first model the
    middleware trims a request for; the callback handler feeds the trimmer's calibration only the
    server counts of calls to it, not those of a fallback ``ModelFallbackMiddleware`` swaps in
    (nor those of another agent sharing the middleware, when the calibration names its model).

    With recall (the default), what a trim leaves out stays readable: the messages are trimmed to
    the budget less the elision marker's tokens, the marker is sent after the system message(s)
    when messages were dropped for the budget (at the head of the first user message where the
    counter's chat template takes one system message: Gemma's), and the ``recall`` tool (in
    :attr:`tools` from the first call on, so the tool block never changes; its definition
    counts against the budget) reads the left-out messages back from the state.

    Each call of a conversation also carries the same ``prompt_cache_key``, derived from the
    conversation's first messages, where the server takes one (by default OpenAI's own API), so
    that its calls reach the machines that hold their prefix; one the caller already gives (in
    the model settings, or the model's ``model_kwargs`` or ``extra_body``) is kept. The key goes
    on a per-call shallow copy of the request's model (your model is left as it is), so a model
    that a middleware listed after this one swaps in (``ModelFallbackMiddleware``) gets none:
    list this one after it, and each model gets the key where its own server takes it. Routers
    that hash a request header instead (vLLM production-stack's session router, SGLang's
    gateway, ...; sources in :mod:`agent_latency.trimming._cache_key`) get the same key in the
    header ``session_header`` names, sent through ``ChatOpenAI``'s ``extra_headers``: a SHA-256
    digest of the conversation's first messages, no text of them.

    Args:
        trimmer: The trimmer to apply.
        recall: Keep what is cut readable (see above). Default: on.
        cache_key: Send the per-conversation ``prompt_cache_key``: ``None`` (the default) where
            the model is a ``ChatOpenAI`` on OpenAI's API, ``True`` always (a gateway or server
            that takes it), ``False`` never.
        session_header: The request header to send the same per-conversation key in, e.g.
            ``"x-session-id"`` (the one your router's session affinity hashes); one the model
            settings' ``extra_headers`` already give is kept. Default: none.

    Raises:
        TypeError: When ``trimmer`` is not a :class:`PriorityTrimmer`, ``recall`` not a bool, or
            ``cache_key`` neither a bool nor ``None``.
        ValueError: When ``session_header`` is not a header name the client leaves to the
            caller.
    """

    def __init__(
        self,
        trimmer: PriorityTrimmer,
        *,
        recall: bool = True,
        cache_key: bool | None = None,
        session_header: str | None = None,
    ) -> None:
        if not isinstance(trimmer, PriorityTrimmer):
            raise TypeError(
                f"TrimmingMiddleware: trimmer must be a PriorityTrimmer, "
                f"got {type(trimmer).__name__}; e.g. TrimmingMiddleware(PriorityTrimmer(6000))."
            )
        checked_bool("TrimmingMiddleware", "recall", recall)
        if cache_key is not None:
            checked_bool("TrimmingMiddleware", "cache_key", cache_key)
        self.cache_key = cache_key
        self.session_header = checked_session_header("TrimmingMiddleware", session_header)
        self.trimmer = trimmer
        self.recalling: RecallingTrimmer | None = None
        self.tools: list[BaseTool] = []
        if recall:
            # The marker invites a call to the tool: a tool budget never leaves it out.
            pinned = [*trimmer.options.pinned_tools, TOOL_NAME]
            self.recalling = RecallingTrimmer(trimmer._with(pinned_tools=pinned))
            self.tools = [_recall_tool(self._read_back)]
        # Where the agent has no tool of ours (another tool took its name): the marker that
        # invites no call.
        self._plain: RecallingTrimmer | None = None
        # What each structured-output strategy adds, made once (the trimmer counts tools it knows
        # by identity), by the strategy's id, with the strategy.
        self._outputs = LRUCache(_STRATEGIES)
        self._keyed_models = KeyedModels()
        # Whether the agent's own model was seen, the first this middleware trims a request for
        # (create_agent hands it every call, and a ModelFallbackMiddleware listed before this one
        # tries it first), and its name: the trimmer's calibration learns from calls to it only.
        # A configurable model builds one from each call's config: named on each call.
        self._model_seen = False
        self._model_name: str | None = None
        self._named_per_call = False
        self._other_names = FirstTimes(_NAMES)  # the names warned of
        self._warned = FirstTimes(1)  # that the session header cannot be sent
        self._tools: Sequence[object] = ()  # the latest request's: read back from its trim

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        recall: bool = True,
        cache_key: bool | None = None,
        session_header: str | None = None,
        **options: Any,
    ) -> TrimmingMiddleware:
        """The middleware with the trimmer of ``settings.prompt.mode``.

        Args:
            settings: Loaded settings.
            recall: As for the constructor.
            cache_key: As for the constructor.
            session_header: As for the constructor.
            **options: Keyword options of the trimmer (see :func:`trimmer_from_settings`).
        """
        return cls(
            trimmer_from_settings(settings, **options),
            recall=recall,
            cache_key=cache_key,
            session_header=session_header,
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        """Sends the model a trimmed request and reports the trim to the run's handlers."""
        trimmed, result, runs = self._trim(request)
        if result is not None:
            try:
                dispatch_custom_event(TRIM_EVENT, result)
            except Exception:  # no parent run (called outside a graph) or a failing handler
                logger.debug("Reporting the trim event failed", exc_info=True)
        return _with_left_out(handler(trimmed), runs)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        """Sends the model a trimmed request and reports the trim to the run's handlers."""
        trimmed, result, runs = self._trim(request)
        if result is not None:
            try:
                await adispatch_custom_event(TRIM_EVENT, result)
            except Exception:  # no parent run (called outside a graph) or a failing handler
                logger.debug("Reporting the trim event failed", exc_info=True)
        return _with_left_out(await handler(trimmed), runs)

    def _read_back(self, messages: list[BaseMessage], call_id: str | None, query: str) -> str:
        """The recall tool's answer: what the model call that called it left out, as asked."""
        assert self.recalling is not None  # the tool exists only with recall
        calling = calling_message(messages, call_id)
        runs = None if calling is None else messages[calling].response_metadata.get(LEFT_OUT_KEY)
        before = messages[:calling]
        left_out = in_runs(before, runs) if isinstance(runs, list) else []
        return self.recalling.read(
            left_out, query, conversation=before, tools=self._tools, call_id=call_id
        )

    def _trim(
        self, request: ModelRequest[Any]
    ) -> tuple[ModelRequest[Any], TrimResult | None, list[list[str]]]:
        system = request.system_message
        messages = [system, *request.messages] if system is not None else list(request.messages)
        runs: list[list[str]] = []
        if not self._model_seen:
            self._named_per_call = builds_per_call(request.model)
            self._model_name = None if self._named_per_call else _model_name(request.model)
            self._model_seen = True
        name = _model_name(request.model) if self._named_per_call else self._model_name
        self._warn_of_another_name(name)
        request = self._keyed(request, messages)
        self._tools = request.tools
        try:
            output_tools, response_format, strict = self._structured_output(request.response_format)
            context, tracer = _current_run()
            options: dict[str, Any] = {
                "context": context,
                "tracer": tracer,
                "tools": request.tools,
                "response_format": response_format,
                "strict_tools": strict,
                "output_tools": output_tools,
            }
            model = name  # named on the trim, for the callback handler
            if self.recalling is not None:
                result = self._recalling(request.tools).trim(messages, model=model, **options)
                runs = left_out_runs(messages, result) if result.changed else []
            else:
                result = self.trimmer.trim(messages, **options)
                if result.model is None and model is not None:
                    result = dataclasses.replace(result, model=model)
        except Exception:
            logger.exception("Trimming failed; the model call is sent untrimmed")
            return request, None, []
        if result.dropped_tools:  # a tool budget left some tools out
            sent = {id(tool) for tool in result.tools or ()}
            request = request.override(tools=[t for t in request.tools if id(t) in sent])
        if not result.changed:
            return request, result, runs
        # The kept messages are the request's own (or same-typed shortened or marked copies of
        # them), and the recall marker.
        kept = cast("list[AnyMessage]", result.messages)
        if system is not None and kept and kept[0] is system:
            return request.override(messages=kept[1:]), result, runs
        return request.override(system_message=None, messages=kept), result, runs

    def _recalling(self, tools: Sequence[object]) -> RecallingTrimmer:
        """The recalling trimmer for a request with ``tools``: the one whose marker invites a
        call to ``recall`` where they hold our tool, else (an agent tool of that name of its own:
        ``create_agent`` keeps that one, not ours) one whose marker invites nothing, warned of
        once."""
        assert self.recalling is not None
        if any(tool is self.tools[0] for tool in tools):
            return self.recalling
        if self._plain is None:
            logger.warning(
                "The agent's tools hold no TrimmingMiddleware recall tool (another tool named "
                "%r took its place): the elision marker does not invite a call to it, and what "
                "a trim leaves out cannot be read back. Rename that tool, or build the "
                "middleware with recall=False.",
                TOOL_NAME,
            )
            self._plain = RecallingTrimmer(self.trimmer, offers_tool=False)
        return self._plain

    def _structured_output(self, strategy: object) -> tuple[list[Any], object | None, bool | None]:
        """:func:`_structured_output` of ``strategy``, made once per strategy."""
        if strategy is None:
            return [], None, None
        found: tuple[object, tuple[list[Any], object | None, bool | None]] | None
        found = self._outputs.get(id(strategy))
        if found is None or found[0] is not strategy:
            found = (strategy, _structured_output(strategy))
            self._outputs.put(id(strategy), found)
        return found[1]

    def _keyed(
        self, request: ModelRequest[Any], messages: Sequence[BaseMessage]
    ) -> ModelRequest[Any]:
        """The request with the conversation's key in ``prompt_cache_key`` and the session
        header, where they are sent: the key on a copy of the request's model (see
        :class:`KeyedModels`), the header in the model settings."""
        model, settings = request.model, request.model_settings
        as_field = not gives_cache_key(settings, model) and (
            self.cache_key or (self.cache_key is None and takes_cache_key(model))
        )
        if not as_field and self.session_header is None:
            return request
        key = conversation_cache_key(messages)
        if key is None:
            return request
        changes: dict[str, Any] = {}
        if as_field:
            keyed = self._keyed_models.keyed(model, key)
            if keyed is not None:
                changes["model"] = keyed
            else:  # a model with no model_kwargs: its call's keywords carry the key
                changes["model_settings"] = {**settings, CACHE_KEY_SETTING: key}
        if self.session_header is not None:
            settings = changes.get("model_settings", settings)
            headed = with_session_header(settings, model, self.session_header, key)
            if headed is not None:
                changes["model_settings"] = dict(headed)
            elif self._warned.first("session_header"):
                logger.warning(
                    "TrimmingMiddleware: the %s header is not sent: the agent's model has "
                    "fallbacks and its primary sends extra_headers of its own, which would reach "
                    "the fallbacks' servers with it. Give the primary those headers as "
                    "default_headers instead.",
                    self.session_header,
                )
        return request.override(**changes) if changes else request

    def _warn_of_another_name(self, name: str | None) -> None:
        """Warns once per name when the agent's model reports another name than the one its
        trimmer's calibration is for: the callback handler teaches a calibration only the counts
        of calls to its own model, so this agent's calls would teach it nothing, and nothing
        would say so (an alias the server serves, an Azure deployment, ``model=`` given to the
        chat model and not to the settings)."""
        calibration = self.trimmer.options.calibration
        named = None if calibration is None else calibration.model
        if named is None or name is None or name == named:
            return
        if self._other_names.first(name):
            logger.warning(
                "TrimmingMiddleware: the agent's model reports the name %r, its trimmer's "
                "calibration is for %r: the calibration learns nothing from these calls. "
                "Fix: name the same model in the settings (llm.model) and the chat model.",
                name[:100],
                named[:100],
            )


def recall_tool(hook: PreModelHook) -> BaseTool:
    """The ``recall`` tool of a pre-model hook, to give ``create_react_agent`` with the hook.

    ``hook = trimmer.as_pre_model_hook(prompt=PROMPT, tools=tools)``, then
    ``create_react_agent(model, [*tools, recall_tool(hook)], prompt=PROMPT, pre_model_hook=hook)``:
    the model can call it to read back what the hook cut (docs/trimming.md). Making it tells the
    hook that the agent has the tool, so that its elision marker invites the model to call it
    (without it the marker only says messages were left out): give the tool to the agent.

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
    hook.offer_tool()
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


def _structured_output(strategy: Any) -> tuple[list[Any], object | None, bool | None]:
    """The output tools, response format and tool strictness a request's structured output
    (its ``response_format``) adds.

    As ``create_agent`` binds them after every middleware: a ``ToolStrategy`` adds one tool per
    output schema; a ``ProviderStrategy`` sends the schema as ``response_format`` and the tools
    with ``strict: true``. An ``AutoStrategy`` (or a bare schema) picks one of the two by the
    model's profile; it is counted as tools, which costs about the same.
    """
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


def _model_name(model: object) -> str | None:
    """The model name a chat model's calls report to the callbacks (``ls_model_name``, which
    the handler reads as the call's model), looked for through bindings (``bind``,
    ``with_retry``); ``None`` when it reports none."""
    chat = chat_model_of(model)
    if chat is None:
        return None
    name = chat._get_ls_params().get("ls_model_name")
    return name if isinstance(name, str) and name else None


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
