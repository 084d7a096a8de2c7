"""The trimmer of the mode the settings name (``prompt.mode``)."""

from __future__ import annotations

from typing import Any

from agent_latency.config import Settings
from agent_latency.trimming._trimmer import PriorityTrimmer


def trimmer_from_settings(settings: Settings, **options: Any) -> PriorityTrimmer:
    """Builds the trimmer of ``settings.prompt.mode``.

    ``"prefix_stable"`` (the default, which cuts cache-first) and ``"moving_cut"`` both give
    :meth:`PriorityTrimmer.from_settings`; docs/trimming.md says which wins where.

    Args:
        settings: Loaded settings.
        **options: Keyword options of :meth:`PriorityTrimmer.from_settings`; they win over the
            settings.

    Returns:
        The trimmer, ready for :class:`TrimmingMiddleware` or a chain.

    Raises:
        ValueError: When ``prompt.mode`` is neither (settings built in code are not checked as
            loaded ones are); no trimmer of another mode stands in for it.
    """
    return PriorityTrimmer.from_settings(settings, **options)
