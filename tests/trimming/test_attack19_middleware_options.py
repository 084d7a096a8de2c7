"""Attacks on how ``TrimmingMiddleware`` takes its options (helper attack19).

Defect fixed (the test failed before): ``TrimmingMiddleware.from_settings(settings,
recall=False)`` (or ``cache_key=``, ``session_header=``), the middleware's own documented
keywords, was refused as "PriorityTrimmer: unknown option 'recall'. Fix: remove it.": the fix
given dropped the user's intent (recall stays on). ``from_settings`` now takes them.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_latency import Settings
from agent_latency.trimming import TrimmingMiddleware


@pytest.mark.parametrize(
    "option",
    [{"recall": False}, {"cache_key": False}, {"session_header": "x-session-id"}],
    ids=["recall", "cache_key", "session_header"],
)
def test_from_settings_takes_the_middlewares_own_options_or_says_where_they_go(
    option: dict[str, Any],
) -> None:
    try:
        middleware = TrimmingMiddleware.from_settings(Settings(), **option)
    except TypeError as error:
        # The fix must keep what was asked for: build the middleware around the trimmer.
        assert "remove it" not in str(error) and "TrimmingMiddleware(" in str(error), str(error)
    else:
        if "recall" in option:
            assert middleware.recalling is None
        else:
            assert all(getattr(middleware, name) == value for name, value in option.items())
