"""The priority trimmer: fits every model call's whole request into a prompt token budget.

The budget covers everything that is sent: the messages with their framing, the tool
definitions, the response format schema and the per-request framing. What no trim can remove
(tools, response format, framing and the must-keep messages) is the *fixed part*; the messages
beyond it are kept by priority. How a trim decides is in ``_plan`` and, with a worked example,
in docs/trimming.md: units (a tool call with its results) are kept or dropped whole, orphan tool
results and unanswered tool calls are left out, a late tool result is sent right after its call,
input that fits is otherwise returned unchanged, else large tool results are shortened and units
dropped lowest priority first, and when the fixed part alone does not fit
the result says ``over_budget`` and what the fixed part is made of. A trim never raises for lack
of budget.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from collections.abc import Sequence
from typing import Any, Unpack, cast

from langchain_core.messages import BaseMessage, SystemMessage
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from agent_latency import semconv
from agent_latency._caches import LRUCache
from agent_latency._user_input import ConvertedDicts, coerce_messages
from agent_latency._validation import checked_bool
from agent_latency.config import TRIM_MODES, Settings, removed_value
from agent_latency.tokens import TokenCounter, TokenCounting, calibration_for
from agent_latency.trimming._cache_first import cache_first_cut
from agent_latency.trimming._compaction import Compactor
from agent_latency.trimming._hook import PreModelHook, system_prompt
from agent_latency.trimming._options import (
    DEFAULTS,
    TrimmerOptions,
    TrimOptions,
    given_options,
    settings_options,
)
from agent_latency.trimming._plan import (
    Plan,
    cap_tool_results,
    classify,
    compact_history,
    drop_by_priority,
    mark_kept,
    question_retention,
    shorten_must_keep,
)
from agent_latency.trimming._recall import TOOL_DEFINITION
from agent_latency.trimming._relevance import Occurrences, TermCache, TermIndex
from agent_latency.trimming._request import (
    ExtrasCounter,
    RequestExtras,
    extras,
    extras_of_model,
    returning_directly,
)
from agent_latency.trimming._result import TrimResult, warn_if_over_budget
from agent_latency.trimming._rounds import AnalysisMemo
from agent_latency.trimming._shortening import MessageShortener
from agent_latency.trimming._span import TrimRunnable, end_trim_span, start_trim_span
from agent_latency.trimming._tools import select_tools

__all__ = ["PriorityTrimmer", "TrimResult"]

logger = logging.getLogger("agent_latency.trimming")

_UNSET: Any = object()
"""Marks ``trim(tools=...)`` / ``response_format`` not given: the trimmer's own apply."""
_TOOL_SETS = 4
"""The sets of ``return_direct`` tools whose conversations a trimmer remembers apart."""


class PriorityTrimmer(TrimRunnable):
    """Fits a model call's whole request into a prompt token budget by dropping what matters least.

    A LangChain ``Runnable``: ``prompt | trimmer | model`` works, as do ``invoke``, ``ainvoke``,
    ``batch`` and ``stream``. Each trim is an OpenTelemetry span named ``agent_latency.trim``;
    inside a LangChain run the span joins the run's trace and the :class:`TrimResult` is reported
    as the custom event ``agent_latency.trim`` for the callback handler. A failing tracer never
    fails a trim.

    Args:
        budget: The most prompt tokens to send, tools and framing included.
        **options: The keyword options (:class:`TrimmerOptions`, the table in
            docs/trimming.md); the trimmer keeps them as :attr:`options`.

    Raises:
        TypeError: For an option the trimmer does not have.
        ValueError: When an option is invalid; the message names it and the accepted values.
    """

    options: TrimOptions
    """The trimmer's checked options (``token_counter`` set)."""

    def __init__(self, budget: int = DEFAULTS.budget, **options: Unpack[TrimmerOptions]) -> None:
        self._build(given_options(budget, options))

    def _build(self, options: TrimOptions, *, cut_budget: int | None = None) -> None:
        """Sets the trimmer up from checked options (a new counter when they name none).

        ``cut_budget`` is the budget cache-first cuts are drawn on (default: ``options.budget``):
        a trimmer that trims to less than the budget it stands for (the recall marker's reserve)
        cuts where the whole budget's trimmer would, and leaves the over-budget warning to the
        trimmer that wraps it, which warns of the request it sends against the whole budget (the
        one the user set).
        """
        if options.token_counter is None:
            options = dataclasses.replace(options, token_counter=TokenCounter())
        self.options = options
        self._cut_budget = options.budget if cut_budget is None else cut_budget
        self._warns = cut_budget is None
        counter = self.token_counter
        self.term_cache = TermCache()
        self._term_index = TermIndex(self.term_cache)
        self._shortener = MessageShortener(counter)
        self._analyses = AnalysisMemo(counter)
        # Per set of return_direct tools' names, for the agents that have some.
        self._direct_analyses = LRUCache(_TOOL_SETS)
        self._converted = ConvertedDicts()
        # Whether its tools are bound to a model that sends them all (for_model, a hook's): a
        # tool budget cannot choose them then.
        self._tools_bound = False
        self._warned_of_tools = False  # that tool_budget is not used (_warn_of_tools_sent_whole)
        self.compactor = Compactor(counter)
        self._extras_counter = ExtrasCounter(counter)
        self._extras = extras(options.tools, options.response_format)
        self._extras_counter.count(self._extras)  # a tool that cannot be converted fails here
        self._tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE,
            tracer_provider=options.tracer_provider,
            schema_url=semconv.SCHEMA_URL,
        )

    @classmethod
    def _from_options(
        cls, options: TrimOptions, *, cut_budget: int | None = None
    ) -> PriorityTrimmer:
        """Returns a trimmer with ``options`` (those of another trimmer, changed or not)."""
        trimmer = cls.__new__(cls)
        trimmer._build(options, cut_budget=cut_budget)
        return trimmer

    @property
    def token_counter(self) -> TokenCounting:
        """The counter the trimmer counts with (``options.token_counter``, never ``None``)."""
        return cast(TokenCounting, self.options.token_counter)

    @classmethod
    def from_settings(cls, settings: Settings, **options: Any) -> PriorityTrimmer:
        """Builds a trimmer from ``settings.prompt`` that counts like ``settings.llm``'s server.

        The token counter is the model's (``TokenCounter.for_model`` with ``llm.model`` and
        ``llm.tokenizer``). The trimmer shares the process-wide calibration of the configured
        endpoint and model, so with ``configure_telemetry(settings).handler()`` attached to the
        run, the server's own prompt token counts correct the budget from the next call on.

        Args:
            settings: Loaded settings; the budget is ``settings.prompt.token_budget`` (the output
                reserve is separate and already checked against the context window); cuts are
                prefix-stable unless ``prompt.mode`` is ``"moving_cut"``.
            **options: Keyword options of :class:`PriorityTrimmer` that win over the settings
                (e.g. ``budget``, ``token_counter``, ``calibration``, ``tracer_provider``).

        Raises:
            ValueError: When ``prompt.mode`` is no mode (settings built in code are not checked
                as loaded ones are): a trimmer of another mode must not stand in for it.
        """
        prompt, llm = settings.prompt, settings.llm
        if prompt.mode not in TRIM_MODES:
            removal = removed_value("prompt.mode", prompt.mode, "prompt.mode")
            raise ValueError(
                f"PriorityTrimmer.from_settings: prompt.mode {removal}"
                if removal is not None
                else f"PriorityTrimmer.from_settings: prompt.mode {prompt.mode!r} is no mode "
                "(llm.prompt.mode in config.toml or promptTrimmer.mode in settings.json). "
                f"Fix: use one of {', '.join(TRIM_MODES)}."
            )
        from_settings = settings_options(prompt)
        if "calibration" not in options:
            from_settings["calibration"] = calibration_for(llm.base_url, llm.model)
        if "token_counter" not in options:
            from_settings["token_counter"] = TokenCounter.for_model(
                llm.model,
                tokenizer=getattr(llm, "tokenizer", None),
                base_url=llm.base_url,
                api_key=llm.api_key.get_secret_value() if llm.api_key is not None else None,
                timeout_s=llm.timeout_seconds,
            )
        return cls(**{**from_settings, **options})

    def for_model(self, model: object) -> PriorityTrimmer:
        """Returns a trimmer like this one that counts the tools bound to ``model``.

        Use it in a chain, where the trimmer cannot see the model that follows:
        ``prompt | trimmer.for_model(bound) | bound`` with ``bound = model.bind_tools(tools)``.
        The tools and ``response_format`` of the model's bindings (``bind_tools``, ``bind``,
        ``with_retry``) count against the budget.

        Raises:
            TypeError: When ``model`` is not a LangChain Runnable.
        """
        bound = extras_of_model(model)
        return self._with(
            tools=bound.tools, response_format=bound.response_format
        )._with_tools_bound()

    def _with_tools_bound(self) -> PriorityTrimmer:
        """This trimmer, noted as trimming for a model its tools are bound to (see
        :meth:`_warn_of_tools_sent_whole`)."""
        self._tools_bound = True
        return self

    def _with(self, *, cut_budget: int | None = None, **changes: Any) -> PriorityTrimmer:
        """A trimmer with the same options and token counter, but for ``changes`` (and the
        budget its cuts are drawn on, see :meth:`_build`), for the same kind of model."""
        trimmer = self._from_options(
            dataclasses.replace(self.options, **changes), cut_budget=cut_budget
        )
        trimmer._tools_bound = self._tools_bound
        return trimmer

    def __repr__(self) -> str:
        options = self.options
        return (
            f"PriorityTrimmer(budget={options.budget}, priority_order={options.priority_order}, "
            f"max_tool_result_tokens={options.tool_result_cap}, "
            f"prefix_stable={options.prefix_stable}, prefix_step_tokens={options.step_tokens}, "
            f"tools={len(self._extras.tools)})"
        )

    def trim(
        self,
        messages: object,
        *,
        context: Context | None = None,
        tools: Sequence[object] | None = _UNSET,
        response_format: object | None = _UNSET,
        strict_tools: bool | None = None,
        output_tools: Sequence[object] = (),
        tracer: Tracer | None = None,
    ) -> TrimResult:
        """Trims ``messages`` so the whole request fits the budget, recording a trim span.

        Args:
            messages: A list of LangChain messages and/or OpenAI-format dicts, a
                ``PromptValue``, or a dict with a ``"messages"`` key. Never modified.
            context: The OpenTelemetry context to start the span in. Default: the current one.
            tools: The tools this request sends. Default: the trimmer's own. A user message
                right after the result of one made with ``return_direct=True`` (which ends an
                agent's run) is the user's question, whatever parts it holds.
            response_format: The ``response_format`` this request sends. Default: the
                trimmer's own.
            strict_tools: Whether ``tools`` are sent with ``strict: true``.
            output_tools: Tools sent after ``tools`` that ``tool_budget`` never drops (the
                structured-output tools of an agent).
            tracer: The tracer to record the trim span with (e.g. the one a callback handler
                offers, see ``TrimTracerProvider``). Default: the trimmer's own
                (``tracer_provider``).

        Returns:
            The messages to send and what was done to get them.

        Raises:
            TypeError: When ``messages`` or an item of it is not a message (naming the index).
            ValueError: When an OpenAI-format dict or a tool is malformed (naming the index).
        """
        request = self._extras
        if tools is not _UNSET or response_format is not _UNSET or output_tools:
            request = extras(
                request.tools if tools is _UNSET else tools,
                request.response_format if response_format is _UNSET else response_format,
                strict=strict_tools,
                output_tools=output_tools,
            )
        span = start_trim_span(tracer or self._tracer, context)
        try:
            # Tools given for the request are those it sends: a tool budget chooses them.
            chooses = tools is not _UNSET or not self._tools_bound
            result = self._trim(messages, request, chooses_tools=chooses)
        except BaseException as exc:
            end_trim_span(span, exc)
            raise
        end_trim_span(span, None, result.span_attributes)
        if self._warns:
            warn_if_over_budget(result)
        return result

    def as_pre_model_hook(
        self,
        *,
        prompt: str | SystemMessage | None = None,
        tools: Sequence[object] | None = None,
        recall: bool = True,
    ) -> PreModelHook:
        """Returns a ``pre_model_hook`` for LangGraph's ``create_react_agent``.

        The hook trims the state's messages into ``llm_input_messages``, so the model sees the
        trimmed list while the graph state keeps the full history. LangGraph adds its
        ``prompt=`` after the hook and sends the agent's tools with every call: pass the same
        ``prompt`` and ``tools`` here so they count against the budget (and so that a user
        message after a ``return_direct`` tool's result is read as the user's question).

        With ``recall`` (the default) what the hook cuts stays readable: an elision marker goes
        where history was cut (its tokens reserved in the budget), and the ``recall`` tool reads
        the left-out messages back. Give the agent that tool, which the hook counts::

            hook = trimmer.as_pre_model_hook(prompt=PROMPT, tools=tools)
            agent = create_react_agent(
                model, [*tools, recall_tool(hook)], prompt=PROMPT, pre_model_hook=hook
            )

        (``from agent_latency.trimming import recall_tool``; docs/trimming.md, "Nothing lost for
        good").

        Args:
            prompt: The ``prompt=`` given to ``create_react_agent`` (a string or a
                ``SystemMessage``); it is counted and always kept, and not returned.
            tools: The ``tools`` given to ``create_react_agent``, the recall tool left out.
                Default: the trimmer's own.
            recall: Mark the cut and count the recall tool (see above).

        Raises:
            TypeError: When ``prompt`` is of another kind (a callable prompt builds its own
                messages: put the trimmer inside it instead).
            ValueError: When a tool cannot be converted to an OpenAI tool definition, or
                ``recall`` is not a bool.
        """
        system = system_prompt(prompt)
        checked_bool("as_pre_model_hook", "recall", recall)
        changes: dict[str, Any] = {} if tools is None else {"tools": tools}
        if system is not None:
            changes["keep_system"] = True  # LangGraph sends the prompt whatever the hook returns
        if recall:
            changes["tools"] = [*changes.get("tools", self.options.tools or ()), TOOL_DEFINITION]
        # LangGraph sends every tool of the agent: a tool budget cannot choose them.
        trimmer = self._with(**changes)._with_tools_bound()
        return PreModelHook(trimmer, system, recall=recall)

    def _warn_of_tools_sent_whole(self) -> None:
        """Warns, once per trimmer, that its ``tool_budget`` is not used: its tools are bound
        to a model that sends them all (``for_model``, ``as_pre_model_hook``)."""
        if self._warned_of_tools:
            return
        self._warned_of_tools = True
        logger.warning(
            "PriorityTrimmer: tool_budget is not used by for_model or as_pre_model_hook: the "
            "tools are bound to the model, which sends them all, so they are counted whole. To "
            "send fewer, use TrimmingMiddleware, or trim() and send result.tools."
        )

    def _analysis_memo(self, tools: Sequence[object]) -> AnalysisMemo:
        """The analyses of conversations trimmed with ``tools``: one per set of return_direct
        tools among them (which tell a user's question from a message a tool added)."""
        direct = returning_directly(tools) if tools else None
        if not direct:
            return self._analyses
        memo: AnalysisMemo | None = self._direct_analyses.get(direct)
        if memo is None:
            memo = AnalysisMemo(self.token_counter, direct)
            self._direct_analyses.put(direct, memo)
        return memo

    def _trim(self, value: object, request: RequestExtras, *, chooses_tools: bool) -> TrimResult:
        """:meth:`trim` but for its span; ``chooses_tools``: whether a tool budget may leave
        out some of the request's tools (not where they are bound to the model, all sent)."""
        started = time.perf_counter()
        # The analysis checks content; dicts met before are the messages made of them then.
        messages = coerce_messages(value, check_content=False, converted=self._converted)
        facts, conversation = self._analysis_memo(request.tools).analyse(messages)
        counts, texts, units = facts.counts, facts.texts, facts.units
        dropped_tools: tuple[str, ...] = ()
        # What the request weighed as given, before a tool budget left tools out.
        tool_tokens, response_format_tokens = self._extras_counter.count(request)
        tools_given = tool_tokens + response_format_tokens
        if self.options.tool_budget is not None and request.tools and not chooses_tools:
            self._warn_of_tools_sent_whole()
        elif self.options.tool_budget is not None and request.tools:
            request, dropped_tools = select_tools(
                request,
                messages,
                budget=self.options.tool_budget,
                pinned=self.options.pinned_tools,
                counter=self._extras_counter,
                terms=self.term_cache,
            )
            tool_tokens, response_format_tokens = self._extras_counter.count(request)
        factor = self.options.calibration.factor if self.options.calibration is not None else 1.0
        plan = Plan(
            messages,
            facts,
            overhead=tool_tokens + response_format_tokens,
            framing=self._framing,
            budget=math.floor(self.options.budget / factor),
            shortener=self._shortener,
        )
        tokens_before = plan.tokens - tool_tokens - response_format_tokens + tools_given

        @functools.cache  # read by the cut and by question_retention: indexed once
        def occurrences() -> Occurrences:
            return self._term_index.of(conversation, texts)

        options = self.options
        classify(plan)
        mark_kept(plan, options)
        if plan.tokens <= plan.budget:
            plan.rule_kept("fits")
        else:
            cap_tool_results(plan, options.tool_result_cap)
            if options.compact_tool_results:
                compact_history(plan, options, self.compactor)
            if options.history_selection == "cache_first" and options.prefix_stable:
                grid = self._cut_budget - tools_given  # the tools as given: not per question
                cache_first_cut(plan, options, self.term_cache, occurrences(), grid_budget=grid)
            drop_by_priority(plan, units, options, self.term_cache)
            shorten_must_keep(plan)
        output, sent_sizes = plan.output()
        must_keep = plan.must_keep_by_class()
        return TrimResult(
            messages=output,
            tokens_before=tokens_before,
            tokens_after=plan.tokens,
            budget=self.options.budget,
            effective_budget=plan.budget,
            calibration_factor=factor,
            dropped_messages=len(messages) - len(output),
            shortened_messages=sum(not plan.dropped[i] for i in plan.shortened),
            moved_messages=sum(not plan.dropped[i] for i in facts.late),
            over_budget=plan.tokens > plan.budget,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            tool_tokens=tool_tokens,
            response_format_tokens=response_format_tokens,
            framing_tokens=plan.framing,
            must_keep_tokens=sum(must_keep.values()),
            tools=request.tools if self.options.tool_budget is not None else None,
            schema_count=len(request.tools)
            + len(request.output_tools)
            + (request.response_format is not None),
            dropped_tools=dropped_tools,
            calibration=self.options.calibration,
            model=None if self.options.calibration is None else self.options.calibration.model,
            message_tokens=tuple(counts),
            sent_message_tokens=sent_sizes,
            _must_keep_by_class=must_keep,
            _added_tokens=plan.must_keep_added(),
            _question_whole=plan.latest is not None and plan.latest not in plan.shortened,
            _decide=plan.decisions,
            _left_out=plan.left_out,
            _cut=plan.cut_for_budget,
            _retain=functools.partial(question_retention, plan, self.term_cache, occurrences),
        )

    def _framing(self, first: BaseMessage | None) -> int:
        """The per-request framing of a request whose first message is ``first``."""
        return self.token_counter.count_framing(() if first is None else (first,))
