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
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final

from langchain_core.messages import BaseMessage, trim_messages
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


def cache_first_strategies(counter: TokenCounter) -> dict[str, StrategyFactory]:
    """The bench's strategies by name, in table order, all counting with ``counter``."""
    return {
        "send_everything": lambda _budget: list,
        "age_1_1": _trimmer(counter, dict(OURS["age_1_1"])),
        "default": _trimmer(counter, {}),
        "trim_messages": _trim_messages(counter),
        "clear_tool_uses": _clear_tool_uses,
        "bm25_neighbours": bm25_neighbours(counter),
    }
