"""The prefill line: how time to first token grows with the prompt.

Both ``bench`` (a sweep of budgets) and ``doctor`` (two or three probes) fit it, and both use it
to tell the user the cost of each 1,000 prompt tokens and the budget that keeps TTFT in bounds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class PrefillFit:
    """The least-squares line TTFT = ``intercept_ms`` + ``ms_per_1k_tokens`` × tokens / 1000."""

    intercept_ms: float
    ms_per_1k_tokens: float

    def ttft_ms(self, tokens: float) -> float:
        """The fitted TTFT for a prompt of ``tokens`` tokens."""
        return self.intercept_ms + self.ms_per_1k_tokens * tokens / 1000

    def budget_under(self, ttft_ms: float) -> int | None:
        """Returns the most prompt tokens whose fitted TTFT stays under ``ttft_ms``.

        ``None`` means no limit (TTFT does not grow with the prompt); 0 means even an empty
        prompt is predicted to take longer.
        """
        if self.ms_per_1k_tokens <= 0:
            return None
        return max(0, math.floor((ttft_ms - self.intercept_ms) / self.ms_per_1k_tokens * 1000))


def fit_prefill(samples: Iterable[tuple[float, float]]) -> PrefillFit | None:
    """Fits TTFT against prompt tokens by least squares.

    Args:
        samples: ``(prompt_tokens, ttft_ms)`` pairs.

    Returns:
        The line, or ``None`` without two distinct prompt sizes.
    """
    pairs = list(samples)
    sizes = [float(tokens) for tokens, _ in pairs]
    if len(set(sizes)) < 2:
        return None
    slope, intercept = statistics.linear_regression(sizes, [ttft for _, ttft in pairs])
    return PrefillFit(intercept_ms=intercept, ms_per_1k_tokens=slope * 1000)
