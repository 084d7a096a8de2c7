"""The trimmer of the mode the settings name (``prompt.mode``)."""

from __future__ import annotations

from typing import Any

from agent_latency.config import Settings
from agent_latency.trimming._cost_aware import CostAwareTrimmer
from agent_latency.trimming._trimmer import PriorityTrimmer, unbuilt_mode


def trimmer_from_settings(settings: Settings, **options: Any) -> PriorityTrimmer | CostAwareTrimmer:
    """Builds the trimmer of ``settings.prompt.mode``.

    ``"prefix_stable"`` (the default) and ``"moving_cut"`` give
    :meth:`PriorityTrimmer.from_settings`, ``"cost_aware"`` gives
    :meth:`CostAwareTrimmer.from_settings`; docs/trimming.md says which wins where.

    Args:
        settings: Loaded settings.
        **options: Keyword options of the chosen ``from_settings``; they win over the settings.

    Returns:
        The trimmer, ready for :class:`TrimmingMiddleware` or a chain.

    Raises:
        ValueError: When ``prompt.mode`` is none of these (settings built in code are not
            checked as loaded ones are); no trimmer of another mode stands in for it.
    """
    mode = settings.prompt.mode
    if mode == "cost_aware":
        return CostAwareTrimmer.from_settings(settings, **options)
    if mode in ("prefix_stable", "moving_cut"):
        return PriorityTrimmer.from_settings(settings, **options)
    raise ValueError(unbuilt_mode("trimmer_from_settings", mode))
