"""The contenders of the mixed workload: our strategies and what users would pick instead, each
at the points of its own knob.

A contender is one strategy at one knob setting; :func:`contenders` returns, per strategy, its
*default* point (what a user of that strategy gets without setting the knob; where the knob has no
default, the workload's budget) and, for the frontier, every point of its sweep. Each builds a fresh
:class:`Strategy` (its own state: a summarizer's summaries), which prepares one call's prompt from
the conversation so far.

Ours are built with :meth:`PriorityTrimmer.from_settings` from the workload's settings, so the
``prefix_stable`` line is what a user gets with no options; the other lines of ours change
one or two options each (the candidate defaults).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Final, cast

from langchain_core.messages import BaseMessage, trim_messages
from langchain_core.messages.utils import count_tokens_approximately
from langchain_openai import ChatOpenAI
from opentelemetry import trace

from agent_latency.bench._mixed import MixedWorkload
from agent_latency.config import Settings
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer

OURS: Final[Mapping[str, Mapping[str, Any]]] = {
    "prefix_stable": {},
    "moving_cut": {"prefix_stable": False},
    "compaction": {"compact_tool_results": True},
    "age_1_1": {"history_selection": "age", "history_keep_head": 1, "history_keep_tail": 1},
    # The history options that were the defaults before the frontier chose one head and one tail
    # round (and history by relevance, since replaced by cache-first cuts).
    "age_2_4": {"history_selection": "age", "history_keep_head": 2, "history_keep_tail": 4},
}
"""Our plain trimmer's lines: options over ``PriorityTrimmer.from_settings``. ``prefix_stable``
is what a user gets with none (cache-first cuts, one head and one tail round); each other line
names the options it changes, so its meaning does not move with the defaults."""

STRATEGIES: Final = (
    "none",
    "hard_limit",
    *OURS,
    "trim_messages_approximate",
    "trim_messages_exact",
    "context_editing_default",
    "context_editing_exact",
    "summarization",
)
"""The contenders' names, in the order :func:`contenders` returns them."""


def workload_strategies() -> tuple[str, ...]:
    """The workload's strategies, in the order they run (:data:`STRATEGIES`)."""
    return STRATEGIES


BUDGET_FRACTIONS: Final = (0.25, 0.5, 0.75, 1.0)
"""The frontier's budget points, as fractions of the workload's budget (at most the hard limit)."""
CLEAR_TOOL_USES_DEFAULT: Final = (100_000, 3)
"""``ClearToolUsesEdit()``'s own trigger and keep."""
SUMMARY_KEEP_DEFAULT: Final = 20
"""``SummarizationMiddleware``'s own ``keep``: 20 messages."""
SUMMARY_MAX_TOKENS: Final = 256
"""The summary call's output limit."""

Knob = Mapping[str, int]


@dataclass(frozen=True)
class Prepared:
    """One call's prompt.

    Attributes:
        messages: The prompt to send.
    """

    messages: list[BaseMessage]


Strategy = Callable[[int, list[BaseMessage], float], Prepared]
"""(conversation, its messages so far, virtual time) -> the prompt to send."""


@dataclass(frozen=True)
class Contender:
    """One strategy at one knob setting.

    Attributes:
        strategy: The strategy's name (one of :data:`STRATEGIES`).
        knob: The knob's setting, e.g. ``{"budget": 3000}`` (empty for a strategy without one).
        default: Whether it is the point a user of the strategy gets without setting the knob.
        build: Makes a fresh :class:`Strategy` for one run.
    """

    strategy: str
    knob: Knob
    default: bool
    build: Callable[[], Strategy] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Kit:
    """What the contenders are built from.

    Attributes:
        workload: The workload's shape.
        settings: The channel and the trimming options (``from_settings`` reads them).
        counter: The endpoint's token counter, shared by every trimmer.
        summary_model: The model the summarizer calls.
    """

    workload: MixedWorkload
    settings: Settings
    counter: TokenCounter
    summary_model: ChatOpenAI


def budget_points(workload: MixedWorkload) -> list[int]:
    """The budgets swept: :data:`BUDGET_FRACTIONS` of the budget, up to the hard limit."""
    points = {
        min(workload.hard_limit, max(1, round(workload.budget * f))) for f in BUDGET_FRACTIONS
    }
    return sorted(points)


_QUIET: Final = trace.NoOpTracerProvider()


def _trim_settings(kit: Kit, budget: int) -> Settings:
    workload, settings = kit.workload, kit.settings
    llm = replace(settings.llm, context_window=workload.context_window)
    prompt = replace(
        settings.prompt, token_budget=budget, reserve_for_output=workload.reserve_for_output
    )
    return replace(settings, llm=llm, prompt=prompt)


def _plain(kit: Kit, budget: int, options: Mapping[str, Any]) -> Strategy:
    trimmer = PriorityTrimmer.from_settings(
        _trim_settings(kit, budget),
        token_counter=kit.counter,
        calibration=None,  # each strategy on its own: no correction learnt from another's calls
        tracer_provider=_QUIET,
        **{"prefix_stable": True, **options},  # a line's cuts, whatever the user's prompt.mode
    )
    return lambda _conversation, messages, _at: Prepared(trimmer.trim(messages).messages)


def _trimmed_by_peer(kit: Kit, max_tokens: int, *, exact: bool) -> Strategy:
    count: Callable[[list[BaseMessage]], int] = (
        kit.counter.count_messages if exact else count_tokens_approximately
    )
    # As LangChain's docs show it for chat models: the last messages, from a user turn on.
    return lambda _conversation, messages, _at: Prepared(
        trim_messages(
            messages,
            max_tokens=max_tokens,
            token_counter=count,
            strategy="last",
            start_on="human",
            end_on=("human", "tool"),
            include_system=True,
        )
    )


def _edited(kit: Kit, trigger: int, keep: int, *, exact: bool) -> Strategy:
    from langchain.agents.middleware import ClearToolUsesEdit

    edit = ClearToolUsesEdit(trigger=trigger, keep=keep)
    count = kit.counter.count_messages if exact else count_tokens_approximately

    def prepare(_conversation: int, messages: list[BaseMessage], _at: float) -> Prepared:
        edited: list[Any] = list(messages)
        edit.apply(edited, count_tokens=count)
        return Prepared(edited)

    return prepare


def _summarized(kit: Kit, trigger: int, keep: int) -> Strategy:
    from langchain.agents.middleware import SummarizationMiddleware

    summarizer = SummarizationMiddleware(
        kit.summary_model, trigger=("tokens", trigger), keep=("messages", keep)
    )
    states: dict[int, tuple[int, list[BaseMessage]]] = {}

    def prepare(conversation: int, messages: list[BaseMessage], _at: float) -> Prepared:
        # The agent's state without its system prompt, persisted between calls as the
        # middleware leaves it; the summary call happens in before_model.
        seen, state = states.get(conversation, (1, []))
        state = state + [m.model_copy() for m in messages[seen:]]
        update = summarizer.before_model(cast(Any, {"messages": state}), cast(Any, None))
        if update is not None:
            state = list(update["messages"][1:])  # after RemoveMessage(REMOVE_ALL_MESSAGES)
        states[conversation] = (len(messages), state)
        return Prepared([messages[0], *state])

    return prepare


def _line(
    name: str, knobs: Sequence[Knob], default: Knob, make: Callable[[Knob], Strategy]
) -> list[Contender]:
    return [Contender(name, knob, knob == default, partial(make, knob)) for knob in knobs]


def _ours(kit: Kit, options: Mapping[str, Any], knob: Knob) -> Strategy:
    return _plain(kit, knob["budget"], options)


def _peer_trim(kit: Kit, exact: bool, knob: Knob) -> Strategy:
    return _trimmed_by_peer(kit, knob["max_tokens"], exact=exact)


def _peer_edit(kit: Kit, exact: bool, knob: Knob) -> Strategy:
    return _edited(kit, knob["trigger"], knob["keep"], exact=exact)


def _peer_summary(kit: Kit, knob: Knob) -> Strategy:
    return _summarized(kit, knob["trigger"], knob["keep"])


def _unchanged(_conversation: int, messages: list[BaseMessage], _at: float) -> Prepared:
    return Prepared(messages)


def contenders(kit: Kit, *, frontier: bool = False) -> list[Contender]:
    """The contenders in :data:`STRATEGIES` order: each strategy's default point, or with
    ``frontier`` every point of its knob's sweep.

    ``none`` sends everything; ``hard_limit`` trims only to the hard limit (a moving cut);
    :data:`OURS` trim to the budget (knob: the budget). The peers:
    ``trim_messages`` as LangChain's docs configure it for chat models (``strategy="last"``,
    ``start_on="human"``, ``end_on=("human", "tool")``, ``include_system=True``) with the
    approximate counter and with an exact one (the endpoint's tokenizer; knob: ``max_tokens``);
    ``ContextEditingMiddleware``'s ``ClearToolUsesEdit`` with its default approximate counter
    (default point: its own 100,000-token trigger, keep 3) and with the exact one (default point:
    triggered at the budget); ``SummarizationMiddleware`` triggered at a token count, keeping
    a number of messages, its summary made by the same endpoint (knob: trigger and keep).
    """
    workload = kit.workload
    budget = workload.budget
    budgets = budget_points(workload) if frontier else [budget]
    at_budget: Knob = {"budget": budget}
    by_budget: list[Knob] = [{"budget": b} for b in budgets]
    by_max_tokens: list[Knob] = [{"max_tokens": b} for b in budgets]
    trigger_keep: list[Knob] = [{"trigger": b, "keep": 3} for b in budgets]
    if frontier:
        trigger_keep.append({"trigger": budget, "keep": 1})
    default_edit: Knob = {"trigger": CLEAR_TOOL_USES_DEFAULT[0], "keep": CLEAR_TOOL_USES_DEFAULT[1]}
    summaries: list[Knob] = [{"trigger": b, "keep": SUMMARY_KEEP_DEFAULT} for b in budgets]
    if frontier:
        summaries += [{"trigger": budget, "keep": 10}, {"trigger": budget, "keep": 6}]
    line = [
        Contender("none", {}, True, lambda: _unchanged),
        Contender(
            "hard_limit",
            {},
            True,
            partial(_plain, kit, workload.hard_limit, {"prefix_stable": False}),
        ),
    ]
    for name, options in OURS.items():
        line += _line(name, by_budget, at_budget, partial(_ours, kit, options))
    for name, exact in (("trim_messages_approximate", False), ("trim_messages_exact", True)):
        line += _line(name, by_max_tokens, {"max_tokens": budget}, partial(_peer_trim, kit, exact))
    edits = [default_edit, *trigger_keep] if frontier else [default_edit]
    line += _line("context_editing_default", edits, default_edit, partial(_peer_edit, kit, False))
    line += _line(
        "context_editing_exact",
        trigger_keep,
        {"trigger": budget, "keep": 3},
        partial(_peer_edit, kit, True),
    )
    line += _line(
        "summarization",
        summaries,
        {"trigger": budget, "keep": SUMMARY_KEEP_DEFAULT},
        partial(_peer_summary, kit),
    )
    return line
