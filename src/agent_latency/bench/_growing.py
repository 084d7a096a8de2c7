"""The growing-conversation replay: per call, the tokens sent and those a one-slot cache misses.

A conversation is fed to a strategy one turn at a time: each user turn is the question of a
call whose messages are the system prompt, every turn before it and that turn. The prompt a
strategy returns is rendered in the model's tokens exactly as the simulator prefills it
(:meth:`TokenCounter.render_framing` around :meth:`TokenCounter.render_message` of each
message's wire form, so the count equals ``count_messages``), and compared with the previous
call's prompt, as llama-server's single slot holds it: the longest common token prefix is
reused (never the last token, whose logits the model needs), the rest is prefilled. The slot
starts empty for each conversation, and each conversation gets a fresh strategy.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, takewhile
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from agent_latency._caches import LRUCache
from agent_latency._chat_format import content_key, wire_message, wire_role
from agent_latency.bench._evidence import SYSTEM_PROMPT
from agent_latency.bench._public_set import Conversation
from agent_latency.bench._strategies import StrategyFactory
from agent_latency.tokens import TokenCounter

_RENDERED_MESSAGES = 16_384
_RENDERED_BYTES = 256 * 1024 * 1024

Prompt = tuple[tuple[int, ...], ...]
"""A rendered prompt: the framing before the messages, each message, the reply priming."""


class PromptRenderer:
    """Renders messages in a counter's tokens, as the simulator does, each message once.

    Args:
        counter: The counter whose vocabulary and chat framing the prompt is rendered with.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter
        self._messages = LRUCache(_RENDERED_MESSAGES, _RENDERED_BYTES)
        self._framing: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def render(self, messages: Sequence[BaseMessage]) -> Prompt:
        """Returns the prompt's token blocks: framing head, one per message, framing tail."""
        first = wire_role(messages[0]) if messages else ""
        framing = self._framing.get(first)
        if framing is None:
            head, tail = self._counter.render_framing(first or None)
            framing = self._framing[first] = (tuple(head), tuple(tail))
        return (framing[0], *map(self._message, messages), framing[1])

    def _message(self, message: BaseMessage) -> tuple[int, ...]:
        key = content_key(message)
        tokens: tuple[int, ...] | None = self._messages.get(key)
        if tokens is None:
            tokens = tuple(self._counter.render_message(wire_message(message)))
            self._messages.put(key, tokens, 8 * len(tokens) + len(str(key)))
        return tokens


def prompt_tokens(prompt: Prompt) -> int:
    """How many tokens a rendered prompt holds."""
    return sum(map(len, prompt))


def shared_prefix(previous: Prompt, current: Prompt) -> int:
    """How many leading tokens two rendered prompts share."""
    shared = 0
    for index, (left, right) in enumerate(zip(previous, current, strict=False)):
        if left != right:  # whole blocks compare in C; from the first difference, token by token
            rest = zip(
                chain.from_iterable(previous[index:]),
                chain.from_iterable(current[index:]),
                strict=False,
            )
            return shared + sum(1 for _ in takewhile(lambda pair: pair[0] == pair[1], rest))
        shared += len(left)
    return shared


def uncached_tokens(previous: Prompt | None, current: Prompt) -> int:
    """The tokens of ``current`` a slot holding ``previous`` does not spare (at least one)."""
    total = prompt_tokens(current)
    reused = shared_prefix(previous, current) if previous is not None else 0
    return total - max(0, min(reused, total - 1))


@dataclass(frozen=True)
class ReplayRow:
    """One strategy at one budget over the growing replay.

    Attributes:
        strategy: The strategy's name.
        budget: The token budget.
        calls: How many calls were replayed.
        sent_tokens: The prompt tokens sent, summed over the calls.
        uncached_tokens: Of these, the tokens the one-slot cache did not spare.
        trim_ms: Each call's time in the strategy, in milliseconds.
    """

    strategy: str
    budget: int
    calls: int
    sent_tokens: int
    uncached_tokens: int
    trim_ms: tuple[float, ...]

    @property
    def mean_sent(self) -> float:
        """The mean prompt tokens per call."""
        return self.sent_tokens / self.calls if self.calls else 0.0

    @property
    def mean_uncached(self) -> float:
        """The mean uncached tokens per call."""
        return self.uncached_tokens / self.calls if self.calls else 0.0

    @property
    def cached_percent(self) -> float:
        """The share of the tokens sent that came from the cache, in percent."""
        if not self.sent_tokens:
            return 0.0
        return 100.0 * (1 - self.uncached_tokens / self.sent_tokens)

    @property
    def median_trim_ms(self) -> float:
        """The median time per call in the strategy, in milliseconds."""
        return statistics.median(self.trim_ms) if self.trim_ms else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The row's figures, for JSON."""
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "calls": self.calls,
            "mean_sent": round(self.mean_sent, 1),
            "mean_uncached": round(self.mean_uncached, 1),
            "cached_percent": round(self.cached_percent, 1),
            "median_trim_ms": round(self.median_trim_ms, 3),
        }


def growing_calls(
    conversation: Conversation, turns: int | None = None
) -> Iterator[list[BaseMessage]]:
    """Yields the calls of a growing replay of the first ``turns`` turns (all with ``None``):
    one per user turn, each the system prompt, every turn before it and that turn."""
    history = conversation.messages[:turns]
    system = SystemMessage(content=SYSTEM_PROMPT, id="system")
    for index, message in enumerate(history):
        if isinstance(message, HumanMessage):
            yield [system, *history[: index + 1]]


def growing_replay(
    conversations: Sequence[Conversation],
    strategies: Mapping[str, StrategyFactory],
    budgets: Sequence[int],
    *,
    renderer: PromptRenderer,
    turns: int | None = None,
) -> list[ReplayRow]:
    """Replays each conversation growing, through each strategy at each budget.

    Args:
        conversations: The conversations, each replayed on its own (an empty slot, a fresh
            strategy).
        strategies: The strategies' factories by name.
        budgets: The token budgets.
        renderer: Renders the prompts in the model's tokens.
        turns: Replays only each conversation's first ``turns`` turns.

    Returns:
        A row per budget and strategy, budgets in the given order, strategies in theirs.
    """
    rows = []
    calls = [list(growing_calls(c, turns)) for c in conversations]
    for budget in budgets:
        for name, factory in strategies.items():
            sent = uncached = 0
            times: list[float] = []
            for conversation_calls in calls:
                strategy = factory(budget)
                previous: Prompt | None = None
                for messages in conversation_calls:
                    started = time.perf_counter()
                    out = strategy(messages)
                    times.append((time.perf_counter() - started) * 1000)
                    prompt = renderer.render(out)
                    sent += prompt_tokens(prompt)
                    uncached += uncached_tokens(previous, prompt)
                    previous = prompt
            rows.append(ReplayRow(name, budget, len(times), sent, uncached, tuple(times)))
    return rows
