"""The trimmer of the mode the settings name (``prompt.mode``)."""

from __future__ import annotations

from typing import Any

from agent_latency.config import Settings
from agent_latency.trimming._cost_aware import CostAwareTrimmer
from agent_latency.trimming._trimmer import PriorityTrimmer


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
    """
    if settings.prompt.mode == "cost_aware":
        return CostAwareTrimmer.from_settings(settings, **options)
    return PriorityTrimmer.from_settings(settings, **options)
