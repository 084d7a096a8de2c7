"""One cost-aware decision: the prompt sent, the option it is, and what was foreseen of each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency.trimming._cache_state import CacheState
from agent_latency.trimming._latest_call import LatestCall
from agent_latency.trimming._result import TrimResult

Option = Literal["append", "cut", "deep_cut"]
"""Which prompt it sends: previous prompt + new messages, a cut to the budget, or a deeper cut."""


@dataclass(frozen=True)
class CostAwareChoice:
    """One cost-aware decision.

    Attributes:
        result: The trim sent. Its ``over_budget`` says whether it exceeds the budget: an
            ``append`` may, up to ``hard_limit``, unless the trimmer was built with
            ``allow_over_budget_on_warm_cache=False`` (``over_budget_cause`` then says so).
            Its ``on_usage`` takes the server's usage of the request and its time to first
            token (the callback handler calls it).
        cache_state: The cache state assumed.
        option: The option taken.
        predicted_ms: Each option considered, with its predicted mean TTFT over the next calls;
            empty (no prediction: the cut is sent) while the latency model has too little
            evidence of the endpoint.
        hard_limit: The prompt tokens never exceeded, in the server's tokens.
        record: What the trimmer keeps of this call for the conversation's next one
            (:meth:`LatestCall.to_state` makes it a value an agent's state can carry).
    """

    result: TrimResult
    cache_state: CacheState
    option: Option
    predicted_ms: Mapping[Option, float]
    hard_limit: int
    record: LatestCall

    def span_attributes(self) -> dict[str, AttributeValue]:
        """Returns the trim span's attributes: the trim's, then the cost-aware ones."""
        attributes = self.result.span_attributes()
        attributes[semconv.TRIM_CACHE_STATE] = self.cache_state
        attributes[semconv.TRIM_OPTION] = self.option
        attributes[semconv.TRIM_HARD_LIMIT] = self.hard_limit
        for option, ms in self.predicted_ms.items():
            attributes[semconv.TRIM_PREDICTED_TTFT_PREFIX + option] = round(ms, 1)
        return attributes
