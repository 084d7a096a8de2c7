"""Learning how the server counts prompt tokens, from its own ``usage.prompt_tokens``.

A :class:`PromptCalibration` learns, per (endpoint, model), the ratio of the server's count to
ours from the calls a trim prepared (the callback handler feeds them); the trimmer divides its
budget by :attr:`PromptCalibration.factor`, a high quantile of the recent ratios, outliers left
out, so a trim rarely lands above the budget by the server's count.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from typing import Final

from agent_latency._validation import is_integer

MIN_OBSERVATIONS: Final = 3
"""Observations needed before :attr:`PromptCalibration.factor` departs from 1.0."""

WINDOW: Final = 64
"""How many recent ratios a calibration keeps."""

QUANTILE: Final = 0.9
"""The quantile of the recent ratios used as the factor, once there are enough of them."""

_PLAUSIBLE_RATIO: Final = (0.2, 5.0)
"""Ratios outside this range come from a count of another prompt and are ignored."""

_OUTLIER_SPREAD: Final = 0.15
"""Ratios further than this (relative) from the median of the window are left out."""

_MAX_ENDPOINTS: Final = 256
"""The process-wide registry forgets the least recently used (endpoint, model) past this."""


class PromptCalibration:
    """The correction from our prompt token count to the server's, for one endpoint and model.

    Thread-safe; memory is bounded by :data:`WINDOW`.

    Args:
        model: The model it is the calibration of (:func:`calibration_for` names it): a trim
            made with it names that model, and the callback handler teaches it only the counts
            of calls to it, not those of a fallback model.

    Attributes:
        observations: How many plausible (estimate, actual) pairs were observed.
        model: The model it is the calibration of, if named.
    """

    def __init__(self, model: str | None = None) -> None:
        self.model = model
        self._ratios: deque[float] = deque(maxlen=WINDOW)
        self._lock = threading.Lock()
        self._factor = 1.0
        self.observations = 0

    def __repr__(self) -> str:
        return f"PromptCalibration(factor={self._factor:.4f}, observations={self.observations})"

    @property
    def factor(self) -> float:
        """The server's tokens per token of ours; 1.0 until :data:`MIN_OBSERVATIONS` pairs."""
        return self._factor

    def observe(self, estimated: int, actual: int) -> None:
        """Records our raw count of a prompt as sent and the server's count of it.

        Pairs that cannot be a count of the same prompt (a non-positive or non-integer value, a
        ratio beyond 5x either way) are ignored.

        Args:
            estimated: Our count of the whole request (``TrimResult.tokens_after``).
            actual: The server's ``usage.prompt_tokens`` for that request.
        """
        if not (_is_count(estimated) and _is_count(actual)):
            return
        ratio = actual / estimated
        if not _PLAUSIBLE_RATIO[0] <= ratio <= _PLAUSIBLE_RATIO[1]:
            return
        with self._lock:
            self._ratios.append(ratio)
            self.observations += 1
            self._factor = _factor(list(self._ratios))


def _is_count(value: object) -> bool:
    return is_integer(value) and value > 0


def _factor(ratios: list[float]) -> float:
    """A high quantile of the ratios near their median (the nearest-rank method)."""
    if len(ratios) < MIN_OBSERVATIONS:
        return 1.0
    ordered = sorted(ratios)
    median = ordered[len(ordered) // 2]
    inliers = [r for r in ordered if abs(r - median) <= _OUTLIER_SPREAD * median]
    rank = max(math.ceil(QUANTILE * len(inliers)), 1)
    return inliers[rank - 1]


_registry: dict[tuple[str, str], PromptCalibration] = {}
_registry_lock = threading.Lock()


def calibration_for(base_url: str | None, model: str) -> PromptCalibration:
    """Returns the process-wide calibration of an endpoint (``None``: the provider's default)
    and model, made on first use."""
    key = ((base_url or "").rstrip("/"), model)
    with _registry_lock:
        calibration = _registry.pop(key, None) or PromptCalibration(model)
        _registry[key] = calibration  # re-inserted: the dict's order is the recency
        if len(_registry) > _MAX_ENDPOINTS:
            del _registry[next(iter(_registry))]
        return calibration
