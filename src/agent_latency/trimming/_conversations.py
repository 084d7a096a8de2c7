"""What the cost-aware trimmer remembers of a conversation, and the cache state it infers.

A conversation's record is its latest call: the input, the prompt as sent, when, and (once the
model call has ended, reported by the callback handler through the trim result's ``on_usage``)
how many prompt tokens the server said it took from its cache. The next call infers from it
what the server still holds (:func:`cache_state`):

- ``cold``: no previous call is known;
- ``expired``: the previous call is older than the cache lifetime;
- ``evicted``: within the lifetime, but the server was found not to hold what it had been sent
  (evicted by other traffic, or no prefix cache at all), until a call shows it does again;
- ``warm``: otherwise, the previous prompt as sent is cached.

Only a call sent assuming a cache (``warm`` or ``evicted``) says anything. Its report is the
evidence when the server reports cached tokens and the prompt began with at least
:data:`MIN_EVIDENCE_TOKENS` of the previous one: it missed when the server reported less than
half of those cached. A server that reports no cached tokens (llama-cpp-python when streaming)
is judged by the call's time to first token instead, when the latency model predicts the cached
and the uncached prefill far enough apart (:data:`TIMING_EVIDENCE_RATIO`): it missed when the
first token came later than the geometric mean of the two predictions. With neither (no
handler, a blocking call) the state is judged by the clock alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from langchain_core.messages import BaseMessage

from agent_latency._wire import role_of
from agent_latency.trimming._result import MessageDecision, TrimResult

CacheState = Literal["cold", "warm", "expired", "evicted"]
"""What the trimmer assumes the server still caches of a conversation's previous prompt."""

MIN_EVIDENCE_TOKENS: Final = 1024
"""A shorter shared prefix says nothing about the cache: OpenAI caches only prompts of 1,024
tokens or more."""
TIMING_EVIDENCE_RATIO: Final = 1.5
"""A call's time to first token tells a cache hit from a miss only when the miss is predicted to
take at least this many times as long: closer predictions drown in the endpoint's noise."""


@dataclass(slots=True, eq=False)
class Conversation:
    """A conversation's latest call, as sent, and what the server reported of it.

    Attributes:
        inputs: The input messages of the call.
        input_tokens: Their tokens.
        sent: The messages sent.
        sent_tokens: Their tokens (no request framing).
        decisions: What was done to each input message.
        at: When, by the trimmer's clock.
        growth: Tokens the conversation adds per call, smoothed.
        state: The cache state the call was sent assuming.
        shared: Tokens of the messages sent that the previous call's prompt began with.
        missed: Whether, as of the call before, the server did not hold what it had been sent.
        miss_after_ms: A first token later than this says the server did not hold the shared
            prefix; ``None`` when the predictions are too close to tell.
        reported_cached: The server's cached prompt tokens of the call, once reported.
        timed_miss: Whether the call's first token came after ``miss_after_ms``, once reported.
    """

    inputs: tuple[BaseMessage, ...]
    input_tokens: int
    sent: tuple[BaseMessage, ...]
    sent_tokens: int
    decisions: tuple[MessageDecision, ...]
    at: float
    growth: float
    state: CacheState
    shared: int
    missed: bool
    miss_after_ms: float | None = None
    reported_cached: int | None = None
    timed_miss: bool | None = None

    def report_usage(
        self, prompt_tokens: int | None, cached_tokens: int | None, ttft_ms: float | None
    ) -> None:
        """Takes the server's usage and the time to first token of the call (``on_usage`` of
        the trim result).

        Args:
            prompt_tokens: The server's ``prompt_tokens`` (unused: the shared prefix is ours).
            cached_tokens: The prompt tokens it reported cached; ``None``: not reported.
            ttft_ms: The call's time to first token; ``None``: not streamed, or no token.
        """
        # One write each: safe across threads.
        if isinstance(cached_tokens, int) and not isinstance(cached_tokens, bool):
            self.reported_cached = max(cached_tokens, 0)
        elif (
            self.miss_after_ms is not None
            and isinstance(ttft_ms, int | float)
            and not isinstance(ttft_ms, bool)
        ):
            self.timed_miss = ttft_ms > self.miss_after_ms

    def server_missed(self) -> bool:
        """Whether, as of this call's report, the server does not hold what it was sent."""
        if self.state not in ("warm", "evicted"):
            return self.missed  # nothing was expected cached: no new evidence
        reported = self.reported_cached
        if reported is not None:
            return reported < self.shared / 2 if self.shared >= MIN_EVIDENCE_TOKENS else self.missed
        return self.missed if self.timed_miss is None else self.timed_miss


def cache_state(previous: Conversation | None, now: float, lifetime_s: float) -> CacheState:
    """Returns what the server likely holds of the conversation whose latest call is
    ``previous``, at ``now``."""
    if previous is None:
        return "cold"
    if now - previous.at > lifetime_s:
        return "expired"
    return "evicted" if previous.server_missed() else "warm"


def extends(before: Sequence[BaseMessage], now: Sequence[BaseMessage]) -> bool:
    """Whether ``now`` is ``before`` with messages appended."""
    return len(now) >= len(before) and all(
        a is b or a == b for a, b in zip(before, now, strict=False)
    )


def shared_tokens(result: TrimResult, cached: Sequence[BaseMessage]) -> int:
    """Tokens of the leading messages ``result`` sends that the cached prompt began with."""
    shared = 0
    for a, b, tokens in zip(result.messages, cached, result.sent_message_tokens, strict=False):
        if not (a is b or a == b):
            break
        shared += tokens
    return shared


def appended(previous: Conversation, inputs: Sequence[BaseMessage], cut: TrimResult) -> TrimResult:
    """The previous prompt as sent plus the new messages, as a trim of ``inputs``.

    Args:
        previous: The conversation's latest call; ``inputs`` extends its inputs.
        inputs: This call's input messages.
        cut: A trim of ``inputs``: the request's other figures and the messages' classes.
    """
    start = len(previous.inputs)
    counts, classes = cut.message_tokens, cut.priority_classes
    framing = cut.tokens_before - sum(counts)  # tools, response format, reply priming
    decisions = [
        d if d.priority_class == classes[d.index] else replace(d, priority_class=classes[d.index])
        for d in previous.decisions
    ]
    decisions.extend(
        MessageDecision(i, role_of(inputs[i]), classes[i], "kept", "within_budget", c, c)
        for i, c in enumerate(counts[start:], start)
    )
    return TrimResult.from_decisions(
        cut,
        decisions,
        messages=[*previous.sent, *inputs[start:]],
        tokens_after=framing + previous.sent_tokens + sum(counts[start:]),
        over_budget=False,  # the budget is a cut's target: the append is held to the hard limit
    )
