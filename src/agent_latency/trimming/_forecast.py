"""What the cost-aware trimmer foresees of its options.

:class:`Forecast` turns the endpoint's :class:`~agent_latency._latency_model.LatencyModel` into
the two figures a decision needs: an option's mean time to first token over the next calls
(this one, then the conversation growing on a warm cache, cut again when it reaches the hard
limit), and the time to first token past which a call was not served from the cache (the
evidence of a server that reports no cached tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent_latency._latency_model import LatencyModel
from agent_latency.trimming._cache_state import TIMING_EVIDENCE_RATIO


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
            hard_limit: The prompt tokens an appended prompt may reach (the hard limit, or the
                budget where appends must keep to it).
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
