"""A mode the builder does not build is an error, not another trimmer (issue 29, item 5).

``PriorityTrimmer.from_settings(settings)`` with ``mode = "cost_aware"`` returned a prefix-stable
trimmer without a word, and settings built in code with a mode that does not exist got one too.
"""

from __future__ import annotations

import pytest

from agent_latency import PromptSettings, Settings
from agent_latency.trimming import CostAwareTrimmer, PriorityTrimmer, trimmer_from_settings


def _settings(mode: str) -> Settings:
    return Settings(prompt=PromptSettings(mode=mode, token_budget=1200))  # type: ignore[arg-type]


def test_priority_trimmer_refuses_the_cost_aware_mode_and_names_the_fix() -> None:
    with pytest.raises(ValueError) as caught:
        PriorityTrimmer.from_settings(_settings("cost_aware"))

    message = str(caught.value)
    assert message.startswith("PriorityTrimmer.from_settings: prompt.mode is 'cost_aware'")
    for named in (
        "llm.prompt.mode",
        "promptTrimmer.mode",
        "trimmer_from_settings(settings)",
        "TrimmingMiddleware.from_settings(settings)",
    ):
        assert named in message


def test_a_priority_trimmer_asked_for_by_its_cut_is_built_whatever_the_mode() -> None:
    trimmer = PriorityTrimmer.from_settings(_settings("cost_aware"), prefix_stable=False)

    assert trimmer.prefix_stable is False and trimmer.budget == 1200


def test_the_factory_still_builds_the_cost_aware_trimmer() -> None:
    trimmer = trimmer_from_settings(_settings("cost_aware"))

    assert isinstance(trimmer, CostAwareTrimmer)
    assert trimmer.trimmer.prefix_stable is True
    assert all(deep.prefix_stable for deep in trimmer.deep_trimmers)


@pytest.mark.parametrize(
    "build", [trimmer_from_settings, PriorityTrimmer.from_settings], ids=["factory", "class"]
)
def test_a_mode_that_does_not_exist_is_refused(build: object) -> None:
    with pytest.raises(
        ValueError, match=r"prompt\.mode 'cost-aware' is no mode .* Fix: use one of"
    ):
        build(_settings("cost-aware"))  # type: ignore[operator]
