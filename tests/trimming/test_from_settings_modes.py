"""A mode the builder does not build is an error, not another trimmer.

Settings built in code with a mode that does not exist got a prefix-stable trimmer without a word.
"""

from __future__ import annotations

import pytest

from agent_latency import PromptSettings, Settings
from agent_latency.trimming import PriorityTrimmer, trimmer_from_settings


def _settings(mode: str) -> Settings:
    return Settings(prompt=PromptSettings(mode=mode, token_budget=1200))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "fix"),
    [
        ("cost-aware", r"prompt\.mode 'cost-aware' is no mode .* Fix: use one of"),
        # Removed: the fix a file naming it gets.
        ("cost_aware", r"prompt\.mode 'cost_aware' was removed \(.*\)\. Fix: set prompt\.mode"),
    ],
    ids=["no mode", "removed"],
)
@pytest.mark.parametrize(
    "build", [trimmer_from_settings, PriorityTrimmer.from_settings], ids=["factory", "class"]
)
def test_a_mode_that_does_not_exist_is_refused_with_its_fix(
    build: object, mode: str, fix: str
) -> None:
    with pytest.raises(ValueError, match=fix):
        build(_settings(mode))  # type: ignore[operator]
