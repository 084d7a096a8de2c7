"""The cost-aware mode: send the prompt that gives the earliest first tokens, given the cache.

A server with a prefix cache prefills only what follows the longest prefix it has seen. While a
conversation's cache is warm, sending the previous prompt *as sent* plus the new messages
(``append``) prefills only the new messages; every cut prefills everything from the cut point.
When the cache is cold (the conversation's first call), has expired (idle longer than the cache
lifetime) or was evicted (the server reported fewer cached tokens than it should have held),
everything is prefilled anyway and the smallest prompt wins: a ``cut`` to the budget, or a
``deep_cut`` below it that also leaves room for later calls to append again.

:class:`CostAwareTrimmer` keeps, per conversation (LangGraph's ``thread_id`` or a key you pass),
the previous call's prompt, its time and the server's reported cached tokens or, where it
reports none, the call's time to first token (the callback handler passes them on through the
trim result's ``on_usage``; see
:mod:`~agent_latency.trimming._conversations`). For each call it predicts the mean time to first
token over the next ``horizon_calls`` calls of every option with a
:class:`~agent_latency._latency_model.LatencyModel`, assuming the conversation keeps growing as
it has and the calls after this one find the cache warm; it sends the option predicted fastest.
Two limits apply: the budget (a cut's target) and the hard limit (``context_window −
reserve_for_output``), which no prompt exceeds. Two rules keep context: a deep cut is considered
only when the input does not fit the budget, and on a warm cache a cut replaces ``append`` only
when predicted at least 10% faster. Until the latency model has seen
:data:`MIN_OBSERVATIONS` calls or probes of the endpoint, it trusts no prediction and sends the
cut (the plain trimmer's prompt): priors fitted to one server mislead on another, and a server
that reports no usage when streaming (llama-cpp-python) teaches it nothing but doctor's probes.
Without a key it is the plain :class:`PriorityTrimmer` it wraps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from langchain_core.callbacks.manager import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
)
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import ensure_config
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import TracerProvider

from agent_latency._caches import LRUCache
from agent_latency._latency_model import (
    DEFAULT_CACHE_LIFETIME_S,
    LATENCY_MODELS,
    LatencyModel,
    default_cache_lifetime,
)
from agent_latency._validation import checked_int, checked_number
from agent_latency._wire import coerce_messages
from agent_latency.config import Settings
from agent_latency.trimming._conversations import (
    CacheState,
    Conversation,
    appended,
    cache_state,
    extends,
    shared_tokens,
)
from agent_latency.trimming._forecast import CostAwareChoice, Forecast, Option
from agent_latency.trimming._tracing import (
    areport_trim,
    end_span,
    report_trim,
    run_context,
    start_span,
)
from agent_latency.trimming._trimmer import PriorityTrimmer, TrimResult

logger = logging.getLogger("agent_latency.trimming")

DEFAULT_CONTEXT_WINDOW: Final = 8192
"""The context window assumed when ``llm.context_window`` is not set: the smallest in common use."""
DEEP_CUT_FRACTIONS: Final = (0.4, 0.5)
"""The deep cuts' budgets, as fractions of the budget, in :meth:`CostAwareTrimmer.from_settings`:
the deepest that holds what no trim removes makes the deep cut."""
MIN_OBSERVATIONS: Final = 2.5
"""The evidence (:attr:`LatencyModel.observations`, older calls discounted) before the latency
model's predictions choose, with less the cut is sent: three calls, or doctor's three prefill
probes."""
_SWITCH_MARGIN: Final = 0.9  # on a warm cache a cut replaces append if predicted 10% faster
_GROWTH_SMOOTHING: Final = 0.5  # weight of the latest call in the growth-per-call estimate
_PRIOR_GROWTH_FRACTION: Final = 10  # before any growth is seen: a tenth of the budget per call


def deep_cut_budgets(budget: int, fractions: Sequence[float] = DEEP_CUT_FRACTIONS) -> list[int]:
    """The deep cuts' budgets: ``fractions`` of ``budget``, at least 1 token each."""
    return [max(int(budget * fraction), 1) for fraction in fractions]


def _positive(name: str, value: object, *, integer: bool = True) -> Any:
    if integer:
        return checked_int("CostAwareTrimmer", name, value, minimum=1)
    return checked_number("CostAwareTrimmer", name, value, minimum=0, above=True)


class CostAwareTrimmer(Runnable[Any, list[BaseMessage]]):
    """Sends, per conversation, whichever of append-only or a cut gets the first tokens sooner.

    A LangChain ``Runnable`` like :class:`PriorityTrimmer`: in a chain, the conversation key is
    the ``thread_id`` of the run's ``configurable``; in ``TrimmingMiddleware`` (inside a LangGraph
    run) it is taken from the run's config too; :meth:`trim` also accepts ``key=``.

    Args:
        trimmer: The trimmer whose budget a ``cut`` goes to (and which runs when there is no key).
        context_window: The model's context window, in tokens.
        reserve_for_output: Tokens kept free for the answer; with ``context_window`` it sets the
            hard limit, which must not be below ``trimmer.budget``.
        cache_lifetime_s: How long the server keeps an idle prefix cached.
        latency_model: Predicts each option's TTFT. Default: a new model with the priors.
        deep_trimmers: The trimmers of a ``deep_cut`` (budgets below the trimmer's): the one of
            smallest budget that holds what no trim removes (the system prompt, the latest
            user message, the current tool call and results) makes it. Empty: no deep cuts.
        horizon_calls: Over how many calls (this one included) options are compared.
        max_conversations: How many conversations to remember, least recently used forgotten.
        clock: Seconds, monotonic. Default: ``time.monotonic``.
        tracer_provider: Where trim spans go. Default: the global tracer provider.

    Raises:
        ValueError: When an option is invalid; the message names it.
    """

    def __init__(
        self,
        trimmer: PriorityTrimmer,
        *,
        context_window: int,
        reserve_for_output: int,
        cache_lifetime_s: float = DEFAULT_CACHE_LIFETIME_S,
        latency_model: LatencyModel | None = None,
        deep_trimmers: Sequence[PriorityTrimmer] = (),
        horizon_calls: int = 8,
        max_conversations: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        if not isinstance(deep_trimmers, Sequence):
            raise ValueError(
                "CostAwareTrimmer: deep_trimmers must be a sequence of PriorityTrimmer, got "
                f"{type(deep_trimmers).__name__}; e.g. [PriorityTrimmer(3000)]."
            )
        named = (("trimmer", trimmer), *(("each of deep_trimmers", d) for d in deep_trimmers))
        for name, value in named:
            if not isinstance(value, PriorityTrimmer):
                raise ValueError(
                    f"CostAwareTrimmer: {name} must be a PriorityTrimmer, got "
                    f"{type(value).__name__}; e.g. PriorityTrimmer(6000)."
                )
        self.trimmer = trimmer
        self.deep_trimmers = tuple(sorted(deep_trimmers, key=lambda deep: deep.budget))
        window = _positive("context_window", context_window)
        if isinstance(reserve_for_output, bool) or not isinstance(reserve_for_output, int):
            raise ValueError(
                "CostAwareTrimmer: reserve_for_output must be an integer, got "
                f"{reserve_for_output!r}."
            )
        self.hard_limit = window - reserve_for_output
        if self.hard_limit < trimmer.budget:
            raise ValueError(
                f"CostAwareTrimmer: context_window - reserve_for_output = {self.hard_limit} is "
                f"below the budget ({trimmer.budget}); lower the budget or the reserve."
            )
        self.cache_lifetime_s = float(
            _positive("cache_lifetime_s", cache_lifetime_s, integer=False)
        )
        if latency_model is not None and not isinstance(latency_model, LatencyModel):
            raise ValueError(
                "CostAwareTrimmer: latency_model must be a LatencyModel or None, got "
                f"{type(latency_model).__name__}."
            )
        self._forecast = Forecast(
            latency_model or LatencyModel(), _positive("horizon_calls", horizon_calls)
        )
        self._conversations = LRUCache(_positive("max_conversations", max_conversations))
        if not callable(clock):
            raise ValueError("CostAwareTrimmer: clock must be a callable returning seconds.")
        self._clock = clock
        self._tracer = trace.get_tracer("agent_latency", tracer_provider=tracer_provider)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        latency_model: LatencyModel | None = None,
        deep_cut_fractions: Sequence[float] = DEEP_CUT_FRACTIONS,
        **options: Any,
    ) -> CostAwareTrimmer:
        """Builds a cost-aware trimmer from ``settings``.

        The hard limit is ``llm.context_window`` (or :data:`DEFAULT_CONTEXT_WINDOW`) less
        ``prompt.reserve_for_output``; the cache lifetime is ``llm.cache_lifetime_seconds`` or
        the provider's default (:func:`default_cache_lifetime`); the latency model is the one
        the callback handler feeds for ``llm.base_url`` and ``llm.model``.

        Args:
            settings: Loaded settings.
            latency_model: Overrides the shared latency model.
            deep_cut_fractions: The deep cuts' budgets as fractions of the budget (each between 0
                and 1); empty: no deep cuts.
            **options: Keyword options of :class:`CostAwareTrimmer` (``horizon_calls``,
                ``max_conversations``, ``clock``, ``tracer_provider``) and of
                :meth:`PriorityTrimmer.from_settings` (the rest).
        """
        own = {"horizon_calls", "max_conversations", "clock", "tracer_provider"}
        mine = {name: value for name, value in options.items() if name in own}
        # The candidate cuts record no spans of their own: the cost-aware trim span says it all.
        rest = {name: value for name, value in options.items() if name not in own}
        rest["tracer_provider"] = trace.NoOpTracerProvider()
        trimmer = PriorityTrimmer.from_settings(settings, **rest)
        if not isinstance(deep_cut_fractions, Sequence) or not all(
            isinstance(f, int | float) and not isinstance(f, bool) and 0 < f < 1
            for f in deep_cut_fractions
        ):
            raise ValueError(
                "CostAwareTrimmer: deep_cut_fractions must be a sequence of numbers between 0 "
                f"and 1 (exclusive), got {deep_cut_fractions!r}; e.g. (0.4, 0.5), or () for none."
            )
        deep = [
            PriorityTrimmer.from_settings(
                settings, **{**rest, "budget": budget, "token_counter": trimmer.token_counter}
            )
            for budget in deep_cut_budgets(trimmer.budget, deep_cut_fractions)
        ]
        llm = settings.llm
        lifetime = getattr(llm, "cache_lifetime_seconds", None)
        window = llm.context_window or max(
            DEFAULT_CONTEXT_WINDOW, trimmer.budget + settings.prompt.reserve_for_output
        )
        return cls(
            trimmer,
            context_window=window,
            reserve_for_output=settings.prompt.reserve_for_output,
            cache_lifetime_s=lifetime
            if lifetime is not None
            else default_cache_lifetime(llm.base_url),
            latency_model=latency_model
            or LATENCY_MODELS.model_for_base_url(llm.base_url, llm.model),
            deep_trimmers=deep,
            **mine,
        )

    @property
    def latency_model(self) -> LatencyModel:
        """The endpoint's latency model the options are predicted with."""
        return self._forecast.latency_model

    @property
    def horizon_calls(self) -> int:
        """Over how many calls (this one included) options are compared."""
        return self._forecast.horizon_calls

    def __repr__(self) -> str:
        return (
            f"CostAwareTrimmer({self.trimmer!r}, hard_limit={self.hard_limit}, "
            f"cache_lifetime_s={self.cache_lifetime_s}, deep_cuts="
            f"{[deep.budget for deep in self.deep_trimmers]}, "
            f"horizon_calls={self.horizon_calls})"
        )

    def trim(
        self,
        messages: object,
        *,
        context: Context | None = None,
        key: object = None,
        **request: Any,
    ) -> TrimResult:
        """Trims ``messages`` for conversation ``key``, in an ``agent_latency.trim`` span.

        Args:
            messages: As for :meth:`PriorityTrimmer.trim`. Never modified.
            context: The OpenTelemetry context to start the span in. Default: the current one.
            key: The conversation; default: the ``thread_id`` of the current LangChain run's
                config. Without one this is :meth:`PriorityTrimmer.trim`.
            **request: ``tools``, ``response_format``, ``strict_tools``, as for
                :meth:`PriorityTrimmer.trim`.

        Returns:
            The messages to send and what was done to get them.
        """
        key = key if key is not None else _thread_id(ensure_config())
        if key is None:
            return self.trimmer.trim(messages, context=context, **request)
        span = start_span(self._tracer, context)
        try:
            with trace.use_span(span, end_on_exit=False):
                choice = self.choose(messages, key=key, **request)
        except BaseException as exc:
            end_span(span, exc)
            raise
        try:
            span.set_attributes(choice.span_attributes())
        except Exception:
            logger.warning("agent-latency: recording the cost-aware choice failed", exc_info=True)
        end_span(span, None, choice.result)
        return choice.result

    def choose(self, messages: object, *, key: object, **request: Any) -> CostAwareChoice:
        """Decides what to send for conversation ``key``, and remembers it.

        The candidate cuts are the wrapped trimmers' :meth:`PriorityTrimmer.trim` (their spans,
        if they record any, are children of the current span).

        Raises:
            ValueError: When ``key`` is ``None``.
        """
        if key is None:
            raise ValueError("CostAwareTrimmer.choose: key must not be None; pass a conversation.")
        now = self._clock()
        inputs = coerce_messages(messages)
        cut = self.trimmer.trim(inputs, **request)
        counts = cut.message_tokens
        framing = cut.tokens_before - sum(counts)  # tools, response format, reply priming
        # The hard limit is in the server's tokens; the trims count in ours.
        hard_limit = int(self.hard_limit / cut.calibration_factor)
        previous: Conversation | None = self._conversations.get(key)
        state = cache_state(previous, now, self.cache_lifetime_s)
        growth = float(self.trimmer.budget // _PRIOR_GROWTH_FRACTION)
        if previous is not None:
            added = abs(sum(counts) - previous.input_tokens)
            growth = _GROWTH_SMOOTHING * added + (1 - _GROWTH_SMOOTHING) * previous.growth
        if self.latency_model.observations < MIN_OBSERVATIONS:
            option: Option = "cut"  # nothing learned of this endpoint: the plain trimmer's choice
            candidates: dict[Option, TrimResult] = {"cut": cut}
            predicted: dict[Option, float] = {}
        else:
            candidates, predicted = self._predict(
                inputs, request, cut, previous, state, growth, hard_limit
            )
            option = min(predicted, key=predicted.__getitem__)
            warm_append = predicted.get("append") if state == "warm" else None
            if warm_append is not None and predicted[option] > warm_append * _SWITCH_MARGIN:
                option = "append"  # on a warm cache a cut loses context: it must be clearly faster
        chosen = candidates[option]
        shared = 0  # what a warm cache would hold of it: the evidence its usage report gives
        if previous is not None:
            shared = (
                previous.sent_tokens if option == "append" else shared_tokens(chosen, previous.sent)
            )
        miss_after_ms = None
        if predicted and state in ("warm", "evicted") and shared > 0:
            miss_after_ms = self._forecast.miss_after_ms(chosen.tokens_after, shared)
        remembered = Conversation(
            inputs=tuple(inputs),
            input_tokens=sum(counts),
            sent=tuple(chosen.messages),
            sent_tokens=chosen.tokens_after - framing,
            decisions=chosen.decisions,
            at=now,
            growth=growth,
            state=state,
            shared=shared,
            missed=previous.server_missed() if previous is not None else False,
            miss_after_ms=miss_after_ms,
        )
        self._conversations.put(key, remembered)
        result = TrimResult.from_decisions(
            chosen, remembered.decisions, on_usage=remembered.report_usage
        )
        return CostAwareChoice(result, state, option, predicted, self.hard_limit)

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Returns the trimmed messages of ``input`` for the run's ``thread_id``."""
        return self._call_with_config(self._trim_in_run, input, config)

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Returns the trimmed messages of ``input`` for the run's ``thread_id``."""
        return await self._acall_with_config(self._atrim_in_run, input, config)

    def _predict(
        self,
        inputs: list[BaseMessage],
        request: Mapping[str, Any],
        cut: TrimResult,
        previous: Conversation | None,
        state: CacheState,
        growth: float,
        hard_limit: int,
    ) -> tuple[dict[Option, TrimResult], dict[Option, float]]:
        """The options open to this call, each with its predicted mean TTFT over the horizon."""
        cached = previous.sent if previous is not None and state == "warm" else ()
        candidates: dict[Option, tuple[TrimResult, int]] = {}  # option -> (result, prefilled)
        if previous is not None and extends(previous.inputs, inputs):
            append = appended(previous, inputs, cut)
            if append.tokens_after <= hard_limit:
                reused = previous.sent_tokens if state == "warm" else 0
                candidates["append"] = (append, append.tokens_after - reused)
        candidates["cut"] = (cut, cut.tokens_after - shared_tokens(cut, cached))
        # A deep cut is not worked out when appending on a warm cache has room for the whole
        # horizon: then it could win only by a smaller context, rarely by the switch margin.
        room_ahead = (
            state == "warm"
            and "append" in candidates
            and (
                candidates["append"][0].tokens_after + growth * (self.horizon_calls - 1)
                <= hard_limit
            )
        )
        # Nor when what no trim removes would not fit its budget: it would only repeat the cut,
        # flagged (and logged) as over a budget that the request does not exceed.
        deep_trimmer = next((deep for deep in self.deep_trimmers if _fits(cut, deep)), None)
        if deep_trimmer is not None and cut.changed and not room_ahead:
            deep = deep_trimmer.trim(inputs, **request)
            if deep.tokens_after < cut.tokens_after:
                candidates["deep_cut"] = (deep, deep.tokens_after - shared_tokens(deep, cached))
        # A later forced cut is assumed to look like the smallest cut now, on a warm cache.
        reset = min(
            (r.tokens_after, fresh) for o, (r, fresh) in candidates.items() if o != "append"
        )
        predicted = {
            option: self._forecast.horizon_ms(
                result.tokens_after, prefilled, growth, reset, hard_limit
            )
            for option, (result, prefilled) in candidates.items()
        }
        return {option: result for option, (result, _) in candidates.items()}, predicted

    def _trim_in_run(
        self, input_: Any, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> list[BaseMessage]:
        result = self.trim(input_, context=run_context(run_manager), key=_thread_id(config))
        report_trim(run_manager, result)
        return result.messages

    async def _atrim_in_run(
        self, input_: Any, run_manager: AsyncCallbackManagerForChainRun, config: RunnableConfig
    ) -> list[BaseMessage]:
        result = self.trim(input_, context=run_context(run_manager), key=_thread_id(config))
        await areport_trim(run_manager, result)
        return result.messages


def _thread_id(config: RunnableConfig) -> str | None:
    thread_id = (config.get("configurable") or {}).get("thread_id")
    return None if thread_id is None else str(thread_id)


def _fits(cut: TrimResult, trimmer: PriorityTrimmer) -> bool:
    """Whether ``trimmer``'s budget holds the fixed part of the request ``cut`` prepared."""
    # The fixed part is in our tokens, the budgets in the server's (calibration).
    return cut.fixed_tokens <= trimmer.budget * cut.effective_budget / cut.budget
