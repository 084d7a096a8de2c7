"""The cost-aware mode: send the prompt that gives the earliest first tokens, given the cache.

A server with a prefix cache prefills only what follows the longest prefix it has seen. While a
conversation's cache is warm, sending the previous prompt *as sent* plus the new messages
(``append``) prefills only the new messages; every cut prefills everything from the cut point.
When the cache is cold (the conversation's first call, or its tools changed), has expired (idle
longer than the cache lifetime) or was evicted (the server reported fewer cached tokens than it
should have held), everything is prefilled anyway and the ``cut`` to the budget is sent (or,
opted into with ``deep_cut_fractions``, a ``deep_cut`` below it that leaves room for later
calls to append again, at the cost of the history it leaves out).

What the budget means. For the plain :class:`PriorityTrimmer` it is the most prompt tokens a
request sends, tools and framing included; only when what no trim removes exceeds it is a
request sent over it, with ``over_budget`` set. Here it is the target of every ``cut``, and a
``deep_cut`` goes below it; an ``append`` on a warm cache may go past it, up to the hard limit
(``context_window − reserve_for_output``), because prefilling a few new messages after a cached
prefix is sooner than prefilling a shorter rewritten prompt. Such an append says so:
``over_budget`` is true and ``agent_latency.trim.over_budget_cause`` names the warm-cache append.
``allow_over_budget_on_warm_cache=False`` keeps appends within the budget too, so that no
request exceeds it except as the plain trimmer's would. No prompt ever exceeds the hard limit.

:class:`CostAwareTrimmer` keeps, per conversation, its latest call (:class:`LatestCall`: what
was sent, by content; when; the server's reported cached tokens or, where it reports none, the
call's time to first token, passed on by the callback handler through the trim result's
``on_usage``). In memory it is kept per key (LangGraph's ``thread_id`` or a key you pass);
``TrimmingMiddleware`` also keeps it in the agent's state, so the user's checkpointer carries it
across restarts and replicas. For each call it predicts the mean time to first token over the
next ``horizon_calls`` calls of every option with a
:class:`~agent_latency._latency_model.LatencyModel`, assuming the conversation keeps growing as
it has, and that a warm cache holds the prompt as often as the server held this conversation's
prompts (:data:`~agent_latency.trimming._cache_state.Hits`, from none: no prompt is sent larger
than the cut on a bet the server has not yet been seen to win). It sends the option predicted
fastest, by rules that keep context: an append never sends less than a fresh trim to the budget
its prompt was cut to (so it is taken only where predicted faster than the cut, and sends at
least what the cut would); a deep cut, which sends less, is considered only when the input does
not fit the budget and taken only when predicted at least 10% faster. Until the latency model
has seen
:data:`MIN_OBSERVATIONS` calls or probes of the endpoint, it trusts no prediction and sends the
cut (the plain trimmer's prompt): priors fitted to one server mislead on another, and a server
that reports no usage when streaming (llama-cpp-python) teaches it nothing but doctor's probes.
Without a key or a record it is the plain :class:`PriorityTrimmer` it wraps, in a trim span of
its own.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeVar

from langchain_core.callbacks.manager import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
)
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import ensure_config
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency._caches import LRUCache
from agent_latency._latency_model import (
    DEFAULT_CACHE_LIFETIME_S,
    LATENCY_MODELS,
    LatencyModel,
    default_cache_lifetime,
)
from agent_latency._validation import checked_bool, checked_int, checked_number
from agent_latency._wire import coerce_messages
from agent_latency.config import Settings
from agent_latency.trimming._append import appended, cached_prefix
from agent_latency.trimming._cache_state import NO_HITS, CacheState, cache_state
from agent_latency.trimming._choice import CostAwareChoice, Option
from agent_latency.trimming._decisions import Action, Rule
from agent_latency.trimming._fingerprints import MessageDigests, request_digest, sequence_digest
from agent_latency.trimming._forecast import Forecast
from agent_latency.trimming._latest_call import LatestCall
from agent_latency.trimming._span import (
    areport_trim,
    end_span,
    report_trim,
    run_context,
    run_tracer,
    start_span,
)
from agent_latency.trimming._trimmer import PriorityTrimmer, TrimResult

logger = logging.getLogger("agent_latency.trimming")

DEFAULT_CONTEXT_WINDOW: Final = 8192
"""The context window assumed when ``llm.context_window`` is not set: the smallest in common use."""
DEEP_CUT_FRACTIONS: Final = (0.4, 0.5)
"""Deep cuts' budgets to opt into, as fractions of the budget
(``CostAwareTrimmer.from_settings(settings, deep_cut_fractions=DEEP_CUT_FRACTIONS)``): the
deepest that holds what no trim removes makes the deep cut. Off by default: on the mixed
workload a deep cut sent the system prompt and the question and lost the facts the question
needed (docs/trimming.md)."""
MIN_OBSERVATIONS: Final = 2.5
"""The evidence (:attr:`LatencyModel.observations`, older calls discounted) before the latency
model's predictions choose, with less the cut is sent: three calls, or doctor's three prefill
probes."""
_SWITCH_MARGIN: Final = 0.9  # a deep cut must be predicted 10% faster than the fuller option
_GROWTH_SMOOTHING: Final = 0.5  # weight of the latest call in the growth-per-call estimate
_PRIOR_GROWTH_FRACTION: Final = 10  # before any growth is seen: a tenth of the budget per call
_OWNER: Final = "CostAwareTrimmer"
CONVERSATION_BYTES: Final = 64 * 1024 * 1024
"""The most the remembered conversations hold in all (their records' :attr:`LatestCall.weight`:
mostly the shortened copies they sent, which outlive the input messages)."""
_OWN_OPTIONS: Final = frozenset(
    {
        "allow_over_budget_on_warm_cache",
        "horizon_calls",
        "max_conversations",
        "clock",
        "tracer_provider",
    }
)
"""The options of :meth:`CostAwareTrimmer.from_settings` that are the cost-aware trimmer's own."""


def deep_cut_budgets(budget: int, fractions: Sequence[float] = DEEP_CUT_FRACTIONS) -> list[int]:
    """The deep cuts' budgets: ``fractions`` of ``budget``, at least 1 token each."""
    return [max(int(budget * fraction), 1) for fraction in fractions]


class _Traced(Protocol):
    def span_attributes(self) -> dict[str, AttributeValue]: ...


_T = TypeVar("_T", bound=_Traced)


class CostAwareTrimmer(Runnable[Any, list[BaseMessage]]):
    """Sends, per conversation, whichever of append-only or a cut gets the first tokens sooner.

    A LangChain ``Runnable`` like :class:`PriorityTrimmer`: in a chain, the conversation key is
    the ``thread_id`` of the run's ``configurable``; in ``TrimmingMiddleware`` the agent's state
    carries the conversation's record (and the run's ``thread_id`` is the key where the state
    has none); :meth:`trim` also accepts ``key=``. The module docstring says what the budget
    means here.

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
        allow_over_budget_on_warm_cache: Whether an ``append`` on a warm cache may exceed the
            budget (up to the hard limit). ``False``: every prompt keeps to the budget as the
            plain trimmer's do.
        horizon_calls: Over how many calls (this one included) options are compared.
        max_conversations: How many conversations to remember in memory, least recently used
            forgotten (and fewer when their records pass :data:`CONVERSATION_BYTES`).
        clock: Seconds. Default: ``time.time``, which another process reads alike (a record
            carried in an agent's state says when its call was made).
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
        allow_over_budget_on_warm_cache: bool = True,
        horizon_calls: int = 8,
        max_conversations: int = 1024,
        clock: Callable[[], float] = time.time,
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
        window = checked_int(_OWNER, "context_window", context_window, minimum=1)
        reserve = checked_int(_OWNER, "reserve_for_output", reserve_for_output, minimum=0)
        self.hard_limit = window - reserve
        if self.hard_limit < trimmer.budget:
            raise ValueError(
                f"CostAwareTrimmer: context_window - reserve_for_output = {self.hard_limit} is "
                f"below the budget ({trimmer.budget}); lower the budget or the reserve."
            )
        self.cache_lifetime_s = checked_number(
            _OWNER, "cache_lifetime_s", cache_lifetime_s, minimum=0, above=True
        )
        if latency_model is not None and not isinstance(latency_model, LatencyModel):
            raise ValueError(
                "CostAwareTrimmer: latency_model must be a LatencyModel or None, got "
                f"{type(latency_model).__name__}."
            )
        self.allow_over_budget_on_warm_cache = checked_bool(
            _OWNER, "allow_over_budget_on_warm_cache", allow_over_budget_on_warm_cache
        )
        self._forecast = Forecast(
            latency_model or LatencyModel(),
            checked_int(_OWNER, "horizon_calls", horizon_calls, minimum=1),
        )
        self._conversations = LRUCache(
            checked_int(_OWNER, "max_conversations", max_conversations, minimum=1),
            CONVERSATION_BYTES,
        )
        self._digests = MessageDigests()
        if not callable(clock):
            raise ValueError("CostAwareTrimmer: clock must be a callable returning seconds.")
        self._clock = clock
        self._tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE,
            tracer_provider=tracer_provider,
            schema_url=semconv.SCHEMA_URL,
        )

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        latency_model: LatencyModel | None = None,
        deep_cut_fractions: Sequence[float] = (),
        **options: Any,
    ) -> CostAwareTrimmer:
        """Builds a cost-aware trimmer from ``settings``.

        The hard limit is ``llm.context_window`` (or :data:`DEFAULT_CONTEXT_WINDOW`) less
        ``prompt.reserve_for_output``; whether an append may pass the budget is
        ``prompt.allow_over_budget_on_warm_cache`` unless given; the cache lifetime is
        ``llm.cache_lifetime_seconds`` or the provider's default
        (:func:`default_cache_lifetime`); the latency model is the one the callback handler
        feeds for ``llm.base_url`` and ``llm.model``.

        Args:
            settings: Loaded settings.
            latency_model: Overrides the shared latency model.
            deep_cut_fractions: Deep cuts' budgets as fractions of the budget (each between 0
                and 1), e.g. :data:`DEEP_CUT_FRACTIONS`; empty (the default): no deep cuts.
            **options: Keyword options of :class:`CostAwareTrimmer`
                (``allow_over_budget_on_warm_cache``, ``horizon_calls``, ``max_conversations``,
                ``clock``, ``tracer_provider``) and of :meth:`PriorityTrimmer.from_settings`
                (the rest).
        """
        mine = {name: value for name, value in options.items() if name in _OWN_OPTIONS}
        mine.setdefault(
            "allow_over_budget_on_warm_cache", settings.prompt.allow_over_budget_on_warm_cache
        )
        # The candidate cuts record no spans of their own: the cost-aware trim span says it all.
        rest = {name: value for name, value in options.items() if name not in _OWN_OPTIONS}
        rest["tracer_provider"] = trace.NoOpTracerProvider()
        rest.setdefault("prefix_stable", True)  # the candidate cuts are prefix-stable
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
            f"allow_over_budget_on_warm_cache={self.allow_over_budget_on_warm_cache}, "
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
            key: The conversation (hashable: a ``str`` or an ``int``); default: the
                ``thread_id`` of the current LangChain run's config. Without one this is
                :meth:`PriorityTrimmer.trim`.
            **request: ``tools``, ``response_format``, ``strict_tools``, ``output_tools``, as
                for :meth:`PriorityTrimmer.trim`.

        Returns:
            The messages to send and what was done to get them.

        Raises:
            ValueError: When ``key`` is not hashable, or as :meth:`PriorityTrimmer.trim` does.
        """
        key = key if key is not None else thread_id_of(ensure_config())
        if key is None:
            return self._in_span(context, None, lambda: self.trimmer.trim(messages, **request))
        checked = _checked_key(key)
        choice = self._in_span(context, None, lambda: self.choose(messages, key=checked, **request))
        return choice.result

    def trim_after(
        self,
        messages: object,
        previous: LatestCall | None,
        *,
        key: object = None,
        context: Context | None = None,
        tracer: Tracer | None = None,
        **request: Any,
    ) -> CostAwareChoice:
        """Decides what to send after the conversation's latest call, in a trim span.

        For a caller that keeps the record itself (``TrimmingMiddleware`` keeps it in the
        agent's state: ``LatestCall.from_state``, then :attr:`CostAwareChoice.record`).

        Args:
            messages: As for :meth:`trim`.
            previous: The conversation's latest call; ``None``: what is remembered for ``key``,
                if anything (else this is its first call).
            key: Where the decision is also remembered in memory; ``None``: nowhere.
            context: The OpenTelemetry context to start the span in.
            tracer: The tracer of the span. Default: the trimmer's own.
            **request: As for :meth:`trim`.

        Raises:
            ValueError: When ``key`` is not hashable, or as :meth:`PriorityTrimmer.trim` does.
        """
        checked = None if key is None else _checked_key(key)

        def decide() -> CostAwareChoice:
            known = previous
            if known is None and checked is not None:
                known = self._conversations.get(checked)
            choice = self.choose_after(messages, known, **request)
            if checked is not None:
                self._conversations.put(checked, choice.record, choice.record.weight)
            return choice

        return self._in_span(context, tracer, decide)

    def choose(self, messages: object, *, key: object, **request: Any) -> CostAwareChoice:
        """Decides what to send for conversation ``key``, and remembers it (no span).

        The candidate cuts are the wrapped trimmers' :meth:`PriorityTrimmer.trim` (their spans,
        if they record any, are children of the current span).

        Raises:
            ValueError: When ``key`` is ``None`` or not hashable.
        """
        if key is None:
            raise ValueError("CostAwareTrimmer.choose: key must not be None; pass a conversation.")
        checked = _checked_key(key)
        choice = self.choose_after(messages, self._conversations.get(checked), **request)
        self._conversations.put(checked, choice.record, choice.record.weight)
        return choice

    def choose_after(
        self, messages: object, previous: LatestCall | None, **request: Any
    ) -> CostAwareChoice:
        """Decides what to send after the conversation's latest call ``previous`` (no span).

        Args:
            messages: As for :meth:`trim`.
            previous: The conversation's latest call; ``None``: this is its first.
            **request: As for :meth:`trim`.
        """
        now = self._clock()
        inputs = coerce_messages(messages)
        cut = self.trimmer.trim(inputs, **request)
        counts = cut.message_tokens
        digests = self._digests.of_all(inputs)
        sends = request_digest(cut, request)
        missed = previous is not None and previous.server_missed()
        hits = NO_HITS if previous is None else previous.hits_after()
        state = cache_state(
            at=None if previous is None else previous.at,
            missed=missed,
            same_request=previous is not None and previous.request_digest == sends,
            now=now,
            lifetime_s=self.cache_lifetime_s,
        )
        # The previous prompt as sent, where this input extends that call's input unchanged.
        before = (
            previous.sent_prompt(inputs)
            if previous is not None and previous.extended_by(digests)
            else None
        )
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
                inputs, request, cut, previous, before, state, growth, hits[0] / hits[1]
            )
            option = _fastest_keeping_context(predicted)
        chosen = candidates[option]
        chosen_sends = request_digest(chosen, request)
        # What a warm cache holds of it: the evidence the server's report of this call gives.
        same = previous is not None and previous.request_digest == chosen_sends
        expected = cached_prefix(chosen, before or (), self._digests) if same else 0
        miss_after_ms = None
        if predicted and state in ("warm", "evicted") and expected > 0:
            miss_after_ms = self._forecast.miss_after_ms(chosen.tokens_after, expected)
        record = _record(
            chosen,
            digests,
            chosen_sends,
            # The budget the prompt was cut to: an append keeps its base's.
            level=previous.level if option == "append" and previous is not None else chosen.budget,
            at=now,
            growth=growth,
            state=state,
            expected=expected,
            missed=missed,
            miss_after_ms=miss_after_ms,
            hits=hits,
        )
        result = dataclasses.replace(chosen, on_usage=record.report_usage)
        return CostAwareChoice(result, state, option, predicted, self.hard_limit, record)

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
        previous: LatestCall | None,
        before: list[BaseMessage] | None,
        state: CacheState,
        growth: float,
        hit_rate: float,
    ) -> tuple[dict[Option, TrimResult], dict[Option, float]]:
        """The options open to this call, each with its predicted mean TTFT over the horizon."""
        # The limits are in the server's tokens, the trims count in ours (calibration).
        hard_limit = int(self.hard_limit / cut.calibration_factor)
        ceiling = hard_limit if self.allow_over_budget_on_warm_cache else cut.effective_budget
        held = before if state == "warm" and before is not None else []

        def prefilled(result: TrimResult) -> int:
            # What a warm cache holds of it, as often as the server held this conversation's.
            cached = cached_prefix(result, held, self._digests)
            return result.tokens_after - round(hit_rate * cached)

        candidates: dict[Option, tuple[TrimResult, int]] = {}  # option -> (result, prefilled)
        deep_trimmer = next((deep for deep in self.deep_trimmers if _fits(cut, deep)), None)
        deep: TrimResult | None = None
        if previous is not None and before is not None:
            # The append must send at least what a trim to the budget its prompt was cut to
            # sends now: the cut's, or after a deep cut that deep cut's.
            base = next((d for d in self.deep_trimmers if d.budget == previous.level), None)
            floor = cut
            if base is not None and previous.level != cut.budget:
                floor = base.trim(inputs, **request)
                deep = floor if base is deep_trimmer else None
            append = appended(
                previous,
                inputs,
                before,
                cut,
                self.trimmer.token_counter,
                at_least=floor,
                hard_limit=hard_limit,
            )
            if append is not None and append.tokens_after <= ceiling:
                candidates["append"] = (append, prefilled(append))
        candidates["cut"] = (cut, prefilled(cut))
        # A deep cut is not worked out when appending on a warm cache has room for the whole
        # horizon: then it could win only by a smaller context, rarely by the switch margin.
        room_ahead = (
            state == "warm"
            and "append" in candidates
            and (
                candidates["append"][0].tokens_after + growth * (self.horizon_calls - 1) <= ceiling
            )
        )
        # Nor when what no trim removes would not fit its budget: it would only repeat the cut,
        # flagged (and logged) as over a budget that the request does not exceed.
        if deep_trimmer is not None and cut.changed and not room_ahead:
            deep = deep or deep_trimmer.trim(inputs, **request)
            if deep.tokens_after < cut.tokens_after:
                candidates["deep_cut"] = (deep, prefilled(deep))
        # A later forced cut is assumed to look like the smallest cut now, on a warm cache.
        reset = min(
            (r.tokens_after, fresh) for o, (r, fresh) in candidates.items() if o != "append"
        )
        predicted = {
            option: self._forecast.horizon_ms(
                result.tokens_after, prefilled, growth, reset, ceiling
            )
            for option, (result, prefilled) in candidates.items()
        }
        return {option: result for option, (result, _) in candidates.items()}, predicted

    def _in_span(
        self, context: Context | None, tracer: Tracer | None, work: Callable[[], _T]
    ) -> _T:
        """Runs ``work`` in a trim span, which gets its attributes or its error."""
        span = start_span(tracer or self._tracer, context)
        try:
            with trace.use_span(span, end_on_exit=False):
                done = work()
        except BaseException as exc:
            end_span(span, exc)
            raise
        try:
            attributes = done.span_attributes()
        except Exception:
            logger.warning("agent-latency: recording the trim's attributes failed", exc_info=True)
            attributes = None
        end_span(span, None, attributes)
        return done

    def _trim_in_run(
        self, input_: Any, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> list[BaseMessage]:
        result = self._trim_for_run(input_, run_manager, config)
        report_trim(run_manager, result)
        return result.messages

    async def _atrim_in_run(
        self, input_: Any, run_manager: AsyncCallbackManagerForChainRun, config: RunnableConfig
    ) -> list[BaseMessage]:
        result = self._trim_for_run(input_, run_manager, config)
        await areport_trim(run_manager, result)
        return result.messages

    def _trim_for_run(
        self,
        input_: Any,
        run_manager: CallbackManagerForChainRun | AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> TrimResult:
        context, tracer = run_context(run_manager), run_tracer(run_manager, self._tracer)
        key = thread_id_of(config)
        if key is None:
            return self._in_span(context, tracer, lambda: self.trimmer.trim(input_))
        return self.trim_after(input_, None, key=key, context=context, tracer=tracer).result


def _record(
    sent: TrimResult,
    digests: Sequence[bytes],
    request: bytes,
    **figures: Any,
) -> LatestCall:
    """What is kept of a call that sent ``sent`` for input messages of ``digests``."""
    actions: tuple[tuple[Action, Rule], ...] = tuple(map(_ACTION_AND_RULE, sent.decisions))
    shortened = {}
    if sent.shortened_messages:  # the copies sent, found by their place among those sent
        position = -1
        for index, (action, _) in enumerate(actions):
            position += action != "dropped"
            if action == "shortened":
                shortened[index] = sent.messages[position]
    return LatestCall(
        inputs=len(digests),
        inputs_digest=sequence_digest(digests),
        actions=actions,
        shortened=shortened,
        request_digest=request,
        input_tokens=sum(sent.message_tokens),
        **figures,
    )


_ACTION_AND_RULE: Final = operator.attrgetter("action", "rule")


def _fastest_keeping_context(predicted: Mapping[Option, float]) -> Option:
    """The faster of the append (which sends at least what the cut sends) and the cut, or the
    deep cut, which sends less, where it is predicted :data:`_SWITCH_MARGIN` faster still."""
    fuller: Option = min(
        (option for option in predicted if option != "deep_cut"), key=predicted.__getitem__
    )
    deep = predicted.get("deep_cut")
    return "deep_cut" if deep is not None and deep < predicted[fuller] * _SWITCH_MARGIN else fuller


def thread_id_of(config: RunnableConfig) -> str | None:
    """The ``thread_id`` of a LangChain run's config (a LangGraph thread), as a string."""
    thread_id = (config.get("configurable") or {}).get("thread_id")
    return None if thread_id is None else str(thread_id)


def _checked_key(key: object) -> object:
    """``key`` if it can key a conversation (hashable), else a ``ValueError`` naming it."""
    try:
        hash(key)
    except TypeError:
        shown = repr(key)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise ValueError(
            f"CostAwareTrimmer: the conversation key must be hashable (a str or an int, such as "
            f"a thread_id), got {type(key).__name__} {shown}; e.g. key=str(conversation_id)."
        ) from None
    return key


def _fits(cut: TrimResult, trimmer: PriorityTrimmer) -> bool:
    """Whether ``trimmer``'s budget holds the fixed part of the request ``cut`` prepared."""
    # The fixed part is in our tokens, the budgets in the server's (calibration).
    return cut.fixed_tokens <= trimmer.budget * cut.effective_budget / cut.budget
