"""The contenders of the mixed workload: our strategies and what users would pick instead.

Each is a function preparing one call's prompt from the conversation so far; ours return the
:class:`TrimResult` (the workload feeds it the server's usage of the request, as the callback
handler does), the peers the messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast

from langchain_core.messages import BaseMessage, trim_messages
from langchain_core.messages.utils import count_tokens_approximately
from langchain_openai import ChatOpenAI
from opentelemetry import trace

from agent_latency._latency_model import LatencyModel
from agent_latency.tokens import TokenCounter
from agent_latency.trimming._cost_aware import CostAwareTrimmer, deep_cut_budgets
from agent_latency.trimming._result import TrimResult
from agent_latency.trimming._trimmer import PriorityTrimmer

if TYPE_CHECKING:
    from agent_latency.bench._workload import MixedWorkload

Prepare = Callable[[int, list[BaseMessage], float], "list[BaseMessage] | TrimResult"]
"""(conversation, its messages so far, virtual time) -> the prompt to send."""


STRATEGIES: Final = (
    "none",
    "hard_limit",
    "moving_cut",
    "prefix_stable",
    "cost_aware",
    "trim_messages_approximate",
    "trim_messages_exact",
    "context_editing_default",
    "context_editing_exact",
    "summarization",
)
"""The contenders' names, in the order :func:`contenders` returns them."""


def contenders(
    workload: MixedWorkload,
    summary_model: ChatOpenAI,
    clock: Callable[[], float],
    latency_model: LatencyModel,
    counter: TokenCounter,
) -> dict[str, Prepare]:
    """The contenders, each as a function preparing one call's prompt.

    ``none`` sends everything; ``hard_limit`` trims only to the hard limit (moving cut);
    ``moving_cut`` and ``prefix_stable`` trim to the budget; ``cost_aware`` is
    :class:`CostAwareTrimmer` (prefix-stable cuts, deep cuts to ``DEEP_CUT_FRACTIONS`` of the
    budget, as :meth:`CostAwareTrimmer.from_settings` makes them). The peers:
    ``trim_messages`` as LangChain's docs configure it for chat models (``strategy="last"``,
    ``start_on="human"``, ``end_on=("human", "tool")``, ``include_system=True``) with the
    approximate counter and with an exact one (``counter``: the endpoint's tokenizer);
    ``ContextEditingMiddleware``'s default edit (``ClearToolUsesEdit()``: 100,000-token trigger,
    approximate counter) and the same edit triggered at the budget with the exact counter;
    ``SummarizationMiddleware`` triggered at the budget, keeping 20 messages, its summary made by
    the same endpoint.
    """
    from langchain.agents.middleware import ClearToolUsesEdit, SummarizationMiddleware

    quiet = trace.NoOpTracerProvider()

    def trimmer(budget: int, stable: bool) -> PriorityTrimmer:
        return PriorityTrimmer(
            budget, prefix_stable=stable, token_counter=counter, tracer_provider=quiet
        )

    def by(trim: PriorityTrimmer) -> Prepare:
        return lambda _conversation, messages, _at: trim.trim(messages)

    cost_aware = CostAwareTrimmer(
        trimmer(workload.budget, True),
        context_window=workload.context_window,
        reserve_for_output=workload.reserve_for_output,
        cache_lifetime_s=workload.cache_lifetime_s,
        latency_model=latency_model,
        deep_trimmers=[trimmer(budget, True) for budget in deep_cut_budgets(workload.budget)],
        clock=clock,
        tracer_provider=quiet,
    )

    def trimmed_by_peer(exact: bool) -> Prepare:
        count: Callable[[list[BaseMessage]], int] = (
            counter.count_messages if exact else count_tokens_approximately
        )
        # As LangChain's docs show it for chat models: the last messages, from a user turn on.
        return lambda _conversation, messages, _at: trim_messages(
            messages,
            max_tokens=workload.budget,
            token_counter=count,
            strategy="last",
            start_on="human",
            end_on=("human", "tool"),
            include_system=True,
        )

    def edited(edit: ClearToolUsesEdit, exact: bool) -> Prepare:
        count = counter.count_messages if exact else count_tokens_approximately

        def prepare(_conversation: int, messages: list[BaseMessage], _at: float) -> list[Any]:
            edited_messages: list[Any] = list(messages)
            edit.apply(edited_messages, count_tokens=count)
            return edited_messages

        return prepare

    summarizer = SummarizationMiddleware(
        summary_model, trigger=("tokens", workload.budget), keep=("messages", 20)
    )
    states: dict[int, tuple[int, list[BaseMessage]]] = {}

    def summarized(conversation: int, messages: list[BaseMessage], _at: float) -> list[Any]:
        # The agent's state without its system prompt, persisted between calls as the
        # middleware leaves it; the summary call happens in before_model.
        seen, state = states.get(conversation, (1, []))
        state = state + [m.model_copy() for m in messages[seen:]]
        update = summarizer.before_model(cast(Any, {"messages": state}), cast(Any, None))
        if update is not None:
            state = list(update["messages"][1:])  # after RemoveMessage(REMOVE_ALL_MESSAGES)
        states[conversation] = (len(messages), state)
        return [messages[0], *state]

    return {
        "none": lambda _conversation, messages, _at: messages,
        "hard_limit": by(trimmer(workload.hard_limit, False)),
        "moving_cut": by(trimmer(workload.budget, False)),
        "prefix_stable": by(trimmer(workload.budget, True)),
        "cost_aware": lambda conversation, messages, _at: cost_aware.trim(
            messages, key=str(conversation)
        ),
        "trim_messages_approximate": trimmed_by_peer(exact=False),
        "trim_messages_exact": trimmed_by_peer(exact=True),
        "context_editing_default": edited(ClearToolUsesEdit(), exact=False),
        "context_editing_exact": edited(ClearToolUsesEdit(trigger=workload.budget), exact=True),
        "summarization": summarized,
    }
