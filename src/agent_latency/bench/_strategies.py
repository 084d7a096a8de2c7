"""The strategies the cache-first bench compares, each built per budget.

A :data:`TrimStrategy` takes the messages of one call (system prompt, history, the question as
the last user message) and returns what it sends; a :data:`StrategyFactory` builds one for a
token budget. :func:`cache_first_strategies` returns them by name, in table order:

- ``send_everything``: the messages unchanged.
- ``age_1_1``: ``PriorityTrimmer`` with the age cut and prefix-stable steps, one head and one
  tail round (the contenders' ``age_1_1`` options).
- ``default``: ``PriorityTrimmer(budget=...)`` with whatever its defaults are at run time.
- ``trim_messages``: langchain-core's, ``strategy="last"`` with the given counter, configured
  as the mixed workload's contender (from a user turn on, system prompt kept).
- ``clear_tool_uses``: LangChain's ``ClearToolUsesEdit()`` as shipped (its 100,000-token
  trigger, keep 3, approximate counting). It only clears tool results: on a chat without tool
  messages it sends everything, by design.
- ``bm25_neighbours``: the yardstick of :func:`bm25_neighbours`.
- ``summarization_stand_in``: LangChain's ``SummarizationMiddleware`` over an agent's state
  (:func:`summarization_stand_in`), its summaries written by a stand-in: a fixed text of
  :data:`STAND_IN_SUMMARY_WORDS` words, not a model's summary.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, cast

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, trim_messages
from opentelemetry import trace

from agent_latency.bench._contenders import OURS
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer

TrimStrategy = Callable[[list[BaseMessage]], list[BaseMessage]]
"""One call's messages -> the messages sent."""
StrategyFactory = Callable[[int], TrimStrategy]
"""A token budget -> a strategy trimming to it."""

BM25_K1: Final = 1.5
BM25_B: Final = 0.75
_WORD = re.compile(r"\w+")
_QUIET: Final = trace.NoOpTracerProvider()
STAND_IN_SUMMARY_WORDS: Final = 150
"""The length of the stand-in summary, in words (about 200 tokens: a few paragraphs)."""
STAND_IN_SUMMARY: Final = "[stand-in summary {number}, not a model's] " + " ".join(
    f"point{i}" for i in range(STAND_IN_SUMMARY_WORDS - 6)
)
"""What the stand-in summariser answers, ``{number}`` its count in the conversation: each
summary differs from the one before from its first words on, as a model's would."""
SUMMARY_KEEP_SHARE: Final = 0.5
"""What a summary keeps of the budget's room as recent messages (``keep=("tokens", ...)``)."""


def _trimmer(counter: TokenCounter, options: dict[str, Any]) -> StrategyFactory:
    def build(budget: int) -> TrimStrategy:
        trimmer = PriorityTrimmer(
            budget=budget, token_counter=counter, tracer_provider=_QUIET, **options
        )
        return lambda messages: trimmer.trim(messages).messages

    return build


def _trim_messages(counter: TokenCounter) -> StrategyFactory:
    def build(budget: int) -> TrimStrategy:
        return lambda messages: trim_messages(
            messages,
            max_tokens=budget,
            token_counter=counter.count_messages,
            strategy="last",
            start_on="human",
            end_on=("human", "tool"),
            include_system=True,
        )

    return build


def _clear_tool_uses(_budget: int) -> TrimStrategy:
    from langchain.agents.middleware import ClearToolUsesEdit
    from langchain_core.messages.utils import count_tokens_approximately

    edit = ClearToolUsesEdit()

    def send(messages: list[BaseMessage]) -> list[BaseMessage]:
        edited: list[Any] = list(messages)
        edit.apply(edited, count_tokens=count_tokens_approximately)
        return edited

    return send


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def bm25_neighbours(counter: TokenCounter) -> StrategyFactory:
    """The plain yardstick: the question's BM25 hits over the turns, each with its neighbours.

    The history's turns (everything between the leading system messages and the last message,
    the question) are scored with BM25 (k1 1.5, b 0.75) against the question's words. In order
    of score, each hit joins with the turn before and the turn after it while they fit the
    budget (a group that does not fit is skipped); the room left is filled with the newest
    turns, back to the first that does not fit; the system messages and the question are
    always sent, everything in conversation order.
    """

    def build(budget: int) -> TrimStrategy:
        def send(messages: list[BaseMessage]) -> list[BaseMessage]:
            head = 0
            while head < len(messages) - 1 and messages[head].type == "system":
                head += 1
            turns = messages[head:-1]
            fixed = [*messages[:head], messages[-1]]
            room = budget - counter.count_messages(fixed)
            cost = [counter.count_message(m) for m in turns]
            kept: set[int] = set()

            def take(group: Sequence[int]) -> bool:
                nonlocal room
                new = [i for i in group if i not in kept]
                need = sum(cost[i] for i in new)
                if need > room:
                    return False
                kept.update(new)
                room -= need
                return True

            scores = _bm25(
                [_words(str(m.content)) for m in turns], _words(str(messages[-1].content))
            )
            for hit in sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: -scores[i]):
                take([j for j in (hit - 1, hit, hit + 1) if 0 <= j < len(turns)])
            for newest in reversed(range(len(turns))):
                if not take([newest]):
                    break
            return [*messages[:head], *(turns[i] for i in sorted(kept)), messages[-1]]

        return send

    return build


def _bm25(documents: list[list[str]], query: list[str]) -> list[float]:
    if not documents:
        return []
    average = sum(map(len, documents)) / len(documents) or 1.0
    frequency = Counter(word for document in documents for word in set(document))
    terms = set(query)
    scores = []
    for document in documents:
        counts = Counter(document)
        norm = BM25_K1 * (1 - BM25_B + BM25_B * len(document) / average)
        score = 0.0
        for term in terms & counts.keys():
            idf = math.log(1 + (len(documents) - frequency[term] + 0.5) / (frequency[term] + 0.5))
            score += idf * counts[term] * (BM25_K1 + 1) / (counts[term] + norm)
        scores.append(score)
    return scores


def summarization_stand_in(counter: TokenCounter) -> StrategyFactory:
    """LangChain's ``SummarizationMiddleware`` as an agent runs it, with a stand-in summariser.

    The strategy holds the agent's state, the messages after the leading system messages: each
    call appends to it the messages that are new since the previous call (a call that does not
    extend the previous one starts the state afresh), then runs the middleware's
    ``before_model`` on it, which replaces the state with a summary and the most recent
    messages when it has reached the budget's room (the budget less the system messages:
    ``trigger=("tokens", room)``, ``keep=("tokens", SUMMARY_KEEP_SHARE * room)``, counted with
    ``counter``). The call sends the system messages and the state.

    The summary is written by a stand-in outside this package: langchain-core's
    ``GenericFakeChatModel`` answering :data:`STAND_IN_SUMMARY`, numbered, every time, so the
    replay is deterministic and needs no model. It measures what a summary does to the prompt (the
    prefix it rewrites, the tokens sent and uncached), not what a summary keeps (the stand-in
    holds none of the conversation, and only evidence sent verbatim counts as kept), nor the
    summary call itself (a real summariser prefills the summarised messages, up to the
    middleware's ``trim_tokens_to_summarize``, before the model call that waits for it).
    """
    from langchain.agents.middleware import SummarizationMiddleware

    def count(messages: Iterable[Any]) -> int:  # the middleware's counter gets messages only
        return counter.count_messages(list(messages))

    def build(budget: int) -> TrimStrategy:
        state: list[AnyMessage] = []
        seen: list[BaseMessage] = []
        middleware: list[SummarizationMiddleware] = []

        def send(messages: list[BaseMessage]) -> list[BaseMessage]:
            head = 0
            while head < len(messages) and messages[head].type == "system":
                head += 1
            system, rest = messages[:head], messages[head:]
            if not middleware:
                room = max(budget - counter.count_messages(system), 2)
                summariser = GenericFakeChatModel(
                    messages=(
                        AIMessage(STAND_IN_SUMMARY.format(number=n)) for n in itertools.count(1)
                    )
                )
                middleware.append(
                    SummarizationMiddleware(
                        summariser,
                        trigger=("tokens", room),
                        keep=("tokens", max(math.floor(SUMMARY_KEEP_SHARE * room), 1)),
                        token_counter=count,
                    )
                )
            extends = len(rest) >= len(seen) and all(
                a is b for a, b in zip(seen, rest, strict=False)
            )
            if not extends:
                state.clear()
                seen.clear()
            # Copies: the middleware gives messages without an id one, in place.
            state.extend(cast("AnyMessage", m.model_copy()) for m in rest[len(seen) :])
            seen[:] = rest
            update = middleware[0].before_model({"messages": state}, None)  # type: ignore[arg-type]
            if update is not None:  # RemoveMessage(REMOVE_ALL), the summary, what it keeps
                state[:] = update["messages"][1:]
            return [*system, *state]

        return send

    return build


def cache_first_strategies(counter: TokenCounter) -> dict[str, StrategyFactory]:
    """The bench's strategies by name, in table order, all counting with ``counter``."""
    return {
        "send_everything": lambda _budget: list,
        "age_1_1": _trimmer(counter, dict(OURS["age_1_1"])),
        "default": _trimmer(counter, {}),
        "trim_messages": _trim_messages(counter),
        "clear_tool_uses": _clear_tool_uses,
        "bm25_neighbours": bm25_neighbours(counter),
        "summarization_stand_in": summarization_stand_in(counter),
    }
