"""What the mixed workload measured: every call, per strategy and knob point, and the report.

Each value here is frozen and knows its entry in the ``--json`` document. A call the server
refused keeps the server's message (redacted) instead of its timings; its facts count as lost.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_latency.bench._facts import Fact
from agent_latency.bench._measurements import percentile
from agent_latency.bench._mixed import MixedWorkload

_MAX_REFUSALS_SHOWN = 3


@dataclass(frozen=True)
class StrategyCall:
    """One call of one strategy.

    Attributes:
        conversation: Its conversation.
        end: The prompt was the conversation's first ``end`` messages, before the strategy.
        idle: It came after an idle gap.
        wait_ms: Time to first token plus the strategy's own time (a trim; a summary call);
            ``None`` when the server refused the request.
        ttft_ms: The callback handler's time to first token; ``None`` when refused.
        tokens: Our count of the prompt sent (the endpoint's tokenizer).
        server_tokens: The server's ``usage.prompt_tokens``, if it reported one.
        cached_tokens: The prompt tokens the server reported taking from its prefix cache.
        invalid: The prompt breaks OpenAI's rules (an orphan tool result, an unanswered call).
        refused: The server's message when it refused the request (HTTP 400, 413, 422).
        needed: How many facts the call's question needs.
        kept: How many of them are still in what was sent (0 when refused).
        answered: With answers asked for, whether the answer gave the fact; ``None`` otherwise.
        answer: With answers asked for, the model's answer to the fact question: to the prompt
            sent, less the bench's cache salt (the workload's own made-up conversation: no
            user content).
        server_prefill_ms: How long the server said it prefilled, where it said so.
        ttft_remainder_ms: The rest of the time to first token (client, network, queue), where
            the server said how long it prefilled.
        fact: The fact the call's question needs, if any.
    """

    conversation: int
    end: int
    idle: bool
    wait_ms: float | None
    ttft_ms: float | None
    tokens: int
    server_tokens: int | None
    cached_tokens: int | None
    invalid: bool
    refused: str | None
    needed: int
    kept: int
    answered: bool | None = None
    answer: str | None = None
    server_prefill_ms: float | None = None
    ttft_remainder_ms: float | None = None
    fact: Fact | None = None

    @property
    def sent_tokens(self) -> int:
        """The prompt's size: the server's count when it reported one, else ours."""
        return self.server_tokens if self.server_tokens is not None else self.tokens

    def to_json(self) -> dict[str, Any]:
        """The call's entry under ``"per_call"``."""
        return {
            "conversation": self.conversation,
            "messages": self.end,
            "idle": self.idle,
            "wait_ms": None if self.wait_ms is None else round(self.wait_ms, 1),
            "ttft_ms": None if self.ttft_ms is None else round(self.ttft_ms, 1),
            "tokens": self.tokens,
            "server_tokens": self.server_tokens,
            "cached_tokens": self.cached_tokens,
            "invalid": self.invalid,
            "refused": self.refused,
            "facts_needed": self.needed,
            "facts_kept": self.kept,
            "answered": self.answered,
            "answer": self.answer,
            "server_prefill_ms": _rounded(self.server_prefill_ms),
            "ttft_remainder_ms": _rounded(self.ttft_remainder_ms),
            "fact": None
            if self.fact is None
            else {
                "value": self.fact.value,
                "where": self.fact.where,
                "language": self.fact.language,
                "same_words": self.fact.same_words,
            },
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


@dataclass(frozen=True)
class StrategyRun:
    """One strategy at one knob point, over the whole workload.

    Attributes:
        strategy: Its name.
        knob: Its knob's setting (empty for a strategy without one).
        default: Whether it is the point a user of the strategy gets without setting the knob.
        calls: Every call, in the order made.
        hard_limit: The workload's hard limit, for the violations.
        answers: Whether the fact questions were answered and scored.
    """

    strategy: str
    knob: Mapping[str, int]
    default: bool
    calls: tuple[StrategyCall, ...]
    hard_limit: int
    answers: bool = False

    @property
    def answered_calls(self) -> list[StrategyCall]:
        """The calls the server answered."""
        return [call for call in self.calls if call.wait_ms is not None]

    def _waits(self) -> list[float]:
        return [call.wait_ms for call in self.calls if call.wait_ms is not None]

    @property
    def mean_wait_ms(self) -> float | None:
        """The user's mean wait (time to first token + the strategy's own time)."""
        waits = self._waits()
        return statistics.fmean(waits) if waits else None

    @property
    def p95_wait_ms(self) -> float | None:
        """The 95th percentile of the wait."""
        waits = self._waits()
        return percentile(waits, 0.95) if waits else None

    @property
    def retention(self) -> float | None:
        """The share of the facts the calls' questions need that were still in what was sent
        (a refused call loses its facts); ``None`` when no call needed one."""
        needed = sum(call.needed for call in self.calls)
        return sum(call.kept for call in self.calls) / needed if needed else None

    def retention_by(self) -> dict[str, dict[str, float]]:
        """The retention by the kind of fact: where it was stated (``user``, ``tool_result``),
        whether the question used its words (``same_words``: ``"true"``/``"false"``), its
        language (``en``, ``zh``); a kind no call needed is left out."""
        shares: dict[str, dict[str, float]] = {}
        for kind, of in (
            ("where", lambda f: f.where),
            ("same_words", lambda f: str(f.same_words).lower()),
            ("language", lambda f: f.language),
        ):
            needed: dict[str, list[int]] = {}
            for call in self.calls:
                if call.fact is not None:
                    needed.setdefault(of(call.fact), []).append(call.kept)
            shares[kind] = {value: sum(kept) / len(kept) for value, kept in sorted(needed.items())}
        return shares

    @property
    def answer_accuracy(self) -> float | None:
        """The share of the fact questions answered right (a refused one is wrong); ``None``
        when answers were not asked for."""
        questions = [call for call in self.calls if call.needed]
        if not self.answers or not questions:
            return None
        return sum(call.answered is True for call in questions) / len(questions)

    @property
    def context_tokens(self) -> float | None:
        """The mean prompt size sent (the server's count where it reported one)."""
        answered = self.answered_calls
        return statistics.fmean(c.sent_tokens for c in answered) if answered else None

    @property
    def prefilled_tokens(self) -> int:
        """Prompt tokens the server had to prefill (all of a call whose cache it did not report)."""
        return sum(c.sent_tokens - (c.cached_tokens or 0) for c in self.answered_calls)

    @property
    def violations(self) -> int:
        """Calls whose prompt exceeded the hard limit (the server's count where it reported one)."""
        return sum(c.sent_tokens > self.hard_limit for c in self.calls)

    @property
    def invalid_requests(self) -> int:
        """Calls whose prompt broke OpenAI's rules, or that the server refused."""
        return sum(c.invalid or c.refused is not None for c in self.calls)

    @property
    def refusals(self) -> list[str]:
        """The distinct messages of the server's refusals, the first few."""
        return list(dict.fromkeys(c.refused for c in self.calls if c.refused))[:_MAX_REFUSALS_SHOWN]

    def to_json(self) -> dict[str, Any]:
        """The strategy's entry under ``"workload"."strategies"``."""
        answered = self.answered_calls
        ttfts = [c.ttft_ms for c in answered if c.ttft_ms is not None]
        return {
            "name": self.strategy,
            "knob": dict(self.knob),
            "mean_wait_ms": _rounded(self.mean_wait_ms),
            "p95_wait_ms": _rounded(self.p95_wait_ms),
            "retention": None if self.retention is None else round(self.retention, 4),
            "facts_needed": sum(c.needed for c in self.calls),
            "facts_kept": sum(c.kept for c in self.calls),
            "retention_by": _shares(self.retention_by()),
            "answer_accuracy": _fraction(self.answer_accuracy),
            "context_tokens": _rounded(self.context_tokens),
            "prefilled_tokens": self.prefilled_tokens,
            "hard_limit_violations": self.violations,
            "invalid_requests": self.invalid_requests,
            "refused_requests": sum(c.refused is not None for c in self.calls),
            "refusals": self.refusals,
            "calls": len(self.calls),
            "prompt_tokens": sum(c.sent_tokens for c in answered),
            "prompt_tokens_counted": sum(c.server_tokens is None for c in answered),
            "mean_ttft_ms": _rounded(statistics.fmean(ttfts) if ttfts else None),
            "p95_ttft_ms": _rounded(percentile(ttfts, 0.95) if ttfts else None),
            "cached_tokens": _sum([c.cached_tokens for c in answered]),
            "mean_server_prefill_ms": _mean([c.server_prefill_ms for c in answered]),
            "mean_ttft_remainder_ms": _mean([c.ttft_remainder_ms for c in answered]),
            "per_call": [call.to_json() for call in self.calls],
        }

    def frontier_json(self, profile: str | None) -> dict[str, Any]:
        """The point's entry under ``"frontier"``."""
        return {
            "profile": profile,
            "strategy": self.strategy,
            "knob": dict(self.knob),
            "default": self.default,
            "mean_wait_ms": _rounded(self.mean_wait_ms),
            "p95_wait_ms": _rounded(self.p95_wait_ms),
            "retention": None if self.retention is None else round(self.retention, 4),
            "retention_by": _shares(self.retention_by()),
            "context_tokens": _rounded(self.context_tokens),
            "answer_accuracy": _fraction(self.answer_accuracy),
            "prefilled_tokens": self.prefilled_tokens,
            "hard_limit_violations": self.violations,
            "invalid_requests": self.invalid_requests,
        }


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean of the values the server reported; ``None`` when it reported none."""
    reported = [value for value in values if value is not None]
    return round(statistics.fmean(reported), 1) if reported else None


def _sum(values: Sequence[int | None]) -> int | None:
    reported = [value for value in values if value is not None]
    return sum(reported) if reported else None


def _shares(by: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    return {
        kind: {value: round(share, 4) for value, share in of.items()} for kind, of in by.items()
    }


def _fraction(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass(frozen=True)
class WhereItRan:
    """The simulator or the endpoint the workload ran on.

    Attributes:
        server: The endpoint's API root without credentials; ``None`` on the simulator.
        model: The model name sent.
        profile: The simulator's server profile, if one was asked for.
        latency: On the simulator: its latency model (overhead, prefill, attention, cache
            rules) and the clock scale the workload ran it at.
    """

    server: str | None
    model: str
    profile: str | None = None
    latency: Mapping[str, Any] | None = None

    @property
    def simulated(self) -> bool:
        """Whether it ran on the embedded simulator."""
        return self.server is None


@dataclass(frozen=True)
class WorkloadReport:
    """Everything one run of the mixed workload measured.

    Attributes:
        workload: Its shape.
        calls_per_conversation: The calls each conversation made.
        where: The simulator or endpoint.
        strategies: Each strategy at its default point, in order.
        frontier: With the frontier: every point of every strategy's sweep (the defaults
            included); else empty.
        answers: Whether the fact questions were answered and scored.
    """

    workload: MixedWorkload
    calls_per_conversation: int
    where: WhereItRan
    strategies: tuple[StrategyRun, ...]
    frontier: tuple[StrategyRun, ...] = ()
    answers: bool = False

    def to_json(self) -> dict[str, Any]:
        """The ``"workload"`` entry of the ``--json`` document."""
        shape = {name: getattr(self.workload, name) for name in self.workload.__dataclass_fields__}
        document: dict[str, Any] = {
            "name": "mixed",
            "profile": self.where.profile,
            "answers": self.answers,
            "strategies": [run.to_json() for run in self.strategies],
            "workload": {
                **shape,
                "hard_limit": self.workload.hard_limit,
                "calls_per_conversation": self.calls_per_conversation,
            },
        }
        if self.where.simulated:
            document["simulator"] = dict(self.where.latency or {})
        else:
            document["endpoint"] = {
                "server": self.where.server,
                "model": self.where.model,
            }
        return document

    def frontier_json(self) -> list[dict[str, Any]]:
        """The ``"frontier"`` entries: every point swept."""
        return [run.frontier_json(self.where.profile) for run in self.frontier]


def combined_frontier(reports: Sequence[WorkloadReport]) -> list[dict[str, Any]]:
    """The ``"frontier"`` entries of several runs (one per profile), in order."""
    return [entry for report in reports for entry in report.frontier_json()]
