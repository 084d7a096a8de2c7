"""The priority trimmer: fits every model call's messages into a prompt token budget.

How a trim decides (docs/trimming.md has a worked example):

1. Every message belongs to a *unit* (``_rounds``): a tool call and its results
   are one unit, so they are kept or dropped together. A tool result no preceding tool call asked
   for (an *orphan*) would make the endpoint answer 400; it is always dropped and reported.
2. Every unit belongs to a *priority class*: ``system`` (system messages), ``latest_user`` (the
   last user message), ``tool_result`` (what the agent added after the latest user message: its
   tool calls and their results) and ``history`` (everything before the latest user message).
3. Input that fits is returned unchanged. Otherwise:

   - Must-keep messages are never dropped: system messages (``keep_system``), the latest user
     message (``keep_latest_user``), and the newest tool call of the current turn with its results
     (the model is being asked to read them; without them an agent asks for the same tool again).
   - Every tool result above ``max_tool_result_tokens`` is shortened to it (head and tail kept).
   - Units are dropped in the reverse of ``priority_order``: the whole lowest class goes before
     anything of the next one. Within ``tool_result`` the oldest units go first; within
     ``history`` whole rounds go, the middle first (oldest first), then the ``history_keep_head``
     first rounds (last first), then the ``history_keep_tail`` last rounds (oldest first).
   - With ``prefix_stable`` the amount dropped is rounded up to a multiple of
     ``prefix_step_tokens``, counted from the first unit in drop order, so that while a
     conversation grows the cut point only moves once per step and the prompt prefix stays
     byte-identical for the server's prefix cache in between.
   - If the must-keep messages alone exceed the budget, the largest of their tool results are
     shortened, then the middle of the latest user message; if that is not enough the minimum is
     returned with ``over_budget=True`` and a warning log. A trim never raises for lack of budget.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, cast

from langchain_core.callbacks.manager import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
)
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import TracerProvider
from opentelemetry.util.types import AttributeValue

from agent_latency._config import PRIORITY_CLASSES, PriorityClass, Settings
from agent_latency._messages import coerce_messages
from agent_latency._tokens import REPLY_PRIMING_TOKENS, TokenCounter, role_of
from agent_latency._trace_link import TRIM_EVENT, TRIM_FIELDS, find_run_context
from agent_latency.semconv import TRIM_SPAN_NAME
from agent_latency.trimming._rounds import Unit, group_units
from agent_latency.trimming._shortening import MIN_SHORTENED_TOKENS, MessageShortener

logger = logging.getLogger(__name__)

Action = Literal["kept", "dropped", "shortened"]
"""What happened to one input message."""

Rule = Literal[
    "fits",
    "must_keep",
    "latest_tool_call",
    "within_budget",
    "dropped_for_budget",
    "orphan_tool_result",
    "tool_result_cap",
    "shortened_to_fit",
]
"""Why it happened:

- ``fits``: the whole input fits the budget; kept unchanged.
- ``must_keep``: a system message (``keep_system``) or the latest user message
  (``keep_latest_user``); never dropped.
- ``latest_tool_call``: part of the newest tool call of the current turn; never dropped.
- ``within_budget``: kept; the budget left after the higher-priority classes allowed it.
- ``dropped_for_budget``: dropped; its class ranks lower or it is older than what was kept.
- ``orphan_tool_result``: dropped; a tool result that no preceding tool call asked for.
- ``tool_result_cap``: shortened to ``max_tool_result_tokens``.
- ``shortened_to_fit``: shortened further because the must-keep messages exceed the budget.
"""

DEFAULT_BUDGET_FRACTION = 4
"""``max_tool_result_tokens`` and ``prefix_step_tokens`` default to a quarter of the budget."""

_MUST_KEEP_RULES: frozenset[Rule] = frozenset({"must_keep", "latest_tool_call"})


@dataclass(frozen=True, slots=True)
class MessageDecision:
    """What a trim did with one input message, and why.

    Attributes:
        index: Position of the message in the input.
        role: Its OpenAI role (``system``, ``user``, ``assistant``, ``tool``, ...).
        priority_class: The class it was ranked in.
        action: ``kept``, ``dropped`` or ``shortened``.
        rule: Why (see :data:`Rule`).
        tokens: Its tokens in the input, framing included.
        tokens_after: Its tokens in the output (0 when dropped).
    """

    index: int
    role: str
    priority_class: PriorityClass
    action: Action
    rule: Rule
    tokens: int
    tokens_after: int


@dataclass(frozen=True, slots=True)
class ClassFigures:
    """What a trim did to one priority class.

    Attributes:
        messages: Input messages in the class.
        tokens_before: Their tokens in the input.
        tokens_after: Their tokens in the output.
        dropped_messages: How many were dropped.
        dropped_tokens: The tokens those had.
        shortened_messages: How many were shortened.
        shortened_tokens: Tokens removed by shortening.
    """

    messages: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    dropped_messages: int = 0
    dropped_tokens: int = 0
    shortened_messages: int = 0
    shortened_tokens: int = 0


class _Plan:
    """The per-message state of one trim while it is decided, and the record of it afterwards."""

    __slots__ = (
        "classes",
        "counts",
        "dropped",
        "messages",
        "must_keep",
        "rules",
        "sizes",
        "targets",
        "tokens",
        "tokens_after",
    )

    def __init__(self, messages: list[BaseMessage], counts: list[int]) -> None:
        self.messages = messages
        self.counts = counts
        self.sizes = list(counts)  # planned tokens, once shortened
        self.tokens = sum(counts) + REPLY_PRIMING_TOKENS  # planned tokens of what is kept
        self.classes: list[PriorityClass] = ["history"] * len(messages)
        self.rules: list[Rule] = ["fits"] * len(messages)
        self.dropped = [False] * len(messages)
        self.must_keep = [False] * len(messages)
        self.targets: dict[int, int] = {}
        self.tokens_after: dict[int, int] = {}  # actual tokens of the shortened messages

    def keep(self, indices: Sequence[int], rule: Rule) -> None:
        for index in indices:
            self.rules[index] = rule
            self.must_keep[index] = rule in _MUST_KEEP_RULES

    def drop(self, indices: Sequence[int], rule: Rule) -> None:
        for index in indices:
            if not self.dropped[index]:
                self.dropped[index] = True
                self.tokens -= self.sizes[index]
            self.rules[index] = rule

    def shorten(self, index: int, target: int, rule: Rule) -> None:
        self.tokens -= self.sizes[index] - target
        self.sizes[index] = target
        self.targets[index] = target
        self.rules[index] = rule

    def decision(self, index: int, message: BaseMessage) -> MessageDecision:
        """Returns the decision about the input message at ``index`` (``message`` as sent)."""
        tokens = self.counts[index]
        action: Action = "kept"
        tokens_after = tokens
        if self.dropped[index]:
            action, tokens_after = "dropped", 0
        elif index in self.tokens_after:
            action, tokens_after = "shortened", self.tokens_after[index]
        return MessageDecision(
            index,
            role_of(message),
            self.classes[index],
            action,
            self.rules[index],
            tokens,
            tokens_after,
        )


@dataclass(frozen=True)
class TrimResult:
    """The outcome of one trim.

    Token counts are :meth:`TokenCounter.count_messages` counts: framing and reply priming
    included. The repr leaves out message content. ``decisions`` and ``by_class`` are worked out
    on first access, so a trim in an agent loop does not pay for them.

    Attributes:
        messages: The messages to send, in input order. Kept messages are the input objects
            themselves; shortened ones are new copies.
        tokens_before: Tokens of the input.
        tokens_after: Tokens of ``messages``; at most ``budget`` unless ``over_budget``.
        budget: The prompt token budget.
        dropped_messages: How many input messages are not in ``messages``.
        shortened_messages: How many messages were sent shortened.
        over_budget: Whether even the must-keep messages, shortened, exceed the budget.
        elapsed_ms: How long the trim took.
    """

    messages: list[BaseMessage] = field(repr=False)
    tokens_before: int
    tokens_after: int
    budget: int
    dropped_messages: int
    shortened_messages: int
    over_budget: bool
    elapsed_ms: float
    _plan: _Plan = field(repr=False, compare=False)

    @property
    def changed(self) -> bool:
        """Whether ``messages`` differs from the input."""
        return self.dropped_messages > 0 or self.shortened_messages > 0

    @cached_property
    def decisions(self) -> tuple[MessageDecision, ...]:
        """One decision per input message, in input order."""
        plan = self._plan
        sent = iter(self.messages)
        return tuple(
            plan.decision(index, message if plan.dropped[index] else next(sent))
            for index, message in enumerate(plan.messages)
        )

    @cached_property
    def by_class(self) -> Mapping[PriorityClass, ClassFigures]:
        """Figures per priority class, for every class, highest default priority first."""
        members: dict[PriorityClass, list[MessageDecision]] = {c: [] for c in PRIORITY_CLASSES}
        for decision in self.decisions:
            members[decision.priority_class].append(decision)
        return {c: _figures(decisions) for c, decisions in members.items()}

    def span_attributes(self) -> dict[str, AttributeValue]:
        """Returns the ``agent_latency.trim.*`` attributes describing this trim."""
        return {attribute: getattr(self, field) for field, attribute in TRIM_FIELDS.items()}


@dataclass(slots=True)
class _Block:
    """Units dropped together: one unit, or one history round."""

    priority_class: PriorityClass
    indices: list[int]
    tokens: int


def _validated_int(name: str, value: object, minimum: int, hint: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(
            f"PriorityTrimmer: {name} must be an integer >= {minimum} ({hint}), got {value!r}."
        )
    return value


def _validated_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"PriorityTrimmer: {name} must be True or False, got {value!r}.")
    return value


def _validated_order(value: object) -> tuple[PriorityClass, ...]:
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or sorted(map(str, value)) != sorted(PRIORITY_CLASSES)
        or len(value) != len(PRIORITY_CLASSES)
    ):
        raise ValueError(
            f"PriorityTrimmer: priority_order must list each of {', '.join(PRIORITY_CLASSES)} "
            f"exactly once, highest priority first; got {value!r}."
        )
    return cast(tuple[PriorityClass, ...], tuple(value))


class PriorityTrimmer(Runnable[Any, list[BaseMessage]]):
    """Fits a conversation into a prompt token budget by dropping what matters least.

    A LangChain ``Runnable``: ``prompt | trimmer | model`` works, as do ``invoke``, ``ainvoke``,
    ``batch`` and ``stream``. Each trim is an OpenTelemetry span named ``agent_latency.trim``;
    inside a LangChain run the span joins the run's trace and the :class:`TrimResult` is reported
    as the custom event ``agent_latency.trim`` for the callback handler.

    Args:
        budget: The most prompt tokens to send, by :meth:`TokenCounter.count_messages`.
        priority_order: Which class gets the budget first; each of ``system``, ``latest_user``,
            ``tool_result`` and ``history`` exactly once.
        keep_system: Never drop system messages.
        keep_latest_user: Never drop the latest user message (its middle may be shortened).
        history_keep_head: How many first history rounds are dropped only after the middle ones.
        history_keep_tail: How many last history rounds are dropped only after the middle ones.
        max_tool_result_tokens: A tool result above this many tokens is shortened to it when
            the input does not fit. Default: a quarter of the budget (at least 32).
        prefix_stable: Move the cut point in steps so the prompt prefix stays identical
            across calls of a growing conversation (see ``docs/trimming.md``).
        prefix_step_tokens: The step. Default: a quarter of the budget. A larger step keeps the
            prefix stable for more calls but sends up to that many tokens less context.
        token_counter: The counter to use; pass one to share its cache. Default: a new
            ``TokenCounter()``.
        tracer_provider: Where trim spans go. Default: the global tracer provider.

    Raises:
        ValueError: When an option is invalid; the message names it and the accepted values.
    """

    def __init__(
        self,
        budget: int = 6000,
        *,
        priority_order: Sequence[str] = PRIORITY_CLASSES,
        keep_system: bool = True,
        keep_latest_user: bool = True,
        history_keep_head: int = 2,
        history_keep_tail: int = 4,
        max_tool_result_tokens: int | None = None,
        prefix_stable: bool = True,
        prefix_step_tokens: int | None = None,
        token_counter: TokenCounter | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.budget = _validated_int("budget", budget, 1, "prompt tokens per model call")
        self.priority_order = _validated_order(priority_order)
        self.keep_system = _validated_bool("keep_system", keep_system)
        self.keep_latest_user = _validated_bool("keep_latest_user", keep_latest_user)
        self.history_keep_head = _validated_int(
            "history_keep_head", history_keep_head, 0, "rounds; e.g. 2"
        )
        self.history_keep_tail = _validated_int(
            "history_keep_tail", history_keep_tail, 0, "rounds; e.g. 4"
        )
        default_share = self.budget // DEFAULT_BUDGET_FRACTION
        self.max_tool_result_tokens = _validated_int(
            "max_tool_result_tokens",
            max(default_share, MIN_SHORTENED_TOKENS)
            if max_tool_result_tokens is None
            else max_tool_result_tokens,
            MIN_SHORTENED_TOKENS,
            "a shortened result keeps framing, a marker and some text; or None for budget/4",
        )
        self.prefix_stable = _validated_bool("prefix_stable", prefix_stable)
        step = max(default_share, 1) if prefix_step_tokens is None else prefix_step_tokens
        self.prefix_step_tokens = _validated_int(
            "prefix_step_tokens", step, 1, "or None for budget/4"
        )
        if self.prefix_step_tokens > self.budget:
            raise ValueError(
                f"PriorityTrimmer: prefix_step_tokens must not exceed the budget ({self.budget}), "
                f"got {self.prefix_step_tokens}; use e.g. {default_share} (budget/4)."
            )
        if token_counter is not None and not isinstance(token_counter, TokenCounter):
            raise ValueError(
                "PriorityTrimmer: token_counter must be an agent_latency.TokenCounter or None, "
                f"got {type(token_counter).__name__}."
            )
        self.token_counter = token_counter or TokenCounter()
        self._shortener = MessageShortener(self.token_counter)
        self._tracer = trace.get_tracer("agent_latency", tracer_provider=tracer_provider)

    @classmethod
    def from_settings(cls, settings: Settings, **options: Any) -> PriorityTrimmer:
        """Builds a trimmer from ``settings.prompt``.

        Args:
            settings: Loaded settings; the budget is ``settings.prompt.token_budget`` (the output
                reserve is separate and already checked against the context window).
            **options: Keyword options of :class:`PriorityTrimmer` that win over the settings
                (e.g. ``budget``, ``token_counter``, ``tracer_provider``).
        """
        prompt = settings.prompt
        from_prompt: dict[str, Any] = {
            "budget": prompt.token_budget,
            "priority_order": prompt.priority_order,
            "keep_system": prompt.keep_system,
            "keep_latest_user": prompt.keep_latest_user,
            "history_keep_head": prompt.history_keep_head,
            "history_keep_tail": prompt.history_keep_tail,
        }
        return cls(**{**from_prompt, **options})

    def __repr__(self) -> str:
        return (
            f"PriorityTrimmer(budget={self.budget}, priority_order={self.priority_order}, "
            f"max_tool_result_tokens={self.max_tool_result_tokens}, "
            f"prefix_stable={self.prefix_stable}, prefix_step_tokens={self.prefix_step_tokens})"
        )

    def trim(self, messages: object, *, context: Context | None = None) -> TrimResult:
        """Trims ``messages`` to the budget, recording an ``agent_latency.trim`` span.

        Args:
            messages: A list of LangChain messages and/or OpenAI-format dicts, a
                ``PromptValue``, or a dict with a ``"messages"`` key. Never modified.
            context: The OpenTelemetry context to start the span in. Default: the current one.

        Returns:
            The messages to send and what was done to get them.

        Raises:
            TypeError: When ``messages`` or an item of it is not a message (naming the index).
            ValueError: When an OpenAI-format dict is malformed (naming the index).
        """
        with self._tracer.start_as_current_span(TRIM_SPAN_NAME, context=context) as span:
            result = self._trim(messages)
            span.set_attributes(result.span_attributes())
        if result.over_budget:
            logger.warning(
                "Prompt over budget after trimming: the messages that must be kept need %d "
                "tokens, the budget is %d. Raise the budget or shorten the system prompt.",
                result.tokens_after,
                result.budget,
            )
        return result

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Returns the trimmed messages of ``input`` (see :meth:`trim`)."""
        return self._call_with_config(self._trim_in_run, input, config)

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Returns the trimmed messages of ``input`` (see :meth:`trim`).

        The trim itself is synchronous: it is CPU-only and takes about a millisecond.
        """
        return await self._acall_with_config(self._atrim_in_run, input, config)

    def as_pre_model_hook(self) -> Callable[[Any], dict[str, list[BaseMessage]]]:
        """Returns a ``pre_model_hook`` for LangGraph's ``create_react_agent``.

        The hook trims the state's messages into ``llm_input_messages``, so the model sees the
        trimmed list while the graph state keeps the full history.
        """

        def trim_before_model(state: Any) -> dict[str, list[BaseMessage]]:
            messages = state["messages"] if isinstance(state, Mapping) else state.messages
            return {"llm_input_messages": self.invoke(messages)}

        return trim_before_model

    def _trim_in_run(
        self, input_: Any, run_manager: CallbackManagerForChainRun
    ) -> list[BaseMessage]:
        result = self.trim(input_, context=_run_context(run_manager))
        try:
            run_manager.get_child().on_custom_event(TRIM_EVENT, result, run_id=run_manager.run_id)
        except Exception:  # a handler with raise_error=True must not fail the trim
            logger.debug("Reporting the trim event failed", exc_info=True)
        return result.messages

    async def _atrim_in_run(
        self, input_: Any, run_manager: AsyncCallbackManagerForChainRun
    ) -> list[BaseMessage]:
        result = self.trim(input_, context=_run_context(run_manager))
        try:
            await run_manager.get_child().on_custom_event(
                TRIM_EVENT, result, run_id=run_manager.run_id
            )
        except Exception:  # a handler with raise_error=True must not fail the trim
            logger.debug("Reporting the trim event failed", exc_info=True)
        return result.messages

    def _trim(self, value: object) -> TrimResult:
        started = time.perf_counter()
        messages = coerce_messages(value)
        counts = [self.token_counter.count_message(message) for message in messages]
        plan = _Plan(messages, counts)
        units = group_units(messages)
        self._classify(plan, units)
        if plan.tokens > self.budget:
            self._mark_kept(plan, units)
            self._cap_tool_results(plan)
            self._drop_by_priority(plan, units)
            self._shorten_must_keep(plan)
        return self._result(plan, started)

    def _classify(self, plan: _Plan, units: list[Unit]) -> None:
        """Assigns every message its class, and drops orphan tool results with a warning."""
        latest_user = max((u.indices[0] for u in units if u.kind == "user"), default=-1)
        for unit in units:
            first = unit.indices[0]
            priority_class: PriorityClass
            if unit.kind == "system":
                priority_class = "system"
            elif first == latest_user:
                priority_class = "latest_user"
            elif first > latest_user:
                priority_class = "tool_result"
            else:
                priority_class = "history"
            for index in unit.indices:
                plan.classes[index] = priority_class
        orphans = [u.indices[0] for u in units if u.kind == "orphan"]
        if orphans:
            # An endpoint rejects the whole request over one of these (HTTP 400), so they go.
            plan.drop(orphans, "orphan_tool_result")
            logger.warning(
                "Dropped %d tool result(s) answering no preceding tool call, at message "
                "index(es) %s; check the tool_call_id of the ToolMessages you pass.",
                len(orphans),
                orphans,
            )

    def _mark_kept(self, plan: _Plan, units: list[Unit]) -> None:
        """Marks the must-keep units, and every other surviving unit as kept within budget."""
        latest_tool_call: Unit | None = None
        for unit in units:
            priority_class = plan.classes[unit.indices[0]]
            if plan.dropped[unit.indices[0]]:
                continue
            if (priority_class == "system" and self.keep_system) or (
                priority_class == "latest_user" and self.keep_latest_user
            ):
                plan.keep(unit.indices, "must_keep")
            else:
                plan.keep(unit.indices, "within_budget")
                if priority_class == "tool_result" and unit.kind == "tool_call":
                    latest_tool_call = unit
        if latest_tool_call is not None:
            plan.keep(latest_tool_call.indices, "latest_tool_call")

    def _cap_tool_results(self, plan: _Plan) -> None:
        cap = self.max_tool_result_tokens
        for index, message in enumerate(plan.messages):
            if (
                isinstance(message, ToolMessage)
                and not plan.dropped[index]
                and plan.sizes[index] > cap
            ):
                plan.shorten(index, cap, "tool_result_cap")

    def _drop_by_priority(self, plan: _Plan, units: list[Unit]) -> None:
        """Drops blocks, lowest priority first, until the rest fits (rounded up to the step)."""
        excess = plan.tokens - self.budget
        if excess <= 0:
            return
        step = self.prefix_step_tokens if self.prefix_stable else 1
        goal = math.ceil(excess / step) * step
        dropped = 0
        previous_class: PriorityClass | None = None
        for block in self._drop_order(plan, units):
            # Rounding up to the step never reaches into a class that the exact excess spares.
            if dropped >= goal or (dropped >= excess and block.priority_class != previous_class):
                break
            plan.drop(block.indices, "dropped_for_budget")
            dropped += block.tokens
            previous_class = block.priority_class

    def _drop_order(self, plan: _Plan, units: list[Unit]) -> list[_Block]:
        droppable: dict[PriorityClass, list[Unit]] = {c: [] for c in self.priority_order}
        for unit in units:
            first = unit.indices[0]
            if not plan.dropped[first] and not plan.must_keep[first]:
                droppable[plan.classes[first]].append(unit)

        def block(priority_class: PriorityClass, members: list[Unit]) -> _Block:
            indices = [index for unit in members for index in unit.indices]
            return _Block(priority_class, indices, sum(plan.sizes[i] for i in indices))

        order: list[_Block] = []
        for priority_class in reversed(self.priority_order):
            members = droppable[priority_class]
            if priority_class == "history":
                order.extend(block("history", r) for r in self._history_drop_order(members))
            elif priority_class == "system":
                # The first system message usually holds the main instructions: it goes last.
                order.extend(block("system", [unit]) for unit in reversed(members))
            else:
                order.extend(block(priority_class, [unit]) for unit in members)
        return order

    def _history_drop_order(self, units: list[Unit]) -> list[list[Unit]]:
        """Returns history rounds in drop order: middle and tail oldest first, head last first."""
        rounds: dict[int, list[Unit]] = {}
        for unit in units:
            rounds.setdefault(unit.round, []).append(unit)
        ordered = [rounds[r] for r in sorted(rounds)]
        # With fewer rounds than head and tail together, the tail (the most recent) gets them.
        tail_start = max(len(ordered) - self.history_keep_tail, 0)
        head_end = min(self.history_keep_head, tail_start)
        head, middle, tail = ordered[:head_end], ordered[head_end:tail_start], ordered[tail_start:]
        return middle + head[::-1] + tail  # the history erodes outwards from its middle

    def _shorten_must_keep(self, plan: _Plan) -> None:
        """Shortens the largest must-keep tool results, then the latest user message."""
        excess = plan.tokens - self.budget
        if excess <= 0:
            return
        kept = [i for i in range(len(plan.messages)) if plan.must_keep[i]]
        tool_results = [i for i in kept if isinstance(plan.messages[i], ToolMessage)]
        tool_results.sort(key=lambda i: (-plan.sizes[i], i))
        latest_user = [
            i
            for i in kept
            if plan.classes[i] == "latest_user" and isinstance(plan.messages[i], HumanMessage)
        ]
        for index in tool_results + latest_user:
            target = max(MIN_SHORTENED_TOKENS, plan.sizes[index] - excess)
            if target < plan.sizes[index]:
                excess -= plan.sizes[index] - target
                plan.shorten(index, target, "shortened_to_fit")
            if excess <= 0:
                return

    def _result(self, plan: _Plan, started: float) -> TrimResult:
        output: list[BaseMessage] = []
        dropped = plan.dropped
        for index, message in enumerate(plan.messages):
            if dropped[index]:
                continue
            target = plan.targets.get(index)
            if target is not None:
                message, plan.tokens_after[index] = self._shortener.shorten(message, target)
                # The planned size was the target; the copy can come out a little smaller.
                plan.tokens -= target - plan.tokens_after[index]
            output.append(message)
        return TrimResult(
            messages=output,
            tokens_before=sum(plan.counts) + REPLY_PRIMING_TOKENS,
            tokens_after=plan.tokens,
            budget=self.budget,
            dropped_messages=len(plan.messages) - len(output),
            shortened_messages=len(plan.targets),
            over_budget=plan.tokens > self.budget,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            _plan=plan,
        )


def _figures(decisions: list[MessageDecision]) -> ClassFigures:
    dropped = [d for d in decisions if d.action == "dropped"]
    shortened = [d for d in decisions if d.action == "shortened"]
    return ClassFigures(
        messages=len(decisions),
        tokens_before=sum(d.tokens for d in decisions),
        tokens_after=sum(d.tokens_after for d in decisions),
        dropped_messages=len(dropped),
        dropped_tokens=sum(d.tokens for d in dropped),
        shortened_messages=len(shortened),
        shortened_tokens=sum(d.tokens - d.tokens_after for d in shortened),
    )


def _run_context(
    run_manager: CallbackManagerForChainRun | AsyncCallbackManagerForChainRun,
) -> Context | None:
    """Returns the OpenTelemetry context of the trim's run, or of its parent run."""
    return find_run_context(run_manager.handlers, run_manager.run_id) or find_run_context(
        run_manager.handlers, run_manager.parent_run_id
    )
