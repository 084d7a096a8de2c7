"""What the cost-aware trimmer foresees of its options, and the record of what it chose.

:class:`Forecast` turns the endpoint's :class:`~agent_latency._latency_model.LatencyModel` into
the two figures a decision needs: an option's mean time to first token over the next calls
(this one, then the conversation growing on a warm cache, cut again when it reaches the hard
limit), and the time to first token past which a call was not served from the cache (the
evidence of a server that reports no cached tokens).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency._latency_model import LatencyModel
from agent_latency.trimming._conversations import TIMING_EVIDENCE_RATIO, CacheState
from agent_latency.trimming._result import TrimResult

Option = Literal["append", "cut", "deep_cut"]
"""Which prompt it sends: previous prompt + new messages, a cut to the budget, or a deeper cut."""


@dataclass(frozen=True)
class CostAwareChoice:
    """One cost-aware decision.

    Attributes:
        result: The trim sent. For ``append`` its ``tokens_after`` may exceed the budget (never
            the hard limit) and ``over_budget`` is ``False``. Its ``on_usage`` takes the
            server's usage of the request and its time to first token (the callback handler
            calls it).
        cache_state: The cache state assumed.
        option: The option taken.
        predicted_ms: Each option considered, with its predicted mean TTFT over the next calls;
            empty (no prediction: the cut is sent) while the latency model has too little
            evidence of the endpoint.
        hard_limit: The prompt tokens never exceeded.
    """

    result: TrimResult
    cache_state: CacheState
    option: Option
    predicted_ms: Mapping[Option, float]
    hard_limit: int

    def span_attributes(self) -> dict[str, AttributeValue]:
        """Returns the cost-aware attributes of the trim span."""
        attributes: dict[str, AttributeValue] = {
            semconv.TRIM_CACHE_STATE: self.cache_state,
            semconv.TRIM_OPTION: self.option,
            semconv.TRIM_HARD_LIMIT: self.hard_limit,
        }
        for option, ms in self.predicted_ms.items():
            attributes[semconv.TRIM_PREDICTED_TTFT_PREFIX + option] = round(ms, 1)
        return attributes


@dataclass(frozen=True)
class Forecast:
    """Predictions over the next calls of a conversation, from an endpoint's latency model.

    Attributes:
        latency_model: The endpoint's latency model.
        horizon_calls: Over how many calls (this one included) an option is judged.
    """

    latency_model: LatencyModel
    horizon_calls: int

    def horizon_ms(
        self, size: int, prefilled: int, growth: float, reset: tuple[int, int], hard_limit: int
    ) -> float:
        """The mean predicted TTFT of this call and the next ones, the cache warm after it.

        Args:
            size: The prompt's tokens.
            prefilled: Those the server is expected to prefill.
            growth: Tokens the conversation adds per call.
            reset: (size, prefilled) of the cut forced when the prompt would pass the limit.
            hard_limit: The prompt tokens no request exceeds.
        """
        total = self.latency_model.predict(prefilled, size)
        context, fresh = float(size), float(prefilled)
        for _ in range(self.horizon_calls - 1):
            if context + growth > hard_limit:
                context, fresh = float(reset[0]), float(reset[1])
            else:
                context, fresh = context + growth, growth
            total += self.latency_model.predict(fresh, context)
        return total / self.horizon_calls

    def miss_after_ms(self, size: int, shared: int) -> float | None:
        """The time to first token past which a prompt of ``size`` tokens, the first ``shared``
        of them expected cached, was not served from the cache: the geometric mean of the
        predicted hit and miss; ``None`` when they are too close to tell apart."""
        hit = self.latency_model.predict(size - shared, size)
        miss = self.latency_model.predict(size, size)
        if miss < hit * TIMING_EVIDENCE_RATIO:
            return None
        return math.sqrt(hit * miss)
